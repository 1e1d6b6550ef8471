"""The C++ CPU kernels' instruction-set paths as test parameters (kernels/cpu/isa.py): every test that
takes them runs once per path this CPU can execute, and shows the others as skipped with the reason."""

import os

import pytest

from kernels.cpu import isa

WIDTH = {"generic": 1, "avx2": 8, "avx512": 16}


def cpu_paths(n: int = 64, *, best_unless_slow: bool = False) -> list:
    """One parameter per path, skipped where this CPU cannot run it or its vectors do not divide `n`
    (a head size, a matmul's K). `best_unless_slow`: for the default model's end-to-end runs, whose
    kernels the kernel and tiny-model tests check on every path; the default run takes only the best
    path this CPU runs (the one serving uses), SLLM_SLOW=1 every path (the generic one is the slowest)."""
    runs = isa.supported()
    best = [p for p in isa.PATHS if p in runs and not n % WIDTH[p]][-1:]
    params = []
    for path in isa.PATHS:
        reason = ""
        if path not in runs:
            reason = f"this CPU cannot run the {path} path"
        elif n % WIDTH[path]:
            reason = f"the {path} path needs a multiple of {WIDTH[path]}"
        elif best_unless_slow and [path] != best and not os.environ.get("SLLM_SLOW"):
            reason = f"the default model on the {path} path is opt-in (SLLM_SLOW=1); the kernel tests cover it"
        params.append(pytest.param(path, marks=pytest.mark.skipif(bool(reason), reason=reason)))
    return params


@pytest.fixture
def cpu_path(request):
    """Forces the path the test is parametrized with (`cpu_path` in `parametrize`) for its duration."""
    with isa.forced(request.param):
        yield request.param
