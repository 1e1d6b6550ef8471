"""Rotary position embedding, neox (rotate-half) layout, in place (see `kernels.rotary`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr, stride_h, stride_d, num_heads, cos, sin, half, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr
):
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_HALF)
    mask = (offs_h[:, None] < num_heads) & (offs_d[None, :] < half)
    p1 = x_ptr + offs_h[:, None] * stride_h + offs_d[None, :] * stride_d
    p2 = p1 + half * stride_d
    x1 = tl.load(p1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(p2, mask=mask, other=0.0).to(tl.float32)
    tl.store(p1, (x1 * cos[None, :] - x2 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(p2, (x2 * cos[None, :] + x1 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,
    k_ptr,
    positions_ptr,
    cache_ptr,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_cache,
    num_q_heads,
    num_kv_heads,
    half,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    # One program per token: gather cos/sin once, rotate every Q and K head of the token.
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + t).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_HALF)
    dmask = offs_d < half
    cos = tl.load(cache_ptr + pos * stride_cache + offs_d, mask=dmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + half + offs_d, mask=dmask, other=0.0).to(tl.float32)
    _rotate_heads(
        q_ptr + t * stride_qt, stride_qh, stride_qd, num_q_heads, cos, sin, half, BLOCK_HQ, BLOCK_HALF
    )
    _rotate_heads(
        k_ptr + t * stride_kt, stride_kh, stride_kd, num_kv_heads, cos, sin, half, BLOCK_HKV, BLOCK_HALF
    )


def rotary_embedding_triton(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [T, Hq, D], k: [T, Hkv, D] (any strides), positions: [T]; rotates both in place."""
    num_tokens, num_q_heads, head_dim = q.shape
    assert k.shape[0] == num_tokens and k.shape[2] == head_dim and positions.shape == (num_tokens,)
    assert cos_sin_cache.shape[-1] == head_dim and head_dim % 2 == 0
    cache = cos_sin_cache if cos_sin_cache.stride(-1) == 1 else cos_sin_cache.contiguous()
    if num_tokens > 0:
        half = head_dim // 2
        _rotary_kernel[(num_tokens,)](
            q,
            k,
            positions,
            cache,
            *q.stride(),
            *k.stride(),
            cache.stride(0),
            num_q_heads,
            k.shape[1],
            half,
            BLOCK_HQ=triton.next_power_of_2(num_q_heads),
            BLOCK_HKV=triton.next_power_of_2(k.shape[1]),
            BLOCK_HALF=triton.next_power_of_2(half),
        )
    return q, k
