"""`kv_cache_dtype` (vLLM's --kv-cache-dtype): a float16 or bfloat16 KV cache under float32 activations on
the CPU. Keys and values are rounded once, when stored, and attention reads them back as float32: the
greedy tokens are HF's when HF's cache rounds what it stores the same way, on every instruction-set path,
through the one-call decode op (up to 8 rows) and the per-op layer loop (more rows, prefill chunks)."""

import random

import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.cache_utils import DynamicLayer

from engine import LLM, SamplingParams
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import hf_greedy_with

PARAMS = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def prompts_of(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(3, 70))] for _ in range(n)]


def tokens(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outs = llm.generate(prompts, PARAMS, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def expected(tiny_models):
    """HF's greedy tokens with its cache rounding each new key and value to the dtype (attention then
    reads the rounded ones, the current token's too, as ours reads them back from the paged cache), for
    3 prompts (decoded by the one-call op) and 12 (the layer loop)."""
    model = LlamaForCausalLM.from_pretrained(tiny_models["gqa"], dtype=torch.float32).eval()
    update = DynamicLayer.update
    answers = {}
    for dtype in (torch.float16, torch.bfloat16):
        def rounded(self, k, v, *args, dtype=dtype, **kwargs):
            return update(self, k.to(dtype).float(), v.to(dtype).float(), *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(DynamicLayer, "update", rounded)
            for n in (3, 12):
                answers[dtype, n] = [hf_greedy_with(model, p, PARAMS.max_tokens) for p in prompts_of(n, seed=n)]
    return answers


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_cache_gives_the_float32_cache_tokens(tiny_models, expected, cpu_path, kv_dtype):
    name = str(kv_dtype).removeprefix("torch.")
    llm = LLM(model=str(tiny_models["gqa"]), num_kv_blocks=128, block_size=8, kv_cache_dtype=name,
              max_num_batched_tokens=64)  # prompts in chunks too
    runner = llm.engine.runner
    assert runner.dtype == torch.float32 and all(k.dtype == v.dtype == kv_dtype for k, v in runner.kv_caches)
    assert runner.model.decode_layers is not None  # the one-call op is on and takes the 16-bit cache
    for n in (3, 12):
        assert tokens(llm, prompts_of(n, seed=n)) == expected[kv_dtype, n]


def test_the_cache_takes_half_the_bytes_and_a_bad_name_is_refused(tiny_models):
    folder = str(tiny_models["gqa"])
    full = LLM(model=folder, num_kv_blocks=16).engine.runner
    half = LLM(model=folder, num_kv_blocks=16, kv_cache_dtype="float16").engine.runner
    assert half.bytes_per_block * 2 == full.bytes_per_block
    # A byte budget buys twice the blocks.
    budget = 64 * full.bytes_per_block
    assert LLM(model=folder, kv_cache_bytes=budget, kv_cache_dtype="bfloat16").engine.runner.num_blocks == 128
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM(model=folder, kv_cache_dtype="fp8")
