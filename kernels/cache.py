"""Writes into the paged KV cache.

Layout per layer: k_cache and v_cache are [num_blocks, block_size, num_kv_heads, head_dim]. A token's
slot is `block_id * block_size + offset`; slot -1 means "do not store" (padding)."""

import torch

from kernels.cpu.fused_ops import store_kv_cpu, supports_store_kv
from kernels.dispatch import use_cpu_kernels, use_triton


def store_kv_ref(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
    # Indexing by (block, offset) works for any cache strides (the engine's cache is head-major).
    block_size = k_cache.shape[1]
    blocks, offsets = slot_mapping // block_size, slot_mapping % block_size
    k_cache[blocks, offsets] = k.to(k_cache.dtype)
    v_cache[blocks, offsets] = v.to(v_cache.dtype)


def store_kv(k, v, k_cache, v_cache, slot_mapping):
    if use_cpu_kernels(k) and k_cache.dtype != k.dtype:
        # A 16-bit cache under float32 activations (`--kv-cache-dtype`): torch rounds the new rows once,
        # vectorized, and the C++ store copies them; decode_layers.cpp rounds its rows the same way.
        k, v = k.to(k_cache.dtype), v.to(v_cache.dtype)
    if use_triton(k):
        from kernels.triton.cache import store_kv_triton

        return store_kv_triton(k, v, k_cache, v_cache, slot_mapping)
    if use_cpu_kernels(k) and supports_store_kv(k, v, k_cache, v_cache):
        return store_kv_cpu(k, v, k_cache, v_cache, slot_mapping)
    return store_kv_ref(k, v, k_cache, v_cache, slot_mapping)


def copy_blocks(kv_caches: list[tuple[torch.Tensor, torch.Tensor]], src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy-on-write: duplicates whole blocks src[i] -> dst[i] in every layer."""
    for k_cache, v_cache in kv_caches:
        k_cache[dst] = k_cache[src]
        v_cache[dst] = v_cache[src]
