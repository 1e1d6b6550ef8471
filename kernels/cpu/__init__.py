"""C++ kernels for the CPU path, compiled at first use (see `build.py`)."""

from kernels.cpu.attention import best_isa, paged_attention_cpu, paged_decode_attention_cpu
from kernels.cpu.build import cpu_kernels_available

__all__ = ["best_isa", "cpu_kernels_available", "paged_attention_cpu", "paged_decode_attention_cpu"]
