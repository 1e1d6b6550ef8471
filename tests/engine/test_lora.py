"""LoRA adapters: greedy tokens equal HF PEFT's merged model, rows of one batch each get their own
adapter (or none), prefix caching never crosses adapters, and loading/unloading leaks no KV block."""

import json

import pytest
import torch

from engine import LLM, InvalidRequestError, LoRARequest, NotFoundError, SamplingParams
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import hf_greedy_choices, hf_greedy_with, make_tiny_llama
from tests.engine.lora_helpers import make_adapter, merged_model
from tests.engine.test_hf_parity import prompts_of

MAX_NEW = 10
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, default_model_dir):
    root = tmp_path_factory.mktemp("lora")
    base = make_tiny_llama(root / "base", default_model_dir, kv_heads=2, seed=3)
    a = make_adapter(base, root / "a", seed=10, r=4, alpha=8)
    b = make_adapter(base, root / "b", seed=11, r=8, alpha=4, use_rslora=True,
                     modules=["q_proj", "v_proj", "down_proj"])
    return base, {"a": a, "b": b}


@pytest.fixture(scope="module")
def expected(setup):
    """HF's greedy tokens: the base model, and each adapter merged into it."""
    from transformers import LlamaForCausalLM

    base, adapters = setup
    prompts = prompts_of(4, seed=7, lo=3, hi=40)
    models = {None: LlamaForCausalLM.from_pretrained(base).eval()}
    models.update({n: merged_model(base, p) for n, p in adapters.items()})
    return prompts, {n: [hf_greedy_with(m, p, MAX_NEW) for p in prompts] for n, m in models.items()}


def tokens(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def llm(setup):
    base, adapters = setup
    return LLM(model=str(base), enable_lora=True, max_loras=2, max_lora_rank=8, num_kv_blocks=128,
               lora_modules={"a": str(adapters["a"])})


def test_each_adapter_equals_hf_peft_merged(llm, setup, expected):
    _, adapters = setup
    prompts, want = expected
    assert want["a"] != want[None] and want["b"] != want[None]  # the adapters matter
    assert tokens(llm.generate(prompts, GREEDY, use_tqdm=False, lora_request="a")) == want["a"]
    b = LoRARequest("b", 2, str(adapters["b"]))  # loaded on first sight, as vLLM does
    assert tokens(llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=b)) == want["b"]
    assert tokens(llm.generate(prompts, GREEDY, use_tqdm=False)) == want[None]
    llm.engine.block_manager.check_no_leak()


def test_mixed_batch_gives_each_row_its_own_answer(llm, setup, expected):
    """Two adapters and none in one batch, prompts repeated across adapters so prefix caching would
    serve the wrong KV if its keys left the adapter out."""
    prompts, want = expected
    names = [None, "a", "b"]
    batch = [(p, n) for p in prompts for n in names]
    out = llm.generate([p for p, _ in batch], GREEDY, use_tqdm=False, lora_request=[n for _, n in batch])
    assert tokens(out) == [want[n][prompts.index(p)] for p, n in batch]
    llm.engine.block_manager.check_no_leak()


def test_load_unload_at_run_time_and_in_use(llm, setup, expected):
    _, adapters = setup
    prompts, want = expected
    eng = llm.engine
    with pytest.raises(InvalidRequestError, match="already loaded"):
        eng.add_lora("a", str(adapters["a"]))
    eng.add_request("busy", prompts[0], GREEDY, lora_request="a")
    with pytest.raises(InvalidRequestError, match="in flight"):
        eng.remove_lora("a")
    while eng.has_unfinished_requests():
        eng.step()
    eng.remove_lora("a")
    with pytest.raises(NotFoundError, match="does not exist") as err:  # a request that raced the unload: a 404
        eng.add_request("gone", prompts[0], GREEDY, lora_request="a")
    assert err.value.code == "model_not_found"
    # Reloaded under the same name: a new lora_int_id, so the old cached blocks are never served.
    eng.add_lora("a", str(adapters["b"]))
    assert tokens(llm.generate(prompts, GREEDY, use_tqdm=False, lora_request="a")) == want["b"]
    eng.remove_lora("a")
    eng.add_lora("a", str(adapters["a"]))
    eng.block_manager.check_no_leak()


def test_max_loras_evicts_idle_lru(setup, expected):
    base, adapters = setup
    prompts, want = expected
    llm = LLM(model=str(base), enable_lora=True, max_loras=1, max_lora_rank=8, num_kv_blocks=64,
              lora_modules={"a": str(adapters["a"]), "b": str(adapters["b"])})
    loras = llm.engine.runner.loras
    assert list(loras.resident) == [loras.registered["b"].lora_int_id]
    assert tokens(llm.generate(prompts[:2], GREEDY, use_tqdm=False, lora_request="a")) == want["a"][:2]
    assert list(loras.resident) == [loras.registered["a"].lora_int_id]
    llm.engine.add_request("x", prompts[0], GREEDY, lora_request="a")
    with pytest.raises(InvalidRequestError, match="max_loras"):
        llm.engine.add_request("y", prompts[0], GREEDY, lora_request="b")
    while llm.engine.has_unfinished_requests():
        llm.engine.step()
    llm.engine.block_manager.check_no_leak()


def test_a_stopped_last_sample_releases_its_adapter(setup):
    """stop_sequence (a repeated tool call) ending a request's only sample must let go of its adapter, or
    the adapter can never be unloaded or evicted (with max_loras=1 every other adapter is then refused)."""
    base, adapters = setup
    llm = LLM(model=str(base), enable_lora=True, max_loras=1, max_lora_rank=8, num_kv_blocks=64,
              lora_modules={"a": str(adapters["a"]), "b": str(adapters["b"])})
    eng = llm.engine
    eng.add_request("r1", [5, 6, 7, 8], GREEDY, lora_request="b")
    eng.step()
    assert eng.stop_sequence("r1", 0).finished and not eng.has_unfinished_requests()
    assert eng.runner.loras.in_use == {}
    eng.add_request("r2", [5, 6, 7, 8], GREEDY, lora_request="a")  # b's slot is free to evict
    while eng.has_unfinished_requests():
        eng.step()
    eng.remove_lora("b")
    eng.block_manager.check_no_leak()


def test_a_refused_prompt_fails_the_whole_offline_batch_and_leaves_nothing_behind(setup):
    base, adapters = setup
    llm = LLM(model=str(base), enable_lora=True, max_loras=1, max_lora_rank=8, num_kv_blocks=64,
              lora_modules={"a": str(adapters["a"]), "b": str(adapters["b"])})
    with pytest.raises(InvalidRequestError, match="max_loras"):  # a's request holds the one slot b needs
        llm.generate([[5, 6, 7], [8, 9, 10]], GREEDY, use_tqdm=False, lora_request=["a", "b"])
    assert llm.engine.requests == {} and llm.engine.runner.loras.in_use == {}
    assert len(llm.generate([[11, 12, 13]], GREEDY, use_tqdm=False)) == 1
    llm.engine.block_manager.check_no_leak()


def test_a_lora_request_naming_a_loaded_adapter_from_another_folder_is_refused(llm, setup, expected):
    """Serving it with the loaded adapter's weights would be a silent wrong answer."""
    _, adapters = setup
    prompts, want = expected
    with pytest.raises(InvalidRequestError, match="unload it first"):
        llm.generate(prompts[:1], GREEDY, use_tqdm=False, lora_request=LoRARequest("a", 77, str(adapters["b"])))
    same = LoRARequest("a", 78, str(adapters["a"]) + "/")  # the same folder, spelt otherwise
    assert tokens(llm.generate(prompts[:1], GREEDY, use_tqdm=False, lora_request=same)) == want["a"][:1]
    llm.engine.block_manager.check_no_leak()


def test_damaged_adapter_folders_are_refused_with_the_reason(llm, setup, tmp_path):
    import shutil

    _, adapters = setup
    cfg = json.loads((adapters["a"] / "adapter_config.json").read_text())
    cases = {"not readable JSON": ("adapter_config.json", "{not json"),
             "not an object": ("adapter_config.json", "[1, 2]"),
             "must be numbers": ("adapter_config.json", json.dumps({**cfg, "r": "eight"})),
             "cannot be read": ("adapter_model.safetensors", "garbage, not a safetensors file")}
    for i, (why, (name, text)) in enumerate(cases.items()):
        folder = tmp_path / f"bad{i}"
        shutil.copytree(adapters["a"], folder)
        (folder / name).write_text(text)
        with pytest.raises(InvalidRequestError, match=why) as err:
            llm.engine.add_lora(f"bad{i}", str(folder))
        assert err.value.param == "lora_path"
    assert not {r.lora_name for r in llm.engine.list_loras()} & {f"bad{i}" for i in range(len(cases))}


def test_a_config_without_lora_alpha_takes_peft_default_of_8(setup, tmp_path):
    """PEFT's LoraConfig writes lora_alpha, but its default is 8 (not r) when a hand-written config omits it."""
    from engine.lora import _config

    base, adapters = setup
    cfg = json.loads((adapters["b"] / "adapter_config.json").read_text())
    cfg.pop("lora_alpha")
    cfg["use_rslora"] = False
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    assert _config(tmp_path, 8) == (8, 1.0) and cfg["r"] == 8
    cfg["r"] = 4
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    assert _config(tmp_path, 8) == (4, 2.0)


def test_refuses_what_it_cannot_apply(llm, setup, tmp_path):
    base, adapters = setup
    big = make_adapter(base, tmp_path / "big", seed=1, r=16)
    with pytest.raises(InvalidRequestError, match="max_lora_rank"):
        llm.engine.add_lora("big", str(big))
    dora = tmp_path / "dora"
    dora.mkdir()
    cfg = json.loads((adapters["a"] / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    with pytest.raises(InvalidRequestError, match="DoRA"):
        llm.engine.add_lora("dora", str(dora))
    with pytest.raises(InvalidRequestError, match="adapter_config.json"):
        llm.engine.add_lora("none", str(tmp_path / "missing"))
    assert "big" not in {r.lora_name for r in llm.engine.list_loras()}
    plain = LLM(model=str(base), num_kv_blocks=16)
    with pytest.raises(InvalidRequestError, match="enable_lora"):
        plain.engine.add_request("r", [5, 6, 7], GREEDY, lora_request="a")


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_mixed_batch_on_every_cpu_path(setup, expected, cpu_path):
    base, adapters = setup
    prompts, want = expected
    llm = LLM(model=str(base), enable_lora=True, max_lora_rank=8, num_kv_blocks=64,
              lora_modules={n: str(p) for n, p in adapters.items()})
    names = ["b", None, "a", "a"]
    out = llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=names)
    assert tokens(out) == [want[n][i] for i, n in enumerate(names)]
    llm.engine.block_manager.check_no_leak()


def test_default_model_with_adapter_equals_hf_peft(default_model_dir, tmp_path):
    """HF's greedy choices are checked with one forward pass per answer (hf_greedy_choices): the same claim
    as comparing with `generate`'s tokens, which cost a pass over the model's weights per token."""
    adapter = make_adapter(default_model_dir, tmp_path / "smol", seed=5, r=2, alpha=4, std=0.05)
    prompts = ["SELECT name FROM", "The capital of France is", "def fib(n):"]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    llm = LLM(model="default", enable_lora=True, max_lora_rank=8, num_kv_blocks=64,
              lora_modules={"smol": str(adapter)})
    ids = [llm.engine.tokenize(p) for p in prompts]
    got = tokens(llm.generate(ids + ids, params, use_tqdm=False, lora_request=["smol"] * 3 + [None] * 3))
    with_adapter, without = got[:3], got[3:]
    assert all(len(t) == 16 for t in got)
    assert with_adapter != without  # the adapter matters
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    plain = LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    assert [hf_greedy_choices(plain, p, t) for p, t in zip(ids, without, strict=True)] == without
    merged = PeftModel.from_pretrained(plain, adapter).merge_and_unload().eval()  # merged into `plain`
    assert [hf_greedy_choices(merged, p, t) for p, t in zip(ids, with_adapter, strict=True)] == with_adapter
    llm.engine.block_manager.check_no_leak()
