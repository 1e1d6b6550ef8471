"""RMSNorm, optionally fused with the residual add that precedes it in every decoder layer."""

import torch

from kernels.cpu.fused_ops import rms_norm_cpu, supports_rms_norm
from kernels.dispatch import use_cpu_kernels, use_triton


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Returns norm(x) or, with `residual`, (norm(x + residual), x + residual).

    Computed in float32 whatever the input dtype, as HF's LlamaRMSNorm does."""
    if residual is not None:
        x = x + residual
        residual = x
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * h.to(dtype)
    return out if residual is None else (out, residual)


def rms_norm(x, weight, eps, residual=None):
    if use_triton(x):
        from kernels.triton.norm import rms_norm_triton

        return rms_norm_triton(x, weight, eps, residual)
    if use_cpu_kernels(x) and supports_rms_norm(x, weight, residual):
        return rms_norm_cpu(x, weight, eps, residual)
    return rms_norm_ref(x, weight, eps, residual)
