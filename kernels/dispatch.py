"""Chooses between a Triton kernel, a C++ CPU kernel and the torch reference.

Triton runs on CUDA tensors. On the CPU, ops that have a C++ kernel (`kernels.cpu`, built at first
use) run it, and the others the torch references: the Triton interpreter (`TRITON_INTERPRET=1`) is far
too slow to serve with, so tests call the Triton functions directly under the interpreter instead of
going through this switch. `SLLM_CPU_KERNELS=0` keeps the CPU on the references."""

import functools
import os

import torch

from kernels.cpu.build import cpu_kernels_available


@functools.cache
def triton_available() -> bool:
    if os.environ.get("SLLM_DISABLE_TRITON") == "1":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda and triton_available()


def use_cpu_kernels(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and cpu_kernels_available()
