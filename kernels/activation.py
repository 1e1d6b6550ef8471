"""SiLU-and-multiply: the SwiGLU MLP's gate, fused so the [T, 2I] projection is read once; and Gemma's
GELU (tanh approximation) gate, GeGLU, on the torch reference for now."""

import torch
import torch.nn.functional as F

from kernels.dispatch import use_triton


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if use_triton(x):
        from kernels.triton.activation import silu_and_mul_triton

        return silu_and_mul_triton(x)
    return silu_and_mul_ref(x)


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up
