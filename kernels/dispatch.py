"""Chooses between a Triton kernel and its torch reference.

Triton runs on CUDA tensors. On the CPU the engine uses the torch references: the Triton interpreter
(`TRITON_INTERPRET=1`) is far too slow to serve with, so tests call the Triton functions directly
under the interpreter instead of going through this switch."""

import functools
import os

import torch


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
