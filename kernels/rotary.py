"""Rotary position embedding (RoPE), applied to Q and K in place.

`cos_sin_cache` is [max_position, head_dim]: cos in the first half, sin in the second, so one gather by
position serves both. The rotation is the "neox" (rotate-half) layout that HF Llama checkpoints use."""

import torch

from kernels.cpu.fused_ops import rotary_embedding_cpu, supports_rotary
from kernels.dispatch import use_cpu_kernels, use_triton


def build_cos_sin_cache(inv_freq: torch.Tensor, max_position: int, scaling: float = 1.0) -> torch.Tensor:
    t = torch.arange(max_position, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq.float())
    return torch.cat([freqs.cos() * scaling, freqs.sin() * scaling], dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rotary_embedding_ref(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [T, Hq, D], k: [T, Hkv, D], positions: [T]. Rotates both in place and returns them."""
    cos, sin = cos_sin_cache[positions].unsqueeze(1).chunk(2, dim=-1)
    q.copy_(_rotate(q, cos, sin))
    k.copy_(_rotate(k, cos, sin))
    return q, k


def rotary_embedding(positions, q, k, cos_sin_cache):
    if use_triton(q):
        from kernels.triton.rotary import rotary_embedding_triton

        return rotary_embedding_triton(positions, q, k, cos_sin_cache)
    if use_cpu_kernels(q) and supports_rotary(q, k):
        return rotary_embedding_cpu(positions, q, k, cos_sin_cache)
    return rotary_embedding_ref(positions, q, k, cos_sin_cache)
