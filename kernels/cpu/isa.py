"""Which instruction-set path the C++ CPU kernels take: `generic` (portable C++), `avx2` (AVX2 + FMA +
F16C) or `avx512` (AVX-512 F/BW/VL/DQ).

By default every op takes the best path the CPU runs. `SLLM_CPU_ISA=generic|avx2|avx512` sets a
ceiling instead, read when the kernels load: every op then takes the best path at or below it (an op
whose vector path needs a size the operand does not have, such as a head size that is not a multiple
of 16 for AVX-512, steps down). A path the CPU cannot run is refused with an error, so a forced run
never silently measures or tests another path. `forced(...)` switches paths inside one process, for
tests and benchmarks."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

from kernels.cpu.build import cpu_kernels_available, on_load

PATHS = ("generic", "avx2", "avx512")
ENV = "SLLM_CPU_ISA"
_state: dict[str, str] = {}  # "ceiling": the C++ library's, mirrored so per-call checks stay in Python


class UnsupportedIsaError(RuntimeError):
    pass


def supported() -> list[str]:
    """The paths this CPU runs, portable first (["generic"] when the kernels did not build)."""
    if not cpu_kernels_available():
        return ["generic"]
    return list(torch.ops.sllm_cpu.supported_isas())


def current() -> str:
    """The ceiling every op picks under now."""
    if "ceiling" not in _state:
        _state["ceiling"] = torch.ops.sllm_cpu.isa() if cpu_kernels_available() else "generic"
    return _state["ceiling"]


def resolve(n: int) -> str:
    """The path an op takes now for a vector operand of `n` floats (a head size, a matmul's K)."""
    return _resolve(current(), n)


@functools.cache
def _resolve(ceiling: str, n: int) -> str:
    return torch.ops.sllm_cpu.resolve_isa(n) if cpu_kernels_available() else "generic"


def select(name: str) -> None:
    """Sets the ceiling: "auto" (the best this CPU runs) or one of PATHS, which the CPU must run."""
    if not cpu_kernels_available():
        raise UnsupportedIsaError(f"the C++ CPU kernels are not available, so no {name} path can be chosen")
    _set(name)


def apply_environment() -> None:
    """Run by the loader once the library is in (so through no `cpu_kernels_available`, which holds
    its lock then)."""
    _set(os.environ.get(ENV, "auto").strip().lower() or "auto")


on_load(apply_environment)


def _set(name: str) -> None:
    if name != "auto" and name not in PATHS:
        raise UnsupportedIsaError(f"{ENV}={name!r}: choose auto, {', '.join(PATHS)}")
    runs = list(torch.ops.sllm_cpu.supported_isas())
    if name not in ("auto", *runs):
        raise UnsupportedIsaError(
            f"{ENV}={name}: this CPU ({cpu_flags_summary()}) cannot run the {name} path; it runs {', '.join(runs)}"
        )
    torch.ops.sllm_cpu.set_isa(name)
    _state["ceiling"] = torch.ops.sllm_cpu.isa()


@contextlib.contextmanager
def forced(name: str) -> Iterator[None]:
    before = current()
    select(name)
    try:
        yield
    finally:
        select(before)


def cpu_flags_summary() -> str:
    """The CPU's model name and its vector flags that matter to the kernels, for logs and benchmarks."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown CPU":
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        import platform

        name = platform.processor() or platform.machine()
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
              "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
    return f"{name}; flags: {' '.join(f for f in wanted if f in flags) or 'none of avx2/avx512'}"
