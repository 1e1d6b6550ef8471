"""What every benchmark shares: the header that says what machine the numbers come from, a wall-clock
timer, percentiles, the text table and the `--plot` figure.

Imports stay inside functions: `sllm` imports every command's module at start-up, and this one with them."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PLOT_EXTRA = "pip install 'sllm[bench]'"


def kernel_path() -> str:
    """The CPU kernels' instruction-set path the engine takes now, or the torch reference."""
    from kernels.cpu.build import cpu_kernels_available

    if not cpu_kernels_available():
        return "torch reference (no C++ kernels)"
    from kernels.cpu.isa import ENV, current

    return f"{current()} ({ENV}={os.environ.get(ENV, 'auto')})"


def machine_header() -> str:
    """The line every benchmark prints first: a number means little without the CPU model, its vector
    flags, the kernel path, the torch threads and the load (on a shared machine the numbers move with it)."""
    import torch

    from kernels.cpu.isa import cpu_flags_summary

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"CPU: {cpu_flags_summary()}; our kernel path: {kernel_path()}; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads; load average {load}")


def time_ms(fn: Callable[[], object], min_runs: int = 5, min_seconds: float = 0.5) -> float:
    """Median wall time of `fn` after two warm-up calls, over at least `min_runs` calls and `min_seconds`."""
    fn()
    fn()
    times: list[float] = []
    end = time.perf_counter() + min_seconds
    while len(times) < min_runs or time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def read_bandwidth_gbps(nbytes: int = 1 << 30) -> float:
    """Memory read bandwidth on the process's torch threads (the sum of 1 GiB of float32, median of 5 or
    more): what bounds one decode stream, which reads every weight once a token. On a shared VM it moves
    with the host's other load (a 2-core Zen 5 VM read 41-76 GB/s within one hour, idle), so the serving
    benchmark prints it beside each target's numbers."""
    import torch

    x = torch.ones(nbytes // 4)
    return nbytes / (time_ms(x.sum, min_runs=5, min_seconds=0.2) * 1e-3) / 1e9


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def format_table(head: Sequence[str], body: Sequence[Sequence[Any]], align: str = "l", rule: bool = False) -> str:
    """Columns as wide as their widest cell, aligned by `align` ("l" or "r" for every column, or one
    letter per column), with a dashed rule under the header when `rule`; trailing blanks trimmed."""
    cells = [[str(c) for c in row] for row in body]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(head)]
    sides = align * len(head) if len(align) == 1 else align

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if side == "r" else c.ljust(w)
                         for c, w, side in zip(row, widths, sides, strict=True)).rstrip()

    lines = [line(list(head))]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines + [line(r) for r in cells])


def pyplot():
    """matplotlib's pyplot drawing to files only (benchmarks run on headless machines); matplotlib is the
    `bench` extra, so without it `--plot` stops with the command that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"--plot needs matplotlib, the `bench` extra: {PLOT_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    print(f"plot written to {path}")
