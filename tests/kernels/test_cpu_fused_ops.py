"""The C++ CPU small ops (kernels/cpu/csrc/fused_ops.cpp: RMSNorm, rotary, KV store) against the torch
references, called through the public `kernels.*` functions, which pick them for CPU tensors."""

import os

import pytest
import torch
from kernel_helpers import assert_close

import kernels
from kernels.cache import store_kv_ref
from kernels.cpu import cpu_kernels_available
from kernels.norm import rms_norm_ref
from kernels.rotary import build_cos_sin_cache, rotary_embedding_ref

if os.environ.get("SLLM_CPU_KERNELS") == "0":
    pytest.skip("C++ CPU kernels disabled by SLLM_CPU_KERNELS=0", allow_module_level=True)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module", autouse=True)
def built():
    assert cpu_kernels_available(), "the C++ CPU kernels failed to build; see the logged warning"


def _exact_or_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    # bf16/fp16 round exactly where the reference rounds; fp32 differs only in summation order.
    if dtype == torch.float32:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    else:
        assert_close(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 300])  # one decode row (serial), a prefill (parallel)
@pytest.mark.parametrize("fused_residual", [False, True])
def test_rms_norm(dtype, rows, fused_residual):
    gen = torch.Generator().manual_seed(rows)
    x = (3 * torch.randn(rows, 576, generator=gen)).to(dtype)
    weight = (1 + 0.1 * torch.randn(576, generator=gen)).to(dtype)
    residual = torch.randn(rows, 576, generator=gen).to(dtype) if fused_residual else None
    x_before = x.clone()
    out = kernels.rms_norm(x, weight, 1e-5, residual)
    ref = rms_norm_ref(x, weight, 1e-5, residual)
    assert torch.equal(x, x_before), "inputs are not modified"
    if fused_residual:
        assert torch.equal(out[1], ref[1]), "x + residual is one rounding either way"
        _exact_or_close(out[0], ref[0], dtype)
    else:
        assert out.dtype == ref.dtype
        _exact_or_close(out, ref, dtype)


def test_rms_norm_float32_weight_promotes_and_strided_input():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2 * 96, generator=gen).half()[:, :96]  # not contiguous
    weight = torch.rand(96, generator=gen) + 0.5
    out, ref = kernels.rms_norm(x, weight, 1e-6), rms_norm_ref(x, weight, 1e-6)
    assert out.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("num_tokens", "num_q_heads", "num_kv_heads", "head_dim"), [(1, 9, 3, 64), (40, 4, 2, 128)])
def test_rotary_embedding_on_qkv_views(dtype, num_tokens, num_q_heads, num_kv_heads, head_dim):
    gen = torch.Generator().manual_seed(num_tokens)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    cache = build_cos_sin_cache(inv_freq, 4096, 1.25)
    positions = torch.randint(0, 4096, (num_tokens,), generator=gen)
    qkv = torch.randn(num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype)
    qkv_ref = qkv.clone()

    def split(t):
        q, k, _ = t.split([num_q_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
        return q.view(num_tokens, num_q_heads, head_dim), k.view(num_tokens, num_kv_heads, head_dim)

    q, k = split(qkv)
    rq, rk = kernels.rotary_embedding(positions, q, k, cache)
    assert rq.data_ptr() == q.data_ptr() and rk.data_ptr() == k.data_ptr()
    q_ref, k_ref = rotary_embedding_ref(positions, *split(qkv_ref), cache)
    _exact_or_close(q, q_ref, dtype)
    _exact_or_close(k, k_ref, dtype)
    v_cols = (num_q_heads + num_kv_heads) * head_dim
    assert torch.equal(qkv[:, v_cols:], qkv_ref[:, v_cols:]), "V untouched"


def test_rotary_position_outside_the_cache_is_an_error():
    cache = build_cos_sin_cache(torch.ones(32), 16)
    q, k = torch.zeros(1, 2, 64), torch.zeros(1, 1, 64)
    with pytest.raises(RuntimeError, match="outside the rotary cache"):
        kernels.rotary_embedding(torch.tensor([16]), q, k, cache)


@pytest.mark.parametrize(("dtype", "cache_dtype"), [(d, d) for d in DTYPES] + [
    (torch.float32, torch.float16), (torch.float32, torch.bfloat16)])  # --kv-cache-dtype under fp32 activations
def test_store_kv_into_the_head_major_cache(dtype, cache_dtype):
    gen = torch.Generator().manual_seed(5)
    num_tokens, num_kv_heads, head_dim, num_blocks, block_size = 11, 3, 64, 6, 16
    qkv = torch.randn(num_tokens, (4 + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype)
    k = qkv[:, 4 * head_dim : (4 + num_kv_heads) * head_dim].view(num_tokens, num_kv_heads, head_dim)
    v = qkv[:, (4 + num_kv_heads) * head_dim :].view(num_tokens, num_kv_heads, head_dim)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[[2, 7]] = -1  # padding tokens are not stored
    slots[0] = num_blocks * block_size - 1
    # The engine's layout: [Hkv, blocks, block_size, D] storage under the logical view.
    shape = (num_kv_heads, num_blocks, block_size, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(cache_dtype).permute(1, 2, 0, 3)
    v_cache = torch.randn(shape, generator=gen).to(cache_dtype).permute(1, 2, 0, 3)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    kernels.store_kv(k, v, k_cache, v_cache, slots)
    store_kv_ref(k, v, k_ref, v_ref, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


def test_store_kv_slot_outside_the_cache_is_an_error_and_rows_are_rounded_to_the_cache_type():
    k = v = torch.randn(1, 2, 64)
    k_cache, v_cache = torch.zeros(2, 16, 2, 64), torch.zeros(2, 16, 2, 64)
    with pytest.raises(RuntimeError, match="outside the KV cache"):
        kernels.store_kv(k, v, k_cache, v_cache, torch.tensor([32]))
    half_cache = torch.zeros(2, 16, 2, 64, dtype=torch.float16)
    kernels.store_kv(k, v, half_cache, half_cache.clone(), torch.tensor([17]))  # fp32 into fp16
    assert torch.equal(half_cache[1, 1], k[0].half())
