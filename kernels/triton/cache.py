"""Scatter new K/V tokens into the paged cache (see `kernels.cache.store_kv_ref`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_kcb,
    stride_kcs,
    stride_kch,
    stride_kcd,
    stride_vcb,
    stride_vcs,
    stride_vch,
    stride_vcd,
    num_heads,
    head_dim,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # One program per token: all of its KV heads at once.
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + t).to(tl.int64)
    if slot >= 0:
        block = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        mask = (offs_h[:, None] < num_heads) & (offs_d[None, :] < head_dim)

        k = tl.load(
            k_ptr + t * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :] * stride_kd, mask=mask
        )
        dst = k_cache_ptr + block * stride_kcb + offset * stride_kcs
        dst = dst + offs_h[:, None] * stride_kch + offs_d[None, :] * stride_kcd
        tl.store(dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)

        v = tl.load(
            v_ptr + t * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :] * stride_vd, mask=mask
        )
        dst = v_cache_ptr + block * stride_vcb + offset * stride_vcs
        dst = dst + offs_h[:, None] * stride_vch + offs_d[None, :] * stride_vcd
        tl.store(dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv_triton(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """k, v: [T, Hkv, D] (any strides); caches [num_blocks, block_size, Hkv, D]; slot -1 = skip."""
    num_tokens, num_heads, head_dim = k.shape
    assert v.shape == k.shape and slot_mapping.shape == (num_tokens,)
    assert k_cache.shape[2:] == (num_heads, head_dim) and v_cache.shape == k_cache.shape
    if num_tokens == 0:
        return
    _store_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        *k.stride(),
        *v.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        num_heads,
        head_dim,
        BLOCK_SIZE=k_cache.shape[1],
        BLOCK_H=triton.next_power_of_2(num_heads),
        BLOCK_D=triton.next_power_of_2(head_dim),
    )
