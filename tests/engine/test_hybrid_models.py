"""Qwen3.5, a hybrid of Gated DeltaNet linear-attention layers and full-attention ones, gives HF transformers'
greedy tokens (HF's own torch fallbacks of the delta rule are the reference) from a tiny random checkpoint: several
sequences of different lengths at once (a one-token prompt among them, so decode steps batch sequences at
different places in their recurrence), prompts in chunks (the state carried from chunk to chunk), preemption by
a tiny KV budget (the state dropped and recomputed with the blocks), n > 1 samples forked after the prompt (the
state copied), and the multimodal checkpoint's text model. Every recurrent-state slot is returned at the end, and
prefix caching is off for such models."""

import logging

import pytest
import torch
import transformers

from engine import LLM, SamplingParams
from tests.engine.test_model_families import TINY, Family, make_tiny, prompts_of

MAX_NEW = 10


def qwen3_5_config() -> transformers.Qwen3_5TextConfig:
    # Linear layers with 2 key heads serving 4 value heads, unequal key and value sizes; partial RoPE (a quarter)
    # and gated outputs in the full-attention layers. A smaller init range keeps logits from saturating.
    return transformers.Qwen3_5TextConfig(
        **{**TINY, "num_hidden_layers": 4, "initializer_range": 0.05}, head_dim=16, linear_conv_kernel_dim=4,
        linear_key_head_dim=8, linear_value_head_dim=12, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])


@pytest.fixture(scope="module")
def qwen3_5(tmp_path_factory, default_model_dir) -> Family:
    return Family("qwen3_5", make_tiny(tmp_path_factory.mktemp("qwen3_5"), qwen3_5_config(), default_model_dir, seed=4))


def _ours(family: Family, prompts: list[list[int]], params: SamplingParams | None = None, **config):
    llm = LLM(model=str(family.folder), **config)
    params = params or SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    llm.engine.runner.recurrent.check_no_leak()
    return llm, outs


def test_sequences_of_different_lengths_equal_hf(qwen3_5, caplog, monkeypatch):
    prompts = [prompts_of(1, seed=1, lo=1, hi=1)[0]] + prompts_of(4, seed=2, lo=5, hi=150)  # past the 64-token chunk
    monkeypatch.setattr("engine.model_runner.RECURRENT_SLOTS_AT_START", 2)  # the pool grows while they run
    with caplog.at_level(logging.INFO, logger="engine.llm_engine"):
        llm, outs = _ours(qwen3_5, prompts, num_kv_blocks=128, block_size=8)
    assert [o.outputs[0].token_ids for o in outs] == qwen3_5.hf(prompts)
    assert "prefix caching off" in caplog.text
    assert not llm.engine.scheduler.block_manager.enable_prefix_caching
    assert len(llm.engine.runner.kv_caches) == 2  # the full-attention layers only


def test_chunked_prefill_equals_hf(qwen3_5):
    prompts = prompts_of(3, seed=3, lo=30, hi=90)
    _, outs = _ours(qwen3_5, prompts, num_kv_blocks=128, block_size=8, max_num_batched_tokens=7)
    assert [o.outputs[0].token_ids for o in outs] == qwen3_5.hf(prompts)


def test_preemption_equals_hf(qwen3_5):
    prompts = prompts_of(8, seed=4, lo=20, hi=40)
    llm, outs = _ours(qwen3_5, prompts, num_kv_blocks=12, block_size=8)
    assert llm.engine.scheduler.num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == qwen3_5.hf(prompts)


def test_forked_samples_continue_the_parents_state(qwen3_5):
    """n = 2 greedy samples fork after the prompt: each must continue from a copy of the prompt's state."""
    prompt = prompts_of(1, seed=5, lo=25, hi=25)[0]
    params = SamplingParams(n=2, temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    _, outs = _ours(qwen3_5, [prompt], params, num_kv_blocks=64, block_size=8)
    expected = qwen3_5.hf([prompt])[0]
    assert [c.token_ids for c in outs[0].outputs] == [expected, expected]


def test_speculative_decoding_is_refused(qwen3_5, tiny_models):
    with pytest.raises(ValueError, match="speculative decoding is not supported"):
        LLM(model=str(qwen3_5.folder), num_kv_blocks=32,
            speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="has linear-attention layers"):  # nor can it draft for another model
        LLM(model=str(tiny_models["gqa"]), num_kv_blocks=32,
            speculative_config={"method": "draft", "model": str(qwen3_5.folder), "num_speculative_tokens": 2})


def test_multimodal_checkpoint_serves_its_text_model(tmp_path, default_model_dir):
    vision = transformers.Qwen3_5VisionConfig(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                                              out_hidden_size=64)
    config = transformers.Qwen3_5Config(text_config=qwen3_5_config(), vision_config=vision)
    auto = transformers.AutoModelForImageTextToText
    family = Family("qwen3_5_vl", make_tiny(tmp_path, config, default_model_dir, seed=6, auto=auto), auto=auto)
    prompts = prompts_of(2, seed=6, lo=3, hi=40)
    _, outs = _ours(family, prompts, num_kv_blocks=64, block_size=8)
    assert [o.outputs[0].token_ids for o in outs] == family.hf(prompts)


def test_gated_delta_rule_chunked_equals_recurrent():
    """The two forms of kernels/gated_delta.py agree: a prompt in chunks of 4 (uneven tail) and token by token."""
    from kernels.gated_delta import chunked_gated_delta, l2_normalize, recurrent_gated_delta

    torch.manual_seed(0)
    n, h, dk, dv = 11, 3, 8, 5
    q, k = l2_normalize(torch.randn(n, h, dk)), l2_normalize(torch.randn(n, h, dk))
    v, g, beta = torch.randn(n, h, dv), -torch.rand(n, h), torch.rand(n, h)
    state = torch.randn(h, dk, dv)
    out, final = chunked_gated_delta(q, k, v, g, beta, state, chunk_size=4)
    s, steps = state.unsqueeze(0), []
    for i in range(n):
        o, s = recurrent_gated_delta(q[i:i + 1], k[i:i + 1], v[i:i + 1], g[i:i + 1], beta[i:i + 1], s)
        steps.append(o[0])
    torch.testing.assert_close(out, torch.stack(steps), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(final, s[0], rtol=1e-4, atol=1e-5)
