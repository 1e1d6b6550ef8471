"""Shared builders for the kernel tests: a paged KV cache with scattered blocks, and error metrics."""

import math

import torch

# Maximum error over the largest reference magnitude: robust where reference entries are near zero.
# bfloat16 gets 2e-2 here, not 1e-2: the Triton interpreter converts float32 -> bfloat16 by truncating
# the mantissa (triton/runtime/interpreter.py `_convert_float` without a rounding mode) where the GPU
# and torch round to nearest, so a result that goes through two bf16 roundings can be 2 ulps (2^-6) off.
# `benchmarks/triton_kernels.py` checks bfloat16 at 1e-2 on the GPU.
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), "non-finite output"
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"relative error {err:.3g} >= {TOL[dtype]} for {dtype}"


def paged_cache(
    context_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    gen: torch.Generator,
    spare_blocks: int = 3,
    shared_blocks: int = 0,
    groups: list[int] | None = None,
    group_blocks: int = 0,
):
    """Random K/V for each sequence in physical blocks shuffled across the cache; with
    `shared_blocks`, every sequence's table starts with the same that many physical blocks (as prefix
    caching shares a common prompt), as far as its context reaches, and with `groups` (a group id per
    sequence, -1 for none) the sequences of a group share `group_blocks` more after those (prompts over
    one schema after a common system prompt).

    Returns (k_cache, v_cache, k_dirty, v_dirty, block_tables): the *_dirty copies hold NaN in every
    slot no sequence owns (tails of partly-filled blocks, unallocated blocks), so a kernel that reads
    a masked slot poisons its output, while the reference (which gathers whole blocks and masks the
    scores) gets the clean copies. Block-table padding points at block 0."""
    needed = [max(1, math.ceil(n / block_size)) for n in context_lens]
    num_blocks = sum(needed) + spare_blocks + (group_blocks * len(set(groups)) if groups else 0)
    perm = torch.randperm(num_blocks, generator=gen)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    used = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    block_tables = torch.zeros(len(context_lens), max(needed), dtype=torch.int32)
    groups = groups or [-1] * len(context_lens)
    nxt = shared_blocks
    prefix = {-1: perm[:shared_blocks]}
    for g in sorted(set(groups) - {-1}):
        prefix[g] = torch.cat([prefix[-1], perm[nxt : nxt + group_blocks]])
        nxt += group_blocks
    for b, (n, nb) in enumerate(zip(context_lens, needed, strict=True)):
        common = prefix[groups[b]][:nb]
        own = nb - len(common)
        ids = torch.cat([common, perm[nxt : nxt + own]])
        nxt += own
        block_tables[b, :nb] = ids.to(torch.int32)
        for j in range(n):
            used[ids[j // block_size], j % block_size] = True
    k_dirty, v_dirty = k_cache.clone(), v_cache.clone()
    k_dirty[~used] = float("nan")
    v_dirty[~used] = float("nan")
    return k_cache, v_cache, k_dirty, v_dirty, block_tables


def alibi_slopes(num_heads: int) -> torch.Tensor:
    # The geometric sequence of the ALiBi paper (for a power-of-two head count; good enough here).
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)])


def launch_grids(monkeypatch, module, kernel: str) -> list[tuple]:
    """Records the grid of every launch of `module.<kernel>` (a Triton kernel) while it still runs."""
    grids: list[tuple] = []
    real = getattr(module, kernel)

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return real[grid]

    monkeypatch.setattr(module, kernel, Spy())
    return grids
