"""Paged attention kernels (decode, split-K decode, varlen prefill) against the torch references.

Every case runs the kernels on caches whose unowned slots hold NaN (see `kernel_helpers.paged_cache`),
so reading a slot outside a sequence's context fails the test instead of going unnoticed."""

import itertools

import pytest
import torch
from kernel_helpers import alibi_slopes, assert_close, launch_grids, paged_cache

from kernels.attention import paged_attention_ref, paged_decode_attention_ref
from kernels.cache import store_kv_ref

pytest.importorskip("triton")
from kernels.triton.attention import paged_attention_triton, paged_decode_attention_triton  # noqa: E402
from kernels.triton.cache import store_kv_triton  # noqa: E402

NUM_KV_HEADS = 2
BF16_SKIP = (
    "the Triton interpreter runs tl.dot on bfloat16 as raw uint16 bits (np.matmul on the storage); "
    "bfloat16 attention is checked on the GPU by benchmarks/triton_kernels.py"
)


def _pairwise(block_sizes, head_dims, groups):
    """The structural axes (block size, head dim, GQA ratio) in 9 of their 18 combinations: every block
    size meets every GQA ratio, and the two head dims alternate over that grid, so every pair of values
    of any two axes still meets (the interpreter's time goes with the query heads, and the 8-way ratio,
    16 of them, is a third of the combinations either way)."""
    return [(bs, head_dims[(i + j) % 2], g) for i, bs in enumerate(block_sizes) for j, g in enumerate(groups)]


def _cases(structural, flags: int):
    """Each structural combination crossed with a half fraction of the binary options: with flags
    (a, b[, c]), the last is a XOR of the others' parity, so each pair of options still meets in all
    four combinations while the interpreter runs half the cases."""
    out = []
    for i, combo in enumerate(structural):
        for bits in itertools.product([False, True], repeat=flags - 1):
            last = (sum(bits) + (i % 2 if flags == 2 else 0)) % 2 == 1
            out.append((*combo, *bits, last))
    return out


def _decode_lens(block_size: int) -> list[int]:
    # Length 1; exactly one and two full blocks; one past a boundary; a ragged long context that
    # crosses several 64-token tiles and several split-K partitions.
    return [1, block_size, block_size + 1, 2 * block_size, 150]


def _case_id(case) -> str:
    bs, d, g = case[:3]
    names = [f"bs{bs}", f"d{d}", f"gqa{g}"]
    flags = case[3:]
    if len(flags) == 3:
        names.append("splitk" if flags[0] else "single")
    names.append("alibi" if flags[-2] else "rope")
    names.append("fp16" if flags[-1] else "fp32")
    return "-".join(names)


STRUCTURAL = _pairwise([8, 16, 32], [64, 128], [1, 3, 8])
DECODE_CASES = [pytest.param(*c, id=_case_id(c)) for c in _cases(STRUCTURAL, flags=3)]
PREFILL_CASES = [pytest.param(*c, id=_case_id(c)) for c in _cases(STRUCTURAL, flags=2)]


@pytest.mark.parametrize(("block_size", "head_dim", "group", "split", "alibi", "half"), DECODE_CASES)
def test_paged_decode_attention(block_size, head_dim, group, split, alibi, half):
    dtype = torch.float16 if half else torch.float32
    gen = torch.Generator().manual_seed(block_size * 1000 + head_dim * 10 + group)
    lens = _decode_lens(block_size)
    num_q_heads = NUM_KV_HEADS * group
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        lens, block_size, NUM_KV_HEADS, head_dim, dtype, gen
    )
    q = torch.randn(len(lens), num_q_heads, head_dim, generator=gen).to(dtype)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    slopes = alibi_slopes(num_q_heads) if alibi else None
    scale = head_dim**-0.5
    # Partitions of 32 tokens (smaller than a tile) or 128 (two tiles) exercise both loop shapes.
    partition_size = 32 if head_dim == 64 else 128
    out = paged_decode_attention_triton(
        q,
        k_dirty,
        v_dirty,
        block_tables,
        context_lens,
        scale,
        slopes,
        split_k=split,
        partition_size=partition_size,
    )
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, slopes)
    assert out.dtype == dtype
    assert_close(out, ref, dtype)


def test_decode_split_k_chosen_automatically_and_strided_query(monkeypatch):
    """split_k=None on one sequence x one KV head with a long block table picks flash-decoding."""
    from kernels.triton import attention

    grids = launch_grids(monkeypatch, attention, "_decode_reduce_kernel")
    gen = torch.Generator().manual_seed(7)
    lens = [700]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(lens, 16, 1, 64, torch.float32, gen)
    qkv = torch.randn(1, 3 * 4 * 64, generator=gen)
    q = qkv[:, : 4 * 64].view(1, 4, 64)  # a view with a non-dense batch stride
    context_lens = torch.tensor(lens)
    out = paged_decode_attention_triton(q, k_dirty, v_dirty, block_tables, context_lens, 0.125)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, 0.125)
    assert_close(out, ref, torch.float32)
    assert grids == [(1, 4)], "split-K reduce ran once over (sequences, query heads)"


def _prefill_batch(block_size: int) -> list[tuple[int, int]]:
    # (q_len, context_len): a decode row inside a prefill batch; a prompt of exactly one block; a
    # ragged prompt; a chunk after a cached prefix ending on a block boundary; a long chunk after a
    # ragged prefix that needs several query and key tiles.
    return [(1, 20), (block_size, block_size), (37, 37), (20, 20 + 2 * block_size), (70, 100)]


@pytest.mark.parametrize(("block_size", "head_dim", "group", "alibi", "half"), PREFILL_CASES)
def test_paged_prefill_attention(block_size, head_dim, group, alibi, half):
    dtype = torch.float16 if half else torch.float32
    gen = torch.Generator().manual_seed(block_size * 1000 + head_dim * 10 + group + 1)
    batch = _prefill_batch(block_size)
    q_lens = [n for n, _ in batch]
    ctx = [c for _, c in batch]
    num_q_heads = NUM_KV_HEADS * group
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        ctx, block_size, NUM_KV_HEADS, head_dim, dtype, gen
    )
    query_start_loc = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(sum(q_lens), num_q_heads, head_dim, generator=gen).to(dtype)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    slopes = alibi_slopes(num_q_heads) if alibi else None
    scale = head_dim**-0.5
    out = paged_attention_triton(
        q, k_dirty, v_dirty, block_tables, query_start_loc, context_lens, scale, slopes
    )
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, slopes)
    assert out.dtype == dtype
    assert_close(out, ref, dtype)


@pytest.mark.parametrize("alibi", [False, True], ids=["rope", "alibi"])
def test_paged_attention_all_decode_falls_back_to_decode_kernel(alibi):
    gen = torch.Generator().manual_seed(11)
    lens = [1, 16, 33]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        lens, 16, NUM_KV_HEADS, 64, torch.float32, gen
    )
    q = torch.randn(3, 6, 64, generator=gen)
    query_start_loc = torch.arange(4, dtype=torch.int32)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    slopes = alibi_slopes(6) if alibi else None
    out = paged_attention_triton(
        q, k_dirty, v_dirty, block_tables, query_start_loc, context_lens, 0.125, slopes
    )
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, 0.125, slopes)
    assert_close(out, ref, torch.float32)


def test_paged_attention_skips_sequences_without_queries():
    """A sequence with q_len 0 in the packed batch contributes no rows and disturbs no one."""
    gen = torch.Generator().manual_seed(12)
    ctx = [9, 30, 5]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(ctx, 8, 1, 64, torch.float32, gen)
    query_start_loc = torch.tensor([0, 4, 4, 9], dtype=torch.int32)  # q_lens 4, 0, 5
    q = torch.randn(9, 3, 64, generator=gen)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    out = paged_attention_triton(q, k_dirty, v_dirty, block_tables, query_start_loc, context_lens, 0.125)
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, 0.125)
    assert_close(out, ref, torch.float32)


def test_chunked_prefill_then_decode_through_store_kv():
    """The engine's sequence of calls: store a chunk's K/V, attend; next chunk; then decode steps."""
    gen = torch.Generator().manual_seed(13)
    block_size, num_kv_heads, num_q_heads, head_dim = 16, 2, 6, 64
    num_blocks, total = 8, 45
    block_table = torch.tensor([[5, 2, 7, 0]], dtype=torch.int32)
    caches = [torch.zeros(num_blocks, block_size, num_kv_heads, head_dim) for _ in range(4)]
    k_tri, v_tri, k_ref, v_ref = caches
    k_all = torch.randn(total, num_kv_heads, head_dim, generator=gen)
    v_all = torch.randn(total, num_kv_heads, head_dim, generator=gen)
    q_all = torch.randn(total, num_q_heads, head_dim, generator=gen)
    pos = torch.arange(total)
    slots = block_table[0, pos // block_size].long() * block_size + pos % block_size
    for start, end in [(0, 20), (20, 43), (43, 44), (44, 45)]:  # two chunks, then two decode steps
        sl = slice(start, end)
        store_kv_triton(k_all[sl], v_all[sl], k_tri, v_tri, slots[sl])
        store_kv_ref(k_all[sl], v_all[sl], k_ref, v_ref, slots[sl])
        qsl = torch.tensor([0, end - start], dtype=torch.int32)
        ctx = torch.tensor([end], dtype=torch.int32)
        out = paged_attention_triton(q_all[sl], k_tri, v_tri, block_table, qsl, ctx, 0.125)
        ref = paged_attention_ref(q_all[sl], k_ref, v_ref, block_table, qsl, ctx, 0.125)
        assert_close(out, ref, torch.float32)


@pytest.mark.skip(reason=BF16_SKIP)
def test_bfloat16_attention_under_interpreter():
    pass


def test_strided_cache_views_and_non_power_of_two_head_dim():
    """K and V as views into one [num_blocks, 2, block_size, Hkv, D] tensor; head_dim 80 (padded)."""
    gen = torch.Generator().manual_seed(14)
    lens, head_dim = [20, 45], 80
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(lens, 8, 2, head_dim, torch.float32, gen)
    fused = torch.stack([k_dirty, v_dirty], dim=1)
    k_view, v_view = fused[:, 0], fused[:, 1]
    context_lens = torch.tensor(lens, dtype=torch.int32)
    q = torch.randn(2, 8, head_dim, generator=gen)
    for split in (False, True):
        out = paged_decode_attention_triton(
            q, k_view, v_view, block_tables, context_lens, 0.1, split_k=split, partition_size=16
        )
        assert_close(
            out,
            paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, 0.1),
            torch.float32,
        )
    query_start_loc = torch.tensor([0, 5, 50], dtype=torch.int32)
    qp = torch.randn(50, 8, head_dim, generator=gen)
    out = paged_attention_triton(qp, k_view, v_view, block_tables, query_start_loc, context_lens, 0.1)
    ref = paged_attention_ref(qp, k_cache, v_cache, block_tables, query_start_loc, context_lens, 0.1)
    assert_close(out, ref, torch.float32)
