"""Qwen3.5, a hybrid of Gated DeltaNet linear-attention layers and full-attention ones, gives HF transformers'
greedy tokens (HF's own torch fallbacks of the delta rule are the reference) from a tiny random checkpoint: several
sequences of different lengths at once (a one-token prompt among them, so decode steps batch sequences at
different places in their recurrence), prompts in chunks (the state carried from chunk to chunk), preemption by
a tiny KV budget (the state dropped and recomputed with the blocks), n > 1 samples forked after the prompt (the
state copied), and the multimodal checkpoint's text model. Every recurrent-state slot is returned at the end. Prefix
caching (engine/state_snapshots.py): later prompts sharing a prefix, continuing or repeating an earlier one skip
the prefix up to a kept state, and give the same tokens, on every CPU path, in chunks and under preemption; the
snapshot pool keeps to its bound and lets its snapshots go with their blocks. A GGUF file written by llama.cpp's
own converter gives the same tokens."""

import json
import logging
import shutil
from pathlib import Path

import gguf
import pytest
import torch
import transformers

from engine import LLM, EngineConfig, SamplingParams
from engine.gguf_file import GGUFFile
from engine.loader import open_model
from tests.cpu_paths import cpu_paths
from tests.engine.test_model_families import TINY, Family, make_tiny, prompts_of
from tests.gguf_files import llama_cpp_gguf

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
    assert "recurrent states kept every 256 prompt tokens" in caplog.text
    assert llm.engine.scheduler.block_manager.enable_prefix_caching
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


SHARED = prompts_of(1, seed=11, lo=100, hi=100)[0]
FIRST = SHARED + prompts_of(1, seed=12, lo=20, hi=20)[0]  # 120 tokens: ends on a block boundary (8)


def _check_pools(llm: LLM) -> None:
    """Every slot and snapshot entry accounted for, no snapshot outlives its block in the prefix cache, and a reset
    of the cache lets every snapshot go."""
    recurrent, bm = llm.engine.runner.recurrent, llm.engine.block_manager
    bm.check_no_leak()
    recurrent.check_no_leak()
    assert set(recurrent.snapshots.block_hashes) <= set(bm.hash_to_block)
    bm.reset_prefix_cache()
    assert len(recurrent.snapshots) == 0 and not bm.hash_to_block
    bm.check_no_leak()
    recurrent.check_no_leak()


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_continued_and_repeated_prompts_skip_their_prefix(qwen3_5, cpu_path):
    """With the default spacing (every 256 tokens, beyond these prompts), the states kept are the prompt's last
    full block boundary and the one before, and the answer's last (128): a later prompt continuing the first
    resumes after all 120 of its tokens, the same prompt again after 112 (its last block is computed for its
    logits), a next turn (the prompt, its answer, new text) after 128."""
    prompts = [FIRST, FIRST + prompts_of(1, seed=13, lo=20, hi=20)[0], FIRST]
    expected = qwen3_5.hf(prompts)
    llm = LLM(model=str(qwen3_5.folder), num_kv_blocks=128, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    first = llm.generate(prompts[:1], params, use_tqdm=False)
    assert len(llm.engine.runner.recurrent.snapshots) == 3
    rest = llm.generate(prompts[1:], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in first + rest] == expected
    assert llm.engine.block_manager.prefix_hits == 120 + 112
    assert [o.metrics.cached_tokens for o in rest] == [120, 112]
    turn = FIRST + expected[0] + prompts_of(1, seed=17, lo=6, hi=6)[0]
    after = llm.generate([turn], params, use_tqdm=False)[0]
    assert after.metrics.cached_tokens == 128
    assert after.outputs[0].token_ids == qwen3_5.hf([turn])[0]
    _check_pools(llm)


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_requests_ending_in_their_prefill_step_are_cached(qwen3_5, cpu_path):
    """max_tokens=1: the step that computes the prompt finishes the request. Its blocks and the states kept at its
    last two block boundaries stay cached, so the same prompt again resumes after 112 of its 120 tokens."""
    llm = LLM(model=str(qwen3_5.folder), num_kv_blocks=128, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    outs = [llm.generate([FIRST], params, use_tqdm=False)[0] for _ in range(2)]
    assert [o.metrics.cached_tokens for o in outs] == [0, 112]
    assert [o.outputs[0].token_ids for o in outs] == [qwen3_5.hf([FIRST])[0][:1]] * 2
    _check_pools(llm)


SCENARIOS = {
    "whole": {"num_kv_blocks": 128},
    "chunked": {"num_kv_blocks": 128, "max_num_batched_tokens": 7},  # chunk ends off the kept boundaries
    "preempted": {"num_kv_blocks": 20},  # 160 tokens of KV for three prompts of 80-140 at once
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_next_turn_resumes_after_the_generated_answer(qwen3_5, scenario):
    """A chat's next turn (the prompt, the answer, new text) resumes at the answer's last full block: the state kept
    at the last boundary a sequence reaches, 128 after 120 + 10 tokens, 104 after 100 + 10 (a prompt ending off a
    boundary). Only that one is kept past the prompt: a 40-token answer leaves one state, not five. HF's tokens,
    whole, in chunks of 7 and under preemption: with 29 blocks the second prompt is preempted after 8 tokens, when
    the first needs its 17th block, and resumes after the 104 it had computed."""
    firsts = [FIRST, SHARED]
    config = {"num_kv_blocks": 29} if scenario == "preempted" else SCENARIOS[scenario]
    llm = LLM(model=str(qwen3_5.folder), block_size=8, **config)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    first = llm.generate(firsts, params, use_tqdm=False)
    snapshots = llm.engine.runner.recurrent.snapshots
    assert len(snapshots) == 2 + 1 + 2  # FIRST's 112 and 120, SHARED's 96, and each answer's last boundary
    if scenario == "preempted":
        assert llm.engine.scheduler.num_preemptions == 1
        assert [o.metrics.cached_tokens for o in first] == [0, 104]
    tails = prompts_of(2, seed=16, lo=5, hi=12)
    turns = [p + o.outputs[0].token_ids + t for p, o, t in zip(firsts, first, tails, strict=True)]
    second = llm.generate(turns, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in first + second] == qwen3_5.hf(firsts + turns)
    assert [o.metrics.cached_tokens for o in second] == [128, 104]
    _check_pools(llm)
    long = llm.generate([SHARED], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False)
    assert len(snapshots) == 2  # 96, the prompt's last boundary, and 136, the answer's last
    turn = SHARED + long[0].outputs[0].token_ids
    again = llm.generate([turn], params, use_tqdm=False)
    assert again[0].outputs[0].token_ids == qwen3_5.hf([turn])[0]
    assert again[0].metrics.cached_tokens == 136
    _check_pools(llm)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_shared_prefixes_resume_from_kept_states(qwen3_5, scenario):
    """States kept every 32 tokens (mamba_block_size 28, rounded up to whole blocks): the second and third prompts
    share 100 and 70 tokens with the first, so their hits are cut back to the kept boundaries at 96 and 64 (of 96
    and 64 cached KV tokens); a fourth continues the first. Their tokens are HF's whether the prompts run whole, in
    chunks of 7 or preempting each other."""
    tails = prompts_of(3, seed=14, lo=10, hi=25)
    prompts = [FIRST, SHARED + tails[0], SHARED[:70] + tails[1], FIRST + tails[2]]
    expected = qwen3_5.hf(prompts)
    llm = LLM(model=str(qwen3_5.folder), block_size=8, mamba_block_size=28, **SCENARIOS[scenario])
    assert llm.engine.runner.recurrent.snapshots.every == 32
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    outs = llm.generate(prompts[:1], params, use_tqdm=False) + llm.generate(prompts[1:], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    bm = llm.engine.block_manager
    if scenario == "preempted":
        assert llm.engine.scheduler.num_preemptions > 0
        assert bm.prefix_hits > 0
    else:
        assert [o.metrics.cached_tokens for o in outs] == [0, 96, 64, 120]
        assert bm.prefix_hits == 96 + 64 + 120
    _check_pools(llm)


def test_snapshot_pool_keeps_to_its_bound(qwen3_5):
    """A pool of 4 entries, states kept every 16 tokens: the first prompt's single step keeps the first four of
    its eight boundaries (a step's own entries never evict one another), and its answer's last boundary (128)
    takes the place of 16; the second, diverging at 100, resumes at 64 and keeps 80, 96 and 104 in place of the
    least recently used (32, 48, 128: 64 was just used), then its answer's 112 in place of 64; the first prompt
    again resumes at 96, the longest of its prefixes still kept. The tokens stay HF's."""
    prompts = [FIRST, SHARED + prompts_of(1, seed=15, lo=9, hi=9)[0], FIRST]
    expected = qwen3_5.hf(prompts)
    llm = LLM(model=str(qwen3_5.folder), num_kv_blocks=128, block_size=8, mamba_block_size=16, max_state_snapshots=4)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    outs = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]
    assert [o.outputs[0].token_ids for o in outs] == expected
    snapshots = llm.engine.runner.recurrent.snapshots
    assert snapshots.capacity == 4 and len(snapshots) == 4
    assert [o.metrics.cached_tokens for o in outs] == [0, 64, 96]
    _check_pools(llm)


def test_snapshot_settings_are_checked():
    with pytest.raises(ValueError, match="mamba_block_size"):
        EngineConfig(mamba_block_size=0)
    with pytest.raises(ValueError, match="max_state_snapshots"):
        EngineConfig(max_state_snapshots=0)


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


def _with_mtp_block(folder: Path, out: Path) -> Path:
    """A copy of `folder` with a multi-token-prediction block, as Qwen3.5's checkpoints ship one (transformers
    builds none): the converter appends it as an extra layer, which serving must pass over."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    state = load_file(str(out / "model.safetensors"))
    hidden = qwen3_5_config().hidden_size
    full = qwen3_5_config().layer_types.index("full_attention")
    state |= {f"mtp.layers.0.{k.split('.', 3)[3]}": v.clone() for k, v in state.items()
              if k.startswith(f"model.layers.{full}.")}
    state |= {f"mtp.{n}.weight": torch.randn(hidden) for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")}
    state["mtp.fc.weight"] = torch.randn(hidden, 2 * hidden)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "mtp_num_hidden_layers": 1}))
    return out


def test_llama_cpp_gguf_equals_hf(qwen3_5, tmp_path):
    """A file written by llama.cpp's converter, which tiles the value heads by key head (2 key heads, 4 value
    heads here), stores the decay as -exp(A_log) and the norms as 1 + w and appends the multi-token-prediction
    block as a layer, gives HF's greedy tokens from the folder it came from; as Q8_0 blocks it agrees with the
    same file dequantized."""
    source = _with_mtp_block(qwen3_5.folder, tmp_path / "hf")
    path = llama_cpp_gguf(source, tmp_path / "qwen3_5.f32.gguf", "f32")
    assert GGUFFile(path).get("qwen35.nextn_predict_layers") == 1
    config, folder = open_model(str(path)).config, open_model(str(qwen3_5.folder)).config
    assert config.linear_value_heads_tiled and not folder.linear_value_heads_tiled
    for field in ("layer_types", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                  "linear_num_key_heads", "linear_num_value_heads", "num_hidden_layers", "head_dim"):
        assert getattr(config, field) == getattr(folder, field), field
    assert config.rope_parameters["partial_rotary_factor"] == folder.rope_parameters["partial_rotary_factor"]
    prompts = [prompts_of(1, seed=1, lo=1, hi=1)[0]] + prompts_of(3, seed=7, lo=5, hi=90)
    llm = LLM(model=str(path), num_kv_blocks=128, block_size=8)
    assert [o.outputs[0].token_ids for o in _generate(llm, prompts)] == qwen3_5.hf(prompts)

    q8 = llama_cpp_gguf(source, tmp_path / "qwen3_5.q8_0.gguf", "q8_0")
    assert GGUFFile(q8).tensors["blk.1.attn_q.weight"].qtype == gguf.GGMLQuantizationType.Q8_0  # query and gate
    blocks = _generate(LLM(model=str(q8), quantization="gguf", num_kv_blocks=128), prompts)
    floats = _generate(LLM(model=str(q8), quantization="none", num_kv_blocks=128), prompts)
    pairs = [(a, b) for x, y in zip(blocks, floats, strict=True)
             for a, b in zip(x.outputs[0].token_ids, y.outputs[0].token_ids, strict=True)]
    same = sum(a == b for a, b in pairs)
    print(f"Qwen3.5 Q8_0 blocks against the dequantized file: {same}/{len(pairs)} greedy tokens agree")
    assert same >= 0.95 * len(pairs)


def _generate(llm: LLM, prompts: list[list[int]]):
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True), use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    llm.engine.runner.recurrent.check_no_leak()
    return outs


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
