"""Host memory the CPU engine writes as it steps: the KV cache, on pages that fault in cheaply.

On a 2-core EPYC VM, first writes to fresh pages cost more than the work done on them (engine/models/llama.py
keeps a prefill's MLP activations under glibc's mmap ceiling for the same reason)."""

import contextlib
import math
import mmap

import torch

HUGE_PAGE = 2 << 20  # x86-64's transparent huge page


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.zeros, but on the CPU from fresh anonymous pages: the OS maps zero pages as they are first
    written, so the default 1 GiB cache costs nothing at load instead of 0.4-2 s of filling. The pages are
    advised as transparent huge pages: a prompt's first writes into the cache fault once per page, and at
    4 KiB a page those faults took 1.1 s of a 1B model's 6 s of prefill (700 tokens, 64 KiB of cache each,
    one thread); at 2 MiB there are 512 times fewer."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    import numpy as np

    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    # Private: shared anonymous memory is shmem, whose huge pages are another setting. Zero-filled, with one
    # huge page of slack to align the start.
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = -np.frombuffer(region, dtype=np.uint8).ctypes.data % HUGE_PAGE
    with contextlib.suppress(AttributeError, OSError):  # no madvise (not Linux) or THP off: 4 KiB pages
        region.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(region, dtype=np.uint8, count=nbytes, offset=start)  # keeps `region` mapped
    return torch.from_numpy(raw).view(dtype).view(shape)
