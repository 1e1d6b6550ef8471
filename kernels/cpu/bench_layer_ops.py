"""The layer's small ops and few-row matmuls for `sllm bench kernels --cpu`: each C++ kernel against the
torch it replaces, at one decode row (where the per-call cost is the whole cost) and a prompt's rows.

The public `kernels.*` functions are what the engine calls, so `run` goes through them (they pick the
C++ kernel for these CPU tensors) and `ref` calls the torch reference directly; the matmul rows compare
`sllm_cpu.small_linear` with `F.linear` (MKL) on a weight as large as a SmolLM2 layer's gate_up."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import kernels
from kernels.bench import TOL, Case, rel_err
from kernels.cache import store_kv_ref
from kernels.linear import use_small_linear
from kernels.norm import rms_norm_ref
from kernels.rotary import build_cos_sin_cache, rotary_embedding_ref


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def _case(name: str, shape: str, run, ref, dtype: torch.dtype, nbytes: int = 0, check=None) -> Case:
    check = check or (lambda: rel_err(_first(run()), _first(ref())))
    return Case(name=name, shape=shape, run=run, ref=ref, check=check, tol=TOL[dtype], bytes=nbytes)


def layer_op_cases(rows: int, hidden: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                   dtype: torch.dtype, seed: int = 0) -> list[Case]:
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    tag = f"T={rows}"
    x, residual, weight = randn(rows, hidden), randn(rows, hidden), 1 + 0.1 * randn(hidden)
    qkv = randn(rows, (num_q_heads + 2 * num_kv_heads) * head_dim)
    q_cols, kv_cols = num_q_heads * head_dim, num_kv_heads * head_dim
    q = qkv[:, :q_cols].view(rows, num_q_heads, head_dim)
    k = qkv[:, q_cols : q_cols + kv_cols].view(rows, num_kv_heads, head_dim)
    v = qkv[:, q_cols + kv_cols :].view(rows, num_kv_heads, head_dim)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    cos_sin = build_cos_sin_cache(inv_freq, 4096)
    positions = torch.randint(0, 4096, (rows,), generator=gen)
    block_size, num_blocks = 16, rows // 16 + 2
    cache_shape = (num_kv_heads, num_blocks, block_size, head_dim)  # the engine's head-major storage
    k_cache, v_cache = randn(*cache_shape).permute(1, 2, 0, 3), randn(*cache_shape).permute(1, 2, 0, 3)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:rows]
    heads = f"Hq={num_q_heads} Hkv={num_kv_heads} D={head_dim}"
    return [
        _case("rms_norm + residual [C++]", f"{tag} H={hidden}", lambda: kernels.rms_norm(x, weight, 1e-5, residual),
              lambda: rms_norm_ref(x, weight, 1e-5, residual), dtype),
        # In place: timed on one buffer rotated again and again; checked on fresh copies.
        _case("rotary_embedding [C++]", f"{tag} {heads}", lambda: kernels.rotary_embedding(positions, q, k, cos_sin),
              lambda: rotary_embedding_ref(positions, q, k, cos_sin), dtype,
              check=lambda: rel_err(kernels.rotary_embedding(positions, q.clone(), k.clone(), cos_sin)[0],
                                    rotary_embedding_ref(positions, q.clone(), k.clone(), cos_sin)[0])),
        _case("store_kv [C++]", f"{tag} {heads} bs={block_size}",
              lambda: (kernels.store_kv(k, v, k_cache, v_cache, slots), k_cache)[1],
              lambda: (store_kv_ref(k, v, k_cache, v_cache, slots), k_cache)[1], dtype),
    ]


def small_linear_cases(hidden: int, intermediate: int, seed: int = 0) -> list[Case]:
    """fp32 x [M, hidden] @ gate_up^T for M = 1 and 4: bandwidth-bound, so the rows report GB/s."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(2 * intermediate, hidden, generator=gen)
    cases = []
    for m in (1, 4):
        x = torch.randn(m, hidden, generator=gen)
        if not use_small_linear(x, weight):
            continue
        cases.append(_case("small_linear [C++] vs F.linear", f"M={m} N={2 * intermediate} K={hidden}",
                           lambda x=x: kernels.linear(x, weight), lambda x=x: F.linear(x, weight), torch.float32,
                           nbytes=weight.numel() * 4))
    return cases
