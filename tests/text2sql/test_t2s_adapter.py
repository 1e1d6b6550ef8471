"""The text-to-SQL adapter: `sllm text2sql train` writes an adapter PEFT and our engine both load; the
shipped adapter changes what the default model writes; execution-guided selection keeps the result
most candidates agree on (real queries on a real SQLite database)."""

import json
import os

import pytest
import torch
from typer.testing import CliRunner

from engine import LLM, SamplingParams
from engine.loader import resolve_model
from integrations.text2sql.adapter import LORA_NAME, SHIPPED, AdapterStyle, adapter_style, resolve_adapter
from integrations.text2sql.ask import run_sql
from integrations.text2sql.generate import SQLGenerator, llm_complete, llm_complete_batch
from integrations.text2sql.grammar import GrammarOptions
from integrations.text2sql.selection import ask_selected, choose
from integrations.text2sql.sources import demo_source
from integrations.text2sql.training import cli, train_data
from tests.engine.conftest import make_tiny_llama


def test_train_writes_an_adapter_peft_and_the_engine_load(tmp_path):
    base = make_tiny_llama(tmp_path / "tiny", resolve_model("default"), layers=2)
    data = tmp_path / "train.jsonl.gz"
    train_data.write(train_data.generate(2, per_schema=6, seed=3), data)
    out = tmp_path / "adapter"
    res = CliRunner().invoke(cli.app, ["train", str(out), "--data", str(data), "--base", str(base), "--max-steps", "2",
                                       "--pack", "3", "--layers", "1", "--lr", "1e-2", "--max-len", "4096",
                                       "--no-progress"])
    assert res.exit_code == 0, res.output
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["layers_to_transform"] == [1]
    meta = json.loads((out / "training.json").read_text())
    assert meta["steps"] == 2 and meta["final_loss"] > 0 and meta["too_long"] == 0

    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    weights = load_file(str(out / "adapter_model.safetensors"))
    assert all(v.dtype == torch.float16 for v in weights.values())
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in weights.items())  # it trained
    PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base), out)
    llm = LLM(model=str(base), enable_lora=True, max_lora_rank=8, num_kv_blocks=32, lora_modules={"t": str(out)})
    outs = llm.generate(["SELECT"], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False,
                        lora_request="t")
    assert len(outs[0].outputs[0].token_ids) == 4
    llm.engine.block_manager.check_no_leak()
    # the style its golds were written in, and prompts with value hints as its data had them
    assert any(ex.hints for ex in train_data.read(data))
    assert adapter_style(out) == AdapterStyle(GrammarOptions(table_aliases=False, foreign_key_joins=True), True)

    more = tmp_path / "more"  # --init: training goes on from that adapter, in its shape
    res = CliRunner().invoke(cli.app, ["train", str(more), "--data", str(data), "--base", str(base), "--max-steps",
                                       "1", "--pack", "3", "--init", str(out), "--lr", "1e-2", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert json.loads((more / "adapter_config.json").read_text())["layers_to_transform"] == [1]
    after = load_file(str(more / "adapter_model.safetensors"))
    assert after.keys() == weights.keys() and any(not torch.equal(after[k], weights[k]) for k in weights)

    wide = tmp_path / "wide"  # --extend-layers: LoRA on every layer now, layer 1 going on from `out`
    res = CliRunner().invoke(cli.app, ["train", str(wide), "--data", str(data), "--base", str(base), "--max-steps",
                                       "1", "--pack", "3", "--init", str(out), "--extend-layers", "--layers", "0",
                                       "--precision", "bf16", "--batch-size", "1", "--lr", "1e-2",
                                       "--no-progress"])  # one sequence a step: packed attention
    assert res.exit_code == 0, res.output
    assert json.loads((wide / "adapter_config.json").read_text())["layers_to_transform"] == [0, 1]
    assert json.loads((wide / "training.json").read_text())["config"]["precision"] == "bf16"
    widened = load_file(str(wide / "adapter_model.safetensors"))
    assert weights.keys() < widened.keys() and any(".layers.0." in k for k in widened)
    res = CliRunner().invoke(cli.app, ["train", str(wide), "--data", str(data), "--base", str(base),
                                       "--extend-layers", "--no-progress"])
    assert res.exit_code != 0 and "--init" in res.output


def test_a_time_budget_ends_training_and_writes_checkpoints_by_the_clock(tmp_path):
    """--max-minutes (a GPU lease): training stops when the budget is spent, whatever the step count, and
    --save-every-minutes leaves checkpoints on the way."""
    base = make_tiny_llama(tmp_path / "tiny", resolve_model("default"), layers=2)
    data = tmp_path / "train.jsonl.gz"
    train_data.write(train_data.generate(2, per_schema=6, seed=3), data)
    out = tmp_path / "timed"
    res = CliRunner().invoke(cli.app, ["train", str(out), "--data", str(data), "--base", str(base), "--max-minutes",
                                       "0.05", "--save-every-minutes", "0.01", "--pack", "3", "--layers", "1",
                                       "--batch-size", "2", "--no-progress"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "training.json").read_text())
    assert meta["seconds"] >= 3 and meta["steps"] > 1  # more steps than one pass: the clock, not the data, ends it
    steps = sorted(int(p.name.split("-")[1]) for p in out.glob("step-*"))
    assert steps and steps[-1] < meta["steps"]
    assert all((out / f"step-{n}" / "adapter_model.safetensors").exists() for n in steps)


def test_the_time_schedule_warms_up_then_decays_to_a_tenth():
    from integrations.text2sql.training.train import lr_share

    assert lr_share(0.0, 0.1) == 0.01 and lr_share(0.05, 0.1) == pytest.approx(0.5)
    assert lr_share(0.1, 0.1) == pytest.approx(1.0)
    shares = [lr_share(p / 100, 0.1) for p in range(10, 101)]
    assert all(a >= b for a, b in zip(shares, shares[1:], strict=False))
    assert lr_share(1.0, 0.1) == pytest.approx(0.1) and lr_share(1.5, 0.1) == pytest.approx(0.1)


def test_the_dense_mask_is_built_where_the_segments_are():
    from integrations.text2sql.training.train import attention_mask

    segments = torch.tensor([[0, 1, 1, -1]], device="meta")
    assert attention_mask(segments).device.type == "meta"


def test_extended_adapter_starts_as_its_init(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    from integrations.text2sql.training.train import _extended

    base = make_tiny_llama(tmp_path / "tiny", resolve_model("default"), layers=3)
    torch.manual_seed(0)
    init = get_peft_model(LlamaForCausalLM.from_pretrained(base),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"],
                                     layers_to_transform=[2], task_type="CAUSAL_LM"))
    for name, p in init.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p)  # as if trained: the adapter changes the model
    init.save_pretrained(tmp_path / "init")
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        expected = init(input_ids=ids).logits
        model = _extended(LlamaForCausalLM.from_pretrained(base), str(tmp_path / "init"), [0, 1], seed=1)
        assert model.peft_config["default"].layers_to_transform == [0, 1, 2]
        assert model.peft_config["default"].r == 4
        torch.testing.assert_close(model(input_ids=ids).logits, expected)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".layers.0." in n and "lora_A" in n for n in trainable)


def test_adapter_setting():
    assert resolve_adapter("default", "default") == SHIPPED
    assert resolve_adapter("default", "/some/other/model") is None  # trained on the default model only
    assert resolve_adapter("none", "default") is None
    assert resolve_adapter(str(SHIPPED), "/other") == SHIPPED
    with pytest.raises(ValueError, match="adapter_config.json"):
        resolve_adapter("/no/such/adapter", "default")


def test_choose_keeps_the_result_most_candidates_agree_on():
    shop = demo_source("shop")
    sqls = ["SELECT COUNT(*) FROM products",  # the greedy candidate, outvoted
            "SELECT COUNT(*) FROM customers",
            "SELECT nope FROM customers",  # does not run: no vote
            "SELECT COUNT(customer_id) FROM customers"]  # other SQL, same rows: agrees with candidate 1
    results = [run_sql(shop, s) for s in sqls]
    assert choose(results) == (1, 2)
    assert choose(results[:2]) == (0, 1)  # a tie goes to the earliest, the greedy one
    assert choose([results[2]]) == (0, 0)  # nothing ran: the greedy result stands


def test_choose_prefers_an_answer_with_data_to_an_empty_one():
    shop = demo_source("shop")
    sqls = ["SELECT name FROM products WHERE price < 0",  # no rows: outvoted by data even with more votes
            "SELECT name FROM customers WHERE customer_id < 0",
            "SELECT MAX(price) FROM products WHERE price < 0",  # one row of NULL: no data either
            "SELECT COUNT(*) FROM products"]
    results = [run_sql(shop, s) for s in sqls]
    assert [r.rows for r in results[:3]] == [[], [], [(None,)]]
    assert choose(results) == (3, 1)
    assert choose(results[:3]) == (0, 2)  # all empty: the majority still wins


def _shipped_llm():
    return LLM(model="default", enable_lora=True, max_lora_rank=16, num_kv_blocks=256,
               lora_modules={LORA_NAME: str(SHIPPED)})


@pytest.mark.default_model
def test_shipped_adapter_changes_the_default_model():
    llm = _shipped_llm()
    shop = demo_source("shop")
    prompt = SQLGenerator(llm_complete(llm)).prompt(shop, "How many products are in the books category?")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
    base, adapted = llm.generate([prompt, prompt], params, use_tqdm=False, lora_request=[None, LORA_NAME])
    # Greedy tokens may agree on a short answer; the distributions they are picked from do not.
    assert base.outputs[0].logprobs and repr(base.outputs[0].logprobs) != repr(adapted.outputs[0].logprobs)
    llm.engine.block_manager.check_no_leak()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SLLM_SLOW"), reason="heavier: SLLM_SLOW=1")
@pytest.mark.default_model
def test_selection_on_the_adapted_default_model():
    llm = _shipped_llm()
    shop = demo_source("shop")

    greedy = SQLGenerator(llm_complete(llm, max_tokens=48, lora=LORA_NAME))
    sampler = SQLGenerator(llm_complete(llm, max_tokens=48, temperature=1.0, lora=LORA_NAME),
                           complete_batch=llm_complete_batch(llm, max_tokens=48, temperature=1.0, lora=LORA_NAME))
    res = ask_selected(shop, "How many customers are there?", greedy, sampler, 3)
    sel = res.selection
    assert sel["candidates"] == 3 and len(sel["sql"]) == 3 and res.sql == sel["sql"][sel["chosen"]]
    others = [run_sql(shop, s) for s in sel["sql"]]
    assert choose(others)[1] == sel["votes"]  # no other result set has more votes than the chosen one
    llm.engine.block_manager.check_no_leak()
