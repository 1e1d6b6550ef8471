"""Host memory the CPU engine touches every step: the KV cache it writes, on pages that fault in cheaply,
and (opt-in) the quantized weights it reads, on pages that the TLB covers 512 times further.

On a 2-core EPYC VM, first writes to fresh pages cost more than the work done on them (engine/models/llama.py
keeps a prefill's MLP activations under glibc's mmap ceiling for the same reason)."""

import contextlib
import dataclasses
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


def on_huge_pages(weights: list) -> list:
    """The quantized matrices among `weights` (StackedWeight parts too) copied into one region of
    transparent huge pages, each at a 64-byte line; anything else as it is, and a matrix met twice (a
    tied LM head is the embedding) copied once. One decode row streams every weight once a token, and on
    a file's 4 KiB pages (the memory map) or malloc's each page is a TLB miss and a stop for the hardware
    prefetcher: Llama-3.2-1B Q4_K_M, one stream on two Zen 5 cores (benchmarks/weight_pages.py, alternating
    generations), 14.8 -> 13.9 ms a token while the VM reads memory at 60-80 GB/s, 18.8 -> 18.6 while it
    reads 41-50. One region, not one per matrix: a small model's 0.3 MB matrices would each take a whole
    2 MiB page. The price is at load: fresh memory's first touch (0.9 s for 800 MB on that VM, where the
    file's pages are already in the page cache), hence opt-in (`EngineConfig.huge_page_weights`)."""
    from kernels.quantized import QuantizedWeight, StackedWeight

    def matrices(w) -> tuple:
        return w.parts if isinstance(w, StackedWeight) else (w,) if isinstance(w, QuantizedWeight) else ()

    unique = {id(m): m for w in weights for m in matrices(w)}
    if not unique:
        return list(weights)
    offsets, total = {}, 0
    for key, m in unique.items():
        offsets[key] = total
        total += -(-m.data.numel() // 64) * 64
    region = zeros((total,), torch.uint8, torch.device("cpu"))
    copies = {}
    for key, m in unique.items():
        data = region[offsets[key]:offsets[key] + m.data.numel()].view(m.data.shape)
        data.copy_(m.data)
        copies[key] = dataclasses.replace(m, data=data)
    return [StackedWeight(tuple(copies[id(p)] for p in w.parts)) if isinstance(w, StackedWeight)
            else copies.get(id(w), w) for w in weights]
