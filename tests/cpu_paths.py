"""The C++ CPU kernels' instruction-set paths as test parameters (kernels/cpu/isa.py): every test that
takes them runs once per path this CPU can execute, and shows the others as skipped with the reason."""

import pytest

from kernels.cpu import isa

WIDTH = {"generic": 1, "avx2": 8, "avx512": 16}


def cpu_paths(n: int = 64) -> list:
    """One parameter per path, skipped where this CPU cannot run it or its vectors do not divide `n`
    (a head size, a matmul's K)."""
    runs = isa.supported()
    params = []
    for path in isa.PATHS:
        reason = ""
        if path not in runs:
            reason = f"this CPU cannot run the {path} path"
        elif n % WIDTH[path]:
            reason = f"the {path} path needs a multiple of {WIDTH[path]}"
        params.append(pytest.param(path, marks=pytest.mark.skipif(bool(reason), reason=reason)))
    return params


@pytest.fixture
def cpu_path(request):
    """Forces the path the test is parametrized with (`cpu_path` in `parametrize`) for its duration."""
    with isa.forced(request.param):
        yield request.param
