"""C++ kernels for the CPU path, compiled at first use (see `build.py`), on the instruction-set path
`isa.py` selects."""

from kernels.cpu import isa  # noqa: F401 - registers the SLLM_CPU_ISA ceiling before the library can load
from kernels.cpu.attention import paged_attention_cpu, paged_decode_attention_cpu
from kernels.cpu.build import cpu_kernels_available

__all__ = ["cpu_kernels_available", "paged_attention_cpu", "paged_decode_attention_cpu"]
