"""Sliding windows in the Triton paged attention kernels (decode, split-K decode, prefill) against the
torch references, under the interpreter.

Besides the NaN in unowned slots (`kernel_helpers.paged_cache`), every key behind the window of a
sequence's earliest query this step is NaN too: the kernels must skip those keys, not load and mask
them (a masked NaN value still poisons the weighted sum), which is what makes windows cheap on long
prompts."""

import pytest
import torch
from kernel_helpers import TOL, alibi_slopes, assert_close, launch_grids, paged_cache, rel_err

from kernels.attention import paged_attention_ref, paged_decode_attention_ref

pytest.importorskip("triton")
from kernels.triton import attention as tri  # noqa: E402

HEAD_DIM = 32
NUM_KV_HEADS = 2


def _poison_behind_windows(k, v, block_tables, context_lens, q_lens, window, block_size):
    """NaN in every key no query of this step may see: positions below ctx - q_len + 1 - window."""
    for b, (ctx, n) in enumerate(zip(context_lens, q_lens, strict=True)):
        for pos in range(max(0, ctx - n + 1 - window)):
            blk = int(block_tables[b, pos // block_size])
            k[blk, pos % block_size] = float("nan")
            v[blk, pos % block_size] = float("nan")


def _decode_inputs(block_size, group, dtype, seed, lens):
    gen = torch.Generator().manual_seed(seed)
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        lens, block_size, NUM_KV_HEADS, HEAD_DIM, dtype, gen
    )
    q = torch.randn(len(lens), NUM_KV_HEADS * group, HEAD_DIM, generator=gen).to(dtype)
    return q, k_cache, v_cache, k_dirty, v_dirty, block_tables, torch.tensor(lens, dtype=torch.int32)


def _decode_windows(block_size):
    # One key; a window ending on a block edge; one starting inside a block; equal to a context (2 blocks);
    # between the contexts (longer than some, shorter than 70); wider than every context and the table.
    return [1, block_size, block_size + 3, 2 * block_size, 40, 1000]


DECODE_CASES = [
    pytest.param(bs, g, split, dtype, id=f"bs{bs}-gqa{g}-{'splitk' if split else 'single'}-{str(dtype)[6:]}")
    for bs, g, split, dtype in [
        (8, 1, False, torch.float32),
        (8, 3, True, torch.float32),
        (16, 3, False, torch.float32),
        (16, 1, True, torch.float32),
        (16, 3, True, torch.float16),
    ]
]


@pytest.mark.parametrize(("block_size", "group", "split", "dtype"), DECODE_CASES)
def test_windowed_decode(block_size, group, split, dtype):
    lens = [1, block_size, block_size + 1, 2 * block_size, 70]
    q, k_cache, v_cache, k_dirty, v_dirty, block_tables, context_lens = _decode_inputs(
        block_size, group, dtype, block_size + group, lens
    )
    scale = HEAD_DIM**-0.5
    for window in _decode_windows(block_size):
        k_win, v_win = k_dirty.clone(), v_dirty.clone()
        _poison_behind_windows(k_win, v_win, block_tables, lens, [1] * len(lens), window, block_size)
        # Partitions of 16 tokens: a 40-token window spans three, the last one partly filled.
        out = tri.paged_decode_attention_triton(
            q, k_win, v_win, block_tables, context_lens, scale, None, window, split_k=split, partition_size=16
        )
        ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, None, window)
        err = rel_err(out, ref)
        assert err < TOL[dtype], f"window {window}: relative error {err:.3g}"


def test_windowed_decode_with_alibi_and_automatic_split_k(monkeypatch):
    """split_k=None plans its partitions over the window, not the block table: a 1,500-token context
    under a 600-token window takes two partitions (of at least DECODE_MIN_PARTITION tokens), where the
    whole context would take five."""
    grids = launch_grids(monkeypatch, tri, "_decode_kernel")
    monkeypatch.setattr(tri, "_device_sms", lambda device: 8)  # enough programs wanted to split
    lens, window = [1500], 600
    q, k_cache, v_cache, k_dirty, v_dirty, block_tables, context_lens = _decode_inputs(
        16, 2, torch.float32, 3, lens
    )
    _poison_behind_windows(k_dirty, v_dirty, block_tables, lens, [1], window, 16)
    slopes = alibi_slopes(q.shape[1])
    out = tri.paged_decode_attention_triton(q, k_dirty, v_dirty, block_tables, context_lens, 0.2, slopes, window)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, 0.2, slopes, window)
    assert_close(out, ref, torch.float32)
    (grid,) = grids
    assert grid == (1, NUM_KV_HEADS, 2), grid


def _prefill_batch(block_size):
    # (q_len, context_len): a decode row inside a prefill batch; a one-block prompt; a ragged prompt over
    # two query tiles; a chunk after a cached prefix ending on a block edge; a chunk starting 50 tokens in,
    # after the window of every case below but the widest; a long prompt over three query tiles.
    return [(1, 20), (block_size, block_size), (37, 37), (20, 20 + 2 * block_size), (10, 60), (70, 70)]


PREFILL_CASES = [
    pytest.param(bs, g, alibi, dtype, id=f"bs{bs}-gqa{g}-{'alibi' if alibi else 'rope'}-{str(dtype)[6:]}")
    for bs, g, alibi, dtype in [
        (8, 3, False, torch.float32),
        (16, 1, True, torch.float32),
        (16, 3, False, torch.float16),
    ]
]


@pytest.mark.parametrize(("block_size", "group", "alibi", "dtype"), PREFILL_CASES)
def test_windowed_prefill(block_size, group, alibi, dtype):
    gen = torch.Generator().manual_seed(100 + block_size + group)
    batch = _prefill_batch(block_size)
    q_lens, ctx = [n for n, _ in batch], [c for _, c in batch]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        ctx, block_size, NUM_KV_HEADS, HEAD_DIM, dtype, gen
    )
    num_q_heads = NUM_KV_HEADS * group
    query_start_loc = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(sum(q_lens), num_q_heads, HEAD_DIM, generator=gen).to(dtype)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    slopes = alibi_slopes(num_q_heads) if alibi else None
    scale = HEAD_DIM**-0.5
    # One key; a block; a block and a bit (inside a block); equal to the 37-token prompt; wider than
    # every context but narrower than the block table (wider than the table runs the plain kernel).
    for window in (1, block_size, block_size + 5, 37, 65):
        k_win, v_win = k_dirty.clone(), v_dirty.clone()
        _poison_behind_windows(k_win, v_win, block_tables, ctx, q_lens, window, block_size)
        out = tri.paged_attention_triton(
            q, k_win, v_win, block_tables, query_start_loc, context_lens, scale, slopes, window
        )
        ref = paged_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale,
                                  slopes, window)
        err = rel_err(out, ref)
        assert err < TOL[dtype], f"window {window}: relative error {err:.3g}"


def test_chunked_prefill_past_the_window_then_decode():
    """The engine's calls for one sequence of a windowed layer: chunks, the later ones wholly after the
    window, then decode steps, each on a cache whose keys behind the window are already NaN."""
    gen = torch.Generator().manual_seed(21)
    block_size, window, total = 8, 11, 58
    lens = [total]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        lens, block_size, NUM_KV_HEADS, HEAD_DIM, torch.float32, gen
    )
    q_all = torch.randn(total, 2 * NUM_KV_HEADS, HEAD_DIM, generator=gen)
    for start, end in [(0, 24), (24, 40), (40, 56), (56, 57), (57, 58)]:
        k_win, v_win = k_dirty.clone(), v_dirty.clone()
        # The slots past `end` hold the future's keys here; the context length keeps them out.
        _poison_behind_windows(k_win, v_win, block_tables, [end], [end - start], window, block_size)
        qsl = torch.tensor([0, end - start], dtype=torch.int32)
        ctx = torch.tensor([end], dtype=torch.int32)
        q = q_all[start:end]
        out = tri.paged_attention_triton(q, k_win, v_win, block_tables, qsl, ctx, 0.2, None, window)
        ref = paged_attention_ref(q, k_cache, v_cache, block_tables, qsl, ctx, 0.2, None, window)
        assert_close(out, ref, torch.float32)


@pytest.mark.parametrize("shift", [-1, 1], ids=["window-1", "window+1"])
def test_an_off_by_one_window_is_caught(monkeypatch, shift):
    """Mutation check: the kernels run with the window one key narrower or wider than the reference's,
    and the decode (single pass and split-K) and prefill comparisons above must fail on it."""
    real = tri._effective_window
    monkeypatch.setattr(tri, "_effective_window", lambda w, bt, ps: real(w + shift, bt, ps))
    block_size, window = 8, 11
    lens = [5, 16, 45]
    q, k_cache, v_cache, k_dirty, v_dirty, block_tables, context_lens = _decode_inputs(
        block_size, 3, torch.float32, 4, lens
    )
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, 0.2, None, window)
    for split in (False, True):
        out = tri.paged_decode_attention_triton(
            q, k_cache, v_cache, block_tables, context_lens, 0.2, None, window, split_k=split, partition_size=16
        )
        assert rel_err(out, ref) > TOL[torch.float32], f"split_k={split}: an off-by-one window went unnoticed"
    qsl = torch.tensor([0, 5, 21, 51], dtype=torch.int32)  # q_lens 5, 16, 30: prefills with and without prefix
    qp = torch.randn(51, q.shape[1], HEAD_DIM)
    ref = paged_attention_ref(qp, k_cache, v_cache, block_tables, qsl, context_lens, 0.2, None, window)
    out = tri.paged_attention_triton(qp, k_cache, v_cache, block_tables, qsl, context_lens, 0.2, None, window)
    assert rel_err(out, ref) > TOL[torch.float32], "prefill: an off-by-one window went unnoticed"


def test_windowed_calls_take_triton_where_triton_runs(monkeypatch):
    """kernels.attention's public functions hand windowed calls to the Triton kernels (CUDA tensors in
    production; here use_triton is forced so the interpreter runs them on CPU tensors)."""
    import kernels.attention as attention

    calls = []
    for name in ("paged_attention_triton", "paged_decode_attention_triton"):
        real = getattr(tri, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, args[8 if _name == "paged_attention_triton" else 7]))
            return _real(*args, **kwargs)

        monkeypatch.setattr(tri, name, spy)
    monkeypatch.setattr(attention, "use_triton", lambda x: True)
    lens, window = [9, 30], 7
    q, k_cache, v_cache, _, _, block_tables, context_lens = _decode_inputs(8, 1, torch.float32, 5, lens)
    out = attention.paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, 0.2,
                                           sliding_window=window)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, 0.2, None, window)
    assert_close(out, ref, torch.float32)
    qsl = torch.tensor([0, 4, 9], dtype=torch.int32)
    qp = torch.randn(9, q.shape[1], HEAD_DIM)
    out = attention.paged_attention(qp, k_cache, v_cache, block_tables, qsl, context_lens, 0.2,
                                    sliding_window=window)
    ref = paged_attention_ref(qp, k_cache, v_cache, block_tables, qsl, context_lens, 0.2, None, window)
    assert_close(out, ref, torch.float32)
    assert calls == [("paged_decode_attention_triton", window), ("paged_attention_triton", window)], calls
