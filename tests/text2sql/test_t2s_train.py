"""Packed training sequences: several questions of one schema share the DDL's tokens once, yet every answer
is scored in exactly the context the evaluation gives it (its own prompt alone), at the same positions."""

import random

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from engine.loader import resolve_model
from integrations.text2sql.training import packed_attention, train_data
from integrations.text2sql.training.packed_attention import PackedLayout
from integrations.text2sql.training.train import TERMINATOR, _batches, _loss, attention_mask, encode, pack_examples
from tests.engine.conftest import make_tiny_llama


def test_each_packed_answer_sees_only_its_own_prompt(tmp_path):
    base = make_tiny_llama(tmp_path / "tiny", resolve_model("default"), layers=2)
    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    examples = train_data.generate(1, per_schema=3, seed=5)
    (pack,) = pack_examples(examples, 3)
    enc = encode(tok, pack, 4096)
    assert enc.segments.count(0) > 100  # the DDL is shared, not repeated
    assert len(enc.ids) < sum(len(tok(ex.prompt()).input_ids) for ex in pack)
    ids, labels, positions, segments = next(_batches([enc], 1, random.Random(0), 0))
    with torch.no_grad():
        packed = model(input_ids=ids, attention_mask=attention_mask(segments), position_ids=positions).logits[0]
        for k, ex in enumerate(pack, start=1):
            alone = tok(ex.prompt(), add_special_tokens=False).input_ids
            alone += tok(ex.sql.strip().rstrip(";") + TERMINATOR, add_special_tokens=False).input_ids
            rows = [i for i, s in enumerate(enc.segments) if s == k][:-1]  # the last is EOS, not in `alone`
            assert ids[0, rows].tolist() == alone[-len(rows):]
            assert positions[0, rows].tolist() == list(range(len(alone) - len(rows), len(alone)))
            expected = model(input_ids=torch.tensor([alone])).logits[0, -len(rows):]
            torch.testing.assert_close(packed[rows], expected, atol=1e-4, rtol=1e-4)
            answer = [i for i in rows + [rows[-1] + 1] if labels[0, i] != -100]
            assert tok.decode(ids[0, answer[:-1]]) == ex.sql.strip().rstrip(";") + TERMINATOR


def test_mask_segments_see_the_prefix_and_themselves_and_no_padding():
    mask = attention_mask(torch.tensor([[0, 0, 1, 1, 2, -1]]))[0, 0]
    assert mask[3].tolist() == [True, True, True, True, False, False]
    assert mask[4].tolist() == [True, True, False, False, True, False]
    assert mask[5].tolist() == [True, True, False, False, False, True]  # padding: its output is never used
    assert not mask[:5, 5].any()


def test_a_pack_longer_than_max_len_is_left_out(tmp_path):
    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    (pack,) = pack_examples(train_data.generate(1, per_schema=3, seed=5), 3)
    n = len(encode(tok, pack, 100_000).ids)
    assert encode(tok, pack, n) is not None and encode(tok, pack, n - 1) is None


def test_packed_attention_is_the_masked_attention_for_its_work(tmp_path):
    """Prefix and segments attended apart give the dense masked attention's loss and gradients."""
    from peft import LoraConfig, get_peft_model

    base = make_tiny_llama(tmp_path / "tiny", resolve_model("default"), layers=2)
    tok = AutoTokenizer.from_pretrained(base)
    (pack,) = pack_examples(train_data.generate(1, per_schema=4, seed=5), 4)
    batch = next(_batches([encode(tok, pack, 4096)], 1, random.Random(0), 0))
    packed_attention.register()
    results = []
    for impl in ("sdpa", packed_attention.NAME):
        torch.manual_seed(0)
        model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
        model.set_attn_implementation(impl)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False, task_type="CAUSAL_LM"))
        if impl == packed_attention.NAME:  # it is this function that runs: without a layout it refuses
            assert model.get_base_model().config.num_key_value_heads < model.get_base_model().config.num_attention_heads
            with pytest.raises(ValueError, match="packed_layout"):
                model(input_ids=batch[0])
        loss = _loss(model, *batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), grads))
    (dense_loss, dense_grads), (packed_loss, packed_grads) = results
    torch.testing.assert_close(packed_loss, dense_loss, atol=1e-5, rtol=1e-5)
    assert dense_grads.keys() == packed_grads.keys() and dense_grads
    for name, grad in dense_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4)


def test_packed_layout_gathers_each_segment_after_the_prefix():
    lay = PackedLayout.of(torch.tensor([0, 0, 0, 1, 1, 2, 3, 3, 3]))
    assert lay.prefix == 3
    assert lay.gather.tolist() == [[3, 4, 4], [5, 5, 5], [6, 7, 8]]
    assert lay.valid.tolist() == [[True, True, False], [True, False, False], [True, True, True]]
    # segment 1, step 1: the prefix and its own first two keys
    assert lay.keys[0, 0, 1].tolist() == [True, True, True, True, True, False]
    assert lay.keys[2, 0, 0].tolist() == [True, True, True, True, False, False]
    with pytest.raises(ValueError, match="prefix first"):
        PackedLayout.of(torch.tensor([0, 0, 2, 1]))
    with pytest.raises(ValueError, match="prefix first"):
        PackedLayout.of(torch.tensor([0, 1, 1, -1]))
