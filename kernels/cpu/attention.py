"""Paged decode attention through the C++ CPU kernel (`csrc/decode_attention.cpp`).

Same contract as `kernels.attention.paged_decode_attention_ref`, but K/V are read in place through the
block tables (no gathered copy), with an online softmax, one pass over each K/V row for all the query
heads of a GQA group, and at::parallel_for over (sequence, KV head)."""

from __future__ import annotations

import torch

from kernels.cpu.build import cpu_kernels_available


def paged_decode_attention_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    alibi_slopes: torch.Tensor | None = None,
    isa: str = "auto",
) -> torch.Tensor:
    """q [B, Hq, D] -> [B, Hq, D]. `isa`: "auto" (AVX-512 when the CPU has it and D % 16 == 0),
    "avx512" or "generic" (plain C++), the last two for tests and benchmarks."""
    if not cpu_kernels_available():
        raise RuntimeError("the C++ CPU kernels are not available (see the warning logged at load)")
    return torch.ops.sllm_cpu.paged_decode_attention(
        q, k_cache, v_cache, block_tables, context_lens, float(scale), alibi_slopes, isa
    )


def best_isa(head_dim: int) -> str:
    """The path "auto" picks on this CPU for this head size."""
    cpu_kernels_available()
    return torch.ops.sllm_cpu.best_isa(head_dim)
