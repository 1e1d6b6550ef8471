"""RMSNorm (with and without the fused residual add), rotary embedding and SiLU-and-mul."""

import pytest
import torch
from kernel_helpers import assert_close

from kernels.activation import silu_and_mul_ref
from kernels.norm import rms_norm_ref
from kernels.rotary import build_cos_sin_cache, rotary_embedding_ref

pytest.importorskip("triton")
from kernels.triton.activation import silu_and_mul_triton  # noqa: E402
from kernels.triton.norm import rms_norm_triton  # noqa: E402
from kernels.triton.rotary import rotary_embedding_triton  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 1000])
@pytest.mark.parametrize("fused_residual", [False, True])
def test_rms_norm(dtype, hidden, fused_residual):
    gen = torch.Generator().manual_seed(hidden)
    x = (3 * torch.randn(2, 5, hidden, generator=gen)).to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype)
    residual = torch.randn(2, 5, hidden, generator=gen).to(dtype) if fused_residual else None
    x_before = x.clone()
    out = rms_norm_triton(x, weight, 1e-6, residual)
    ref = rms_norm_ref(x, weight, 1e-6, residual)
    assert torch.equal(x, x_before), "inputs are not modified"
    if fused_residual:
        assert out[0].dtype == ref[0].dtype and out[1].dtype == ref[1].dtype
        assert_close(out[0], ref[0], dtype)
        if dtype == torch.bfloat16:  # the interpreter truncates to bfloat16 (see kernel_helpers.TOL)
            assert_close(out[1], ref[1], dtype)
        else:
            assert torch.equal(out[1], ref[1])  # x + residual: one rounding either way
    else:
        assert out.dtype == ref.dtype
        assert_close(out, ref, dtype)


def test_rms_norm_float32_weight_promotes_like_reference():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 96, generator=gen).half()
    weight = torch.rand(96, generator=gen) + 0.5
    out, ref = rms_norm_triton(x, weight, 1e-5), rms_norm_ref(x, weight, 1e-5)
    assert out.dtype == ref.dtype == torch.float32
    assert_close(out, ref, torch.float16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("head_dim", "num_q_heads", "num_kv_heads"), [(64, 4, 4), (128, 6, 2), (128, 8, 1)])
def test_rotary_embedding_in_place(dtype, head_dim, num_q_heads, num_kv_heads):
    gen = torch.Generator().manual_seed(head_dim + num_q_heads)
    num_tokens, max_pos = 9, 4096
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    cache = build_cos_sin_cache(inv_freq, max_pos)
    positions = torch.tensor([0, 1, 2, 17, 100, 511, 4095, 3, 3])
    # Q and K as strided views of a fused QKV tensor, rotated in place like the model does.
    qkv = torch.randn(num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype)
    qkv_ref = qkv.clone()

    def split(t):
        q = t[:, : num_q_heads * head_dim].view(num_tokens, num_q_heads, head_dim)
        k = t[:, num_q_heads * head_dim : (num_q_heads + num_kv_heads) * head_dim]
        return q, k.view(num_tokens, num_kv_heads, head_dim)

    q, k = split(qkv)
    rq, rk = rotary_embedding_triton(positions, q, k, cache)
    assert rq.data_ptr() == q.data_ptr() and rk.data_ptr() == k.data_ptr()
    q_ref, k_ref = rotary_embedding_ref(positions, *split(qkv_ref), cache)
    assert_close(q, q_ref, dtype)
    assert_close(k, k_ref, dtype)
    v_cols = (num_q_heads + num_kv_heads) * head_dim
    assert torch.equal(qkv[:, v_cols:], qkv_ref[:, v_cols:]), "V untouched"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 2 * 100), (2, 3, 2 * 2051)])
def test_silu_and_mul(dtype, shape):
    gen = torch.Generator().manual_seed(shape[-1])
    x = (2 * torch.randn(shape, generator=gen)).to(dtype)
    out = silu_and_mul_triton(x)
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == dtype
    assert_close(out, silu_and_mul_ref(x), dtype)


def test_silu_and_mul_strided_rows():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 300, generator=gen)[::2, :200]  # row stride 600, not contiguous
    assert_close(silu_and_mul_triton(x), silu_and_mul_ref(x), torch.float32)
