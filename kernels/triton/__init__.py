"""Triton kernels: the CUDA path of every op in `kernels`.

Each module mirrors a reference module one level up (`kernels/cache.py` -> `kernels/triton/cache.py`)
and keeps its contract: same arguments, same result within float tolerance. `kernels.dispatch` imports
these lazily, so importing `kernels` never requires Triton. The tests run the very same kernels on the
CPU under `TRITON_INTERPRET=1`."""
