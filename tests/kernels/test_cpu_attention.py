"""The C++ CPU decode attention kernel (kernels/cpu) against the torch reference.

Like the Triton tests, every case reads caches whose unowned slots hold NaN, so a kernel that touches
a slot outside a sequence's context fails. Every instruction-set path is checked where the CPU runs it
(tests/cpu_paths.py): AVX-512, AVX2 and the portable C++ one (also taken for head sizes the vector
paths do not divide)."""

import logging
import os

import pytest
import torch
from kernel_helpers import alibi_slopes, paged_cache, rel_err

import kernels
from kernels.attention import paged_attention_ref, paged_decode_attention_ref
from kernels.cpu import build, cpu_kernels_available, isa, paged_attention_cpu, paged_decode_attention_cpu
from kernels.dispatch import use_cpu_kernels
from tests.cpu_paths import cpu_paths

if os.environ.get("SLLM_CPU_KERNELS") == "0":
    pytest.skip("C++ CPU kernels disabled by SLLM_CPU_KERNELS=0", allow_module_level=True)

# fp32 accumulates in the same precision as the reference, in another order; bf16/fp16 differ by the
# final rounding of the output (the reference also rounds K/V to the query dtype first).
TOL = {torch.float32: 2e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}
NUM_KV_HEADS = 3


@pytest.fixture(scope="module", autouse=True)
def built():
    # A compiler is part of the supported setup: a failed build is a failure here, not a skip.
    assert cpu_kernels_available(), "the C++ CPU kernels failed to build; see the logged warning"


def head_major(cache: torch.Tensor) -> torch.Tensor:
    """The engine's layout: [Hkv, blocks, block_size, D] storage under the logical cache view."""
    return cache.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)


def _run_case(path, dtype, block_size, group, head_dim, lens, alibi, layout, seed, window=None, **prefixes):
    gen = torch.Generator().manual_seed(seed)
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(
        lens, block_size, NUM_KV_HEADS, head_dim, dtype, gen, **prefixes
    )
    if layout == "head_major":
        k_dirty, v_dirty = head_major(k_dirty), head_major(v_dirty)
    num_q_heads = NUM_KV_HEADS * group
    q = torch.randn(len(lens), num_q_heads, head_dim, generator=gen).to(dtype)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    slopes = alibi_slopes(num_q_heads) if alibi else None
    scale = head_dim**-0.5
    out = paged_decode_attention_cpu(q, k_dirty, v_dirty, block_tables, context_lens, scale, slopes, isa=path,
                                     sliding_window=window)
    ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, slopes, window)
    assert out.dtype == dtype and out.shape == ref.shape
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"relative error {err:.3g} >= {TOL[dtype]}"


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size", [8, 16])
@pytest.mark.parametrize("group", [1, 3], ids=["mha", "gqa3"])
@pytest.mark.parametrize("alibi", [False, True], ids=["rope", "alibi"])
@pytest.mark.parametrize("layout", ["head_major", "token_major"])
def test_decode_matches_reference(path, dtype, block_size, group, alibi, layout):
    # Ragged lengths: one token; exactly one block; one past a block; several blocks plus a ragged tail.
    lens = [1, block_size, block_size + 1, 3 * block_size - 5, 150]
    _run_case(path, dtype, block_size, group, 64, lens, alibi, layout, seed=block_size * 10 + group)


@pytest.mark.parametrize("head_dim", [32, 128, 40, 24])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_decode_other_head_sizes_and_fp16(head_dim, dtype):
    """Head sizes that take the vector paths' wide loops with and without a remainder, ones that
    AVX-512 (40, 24) cannot take, and the fp16 cache conversion: on every path that takes them."""
    for path in [p for p in isa.supported() if head_dim % {"generic": 1, "avx2": 8, "avx512": 16}[p] == 0]:
        _run_case(path, dtype, 16, 2, head_dim, [7, 16, 70], True, "head_major", seed=head_dim)


def _prefill_batch(block_size: int) -> list[tuple[int, int]]:
    # (q_len, context_len): a decode row; a prompt of exactly one block; a ragged prompt; a sequence
    # with no query this step; a chunk after a cached prefix ending on a block boundary; a long chunk
    # after a ragged prefix.
    return [(1, 20), (block_size, block_size), (37, 37), (0, 9), (20, 20 + 2 * block_size), (70, 100)]


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_size", [8, 16])
@pytest.mark.parametrize("alibi", [False, True], ids=["rope", "alibi"])
@pytest.mark.parametrize("window", [None, 13], ids=["full", "window13"])
def test_varlen_prefill_matches_reference(path, dtype, block_size, alibi, window):
    """Prefill, chunked prefill and decode rows in one packed batch, one decode query per token; with a
    sliding window shorter than most contexts, so each row's first key moves with the row."""
    gen = torch.Generator().manual_seed(block_size + 100 * alibi)
    batch = _prefill_batch(block_size)
    q_lens = [n for n, _ in batch]
    ctx = [c for _, c in batch]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(ctx, block_size, NUM_KV_HEADS, 64, dtype, gen)
    q = torch.randn(sum(q_lens), 3 * NUM_KV_HEADS, 64, generator=gen).to(dtype)
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    slopes = alibi_slopes(3 * NUM_KV_HEADS) if alibi else None
    out = paged_attention_cpu(
        q, head_major(k_dirty), head_major(v_dirty), block_tables, starts, context_lens, 0.125, slopes, isa=path,
        sliding_window=window,
    )
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, starts, context_lens, 0.125, slopes, window)
    assert out.dtype == dtype
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"relative error {err:.3g} >= {TOL[dtype]}"


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("alibi", [False, True], ids=["rope", "alibi"])
@pytest.mark.parametrize(
    "lens",
    # One long sequence: its 3 KV-head tasks are split into context partitions. Two sequences, the
    # short one ending before the second partition starts (an empty partition). One sequence whose
    # context is too short to split. Five: enough tasks, no split.
    [[700], [700, 50], [200], [300, 1, 17, 640, 129]],
    ids=["one-long", "long-and-short", "short", "five"],
)
def test_split_context_decode_matches_reference(path, dtype, alibi, lens):
    _run_case(path, dtype, 16, 3, 64, lens, alibi, "head_major", seed=len(lens) + sum(lens))


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("group", [1, 3], ids=["mha", "gqa3"])
@pytest.mark.parametrize(
    "prefixes,lens",
    # A 160-token prefix under five rows, one of them the prefix alone. A 640-token prefix. The shortest
    # row ending inside the prefix's last block. A 3-block prefix. Nothing shared. Three schemas after a
    # common 6-block system prompt, interleaved, one row on its own. Eighteen rows over one prefix (sets
    # of at most 8 rows, cut in three).
    [({"shared_blocks": 10}, [160, 161, 200, 300, 170]), ({"shared_blocks": 40}, [650, 700, 641, 900]),
     ({"shared_blocks": 10}, [170, 159, 400, 200]), ({"shared_blocks": 3}, [60, 50, 100, 49]), ({}, [300, 300, 300]),
     ({"shared_blocks": 6, "group_blocks": 20, "groups": [0, 1, 2, 0, 1, 2, -1, 0, 1]},
      [420, 433, 500, 470, 440, 436, 300, 600, 419]),
     ({"shared_blocks": 8}, [130 + 7 * i for i in range(18)])],
    ids=["prefix", "long-prefix", "short-row", "too-short", "none", "schemas", "many"],
)
def test_shared_prefix_decode_matches_reference(path, dtype, group, prefixes, lens):
    """Rows whose tables share blocks (prompts shared under prefix caching) in row sets: each shared
    block read once for the set's rows, with ALiBi and sliding windows too; and each row's result the
    same bits as that row computed on its own."""
    seed = len(lens) + sum(lens)
    for alibi, window in ((False, None), (True, None), (False, 100)):
        _run_case(path, dtype, 16, group, 64, lens, alibi, "head_major", seed=seed, window=window, **prefixes)
        gen = torch.Generator().manual_seed(seed)
        k_cache, v_cache, _, _, tables = paged_cache(lens, 16, NUM_KV_HEADS, 64, dtype, gen, **prefixes)
        q = torch.randn(len(lens), NUM_KV_HEADS * group, 64, generator=gen).to(dtype)
        ctx = torch.tensor(lens, dtype=torch.int32)
        slopes = alibi_slopes(NUM_KV_HEADS * group) if alibi else None
        together = paged_decode_attention_cpu(q, k_cache, v_cache, tables, ctx, 0.125, slopes, isa=path,
                                              sliding_window=window)
        for i in range(len(lens)):
            alone = paged_decode_attention_cpu(q[i : i + 1], k_cache, v_cache, tables[i : i + 1], ctx[i : i + 1],
                                               0.125, slopes, isa=path, sliding_window=window, split_contexts=False)
            assert torch.equal(together[i], alone[0]), f"row {i} differs from itself computed alone"


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_prompt_sums_alike_whole_or_after_a_cached_prefix(path, dtype):
    """The prompt path's rows in row sets: a prompt computed whole and its last rows computed after a
    prefix-cache hit (alone, or one row) give the same bits, so a greedy token cannot change between
    the two; sliding windows too."""
    gen = torch.Generator().manual_seed(11)
    n = 301
    k_cache, v_cache, _, _, tables = paged_cache([n], 16, NUM_KV_HEADS, 64, dtype, gen)
    q = torch.randn(n, 9, 64, generator=gen).to(dtype)
    for window in (None, 70):
        def run(first, window=window):
            starts = torch.tensor([0, n - first], dtype=torch.int32)
            return paged_attention_cpu(q[first:], k_cache, v_cache, tables, starts, torch.tensor([n]), 0.125,
                                       isa=path, sliding_window=window)
        whole = run(0)
        for first in (288, 300):  # a cached prefix of 18 blocks: 13 rows left, then 1
            assert torch.equal(run(first), whole[first:])


@pytest.mark.parametrize("path", cpu_paths(64))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("window", [1, 5, 16, 37, 200])
def test_sliding_window_decode_matches_reference(path, dtype, window):
    """Each row reads only its last `window` keys: windows inside one block, of exactly one block, across
    blocks, and longer than some contexts; the long sequence alone is split into context partitions, the
    first of which then lie wholly before the window."""
    lens = [1, 8, 9, 45, 150]
    _run_case(path, dtype, 16, 3, 64, lens, False, "head_major", seed=window, window=window)
    _run_case(path, dtype, 16, 3, 64, [700], True, "head_major", seed=window + 1, window=window)


def test_auto_picks_the_best_path_that_divides_the_size():
    best = isa.supported()[-1]
    with isa.forced("auto"):  # whatever SLLM_CPU_ISA the run was started with
        assert isa.current() == best
        assert isa.resolve(64) == best
        assert isa.resolve(40) == ("avx2" if "avx2" in isa.supported() else "generic")
        assert isa.resolve(42) == "generic"


@pytest.mark.parametrize("path", cpu_paths(64))
def test_forcing_a_path_caps_every_op(path):
    before = isa.current()  # the best path, or the one SLLM_CPU_ISA named
    with isa.forced(path):
        assert isa.current() == path and isa.resolve(64) == path and isa.resolve(24) in ("generic", "avx2")
    assert isa.current() == before


def test_a_path_the_cpu_cannot_run_is_refused(monkeypatch):
    missing = [p for p in isa.PATHS if p not in isa.supported()]
    before = isa.current()
    for name in ["sse9", *missing]:
        with pytest.raises(isa.UnsupportedIsaError, match="SLLM_CPU_ISA"):
            isa.select(name)
    assert isa.current() == before
    with pytest.raises(RuntimeError, match="needs a size divisible"):
        q, k, v, tables = torch.zeros(1, 1, 36), torch.zeros(2, 16, 1, 36), torch.zeros(2, 16, 1, 36), torch.zeros(1, 1)
        paged_decode_attention_cpu(q, k, v, tables.int(), torch.tensor([3]), 0.1, isa="avx2")


def test_the_thread_count_does_not_change_the_result():
    gen = torch.Generator().manual_seed(3)
    # Whole tasks; one sequence split into partitions; a shared prefix.
    for lens, shared in (([5, 200, 33, 64, 1, 90, 17], 0), ([900], 0), ([700, 650, 800, 641], 40)):
        k_cache, v_cache, _, _, block_tables = paged_cache(lens, 16, NUM_KV_HEADS, 64, torch.float32, gen,
                                                           shared_blocks=shared)
        q = torch.randn(len(lens), 9, 64, generator=gen)
        ctx = torch.tensor(lens, dtype=torch.int32)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = paged_decode_attention_cpu(q, k_cache, v_cache, block_tables, ctx, 0.125)
            torch.set_num_threads(2)
            two = paged_decode_attention_cpu(q, k_cache, v_cache, block_tables, ctx, 0.125)
        finally:
            torch.set_num_threads(threads)
        # Tasks and partitions do not depend on the thread count, and each runs whole on one thread.
        assert torch.equal(one, two)


@pytest.mark.parametrize("cpu_path", cpu_paths(64), indirect=True)
def test_dispatch_uses_the_kernel_for_cpu_tensors_and_mixed_batches(cpu_path):
    """Through the public entry points on the forced path, which on the portable path send a mixed batch
    to the torch reference: slots outside a context (NaN here) must not reach a result there either."""
    gen = torch.Generator().manual_seed(4)
    ctx = [20, 1, 37, 45]
    q_lens = [20, 1, 1, 8]  # a prompt, two decode rows, a chunk after a cached prefix
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(ctx, 16, NUM_KV_HEADS, 64, torch.float32, gen)
    q = torch.randn(sum(q_lens), 9, 64, generator=gen)
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    assert use_cpu_kernels(q)
    out = kernels.paged_attention(q, k_dirty, v_dirty, block_tables, starts, context_lens, 0.125)
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, starts, context_lens, 0.125)
    assert rel_err(out, ref) < TOL[torch.float32]
    # The decode rows alone through the public decode entry point, on the NaN-poisoned cache.
    rows = torch.tensor([20, 21])
    out = kernels.paged_decode_attention(q[rows], k_dirty, v_dirty, block_tables[1:3], context_lens[1:3], 0.125)
    assert rel_err(out, ref[rows]) < TOL[torch.float32]


def test_bad_block_table_is_an_error_not_a_wild_read():
    gen = torch.Generator().manual_seed(5)
    k_cache, v_cache, _, _, block_tables = paged_cache([20], 16, 1, 64, torch.float32, gen)
    q = torch.randn(1, 1, 64)
    bad = block_tables.clone()
    bad[0, 1] = k_cache.shape[0]
    with pytest.raises(RuntimeError, match="out of range"):
        paged_decode_attention_cpu(q, k_cache, v_cache, bad, torch.tensor([20]), 0.125)
    with pytest.raises(RuntimeError, match="exceeds the block table"):
        paged_decode_attention_cpu(q, k_cache, v_cache, block_tables, torch.tensor([33]), 0.125)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("SLLM_CPU_KERNELS", "0")
    assert build._load_or_disable() is False


def test_a_failed_build_logs_one_warning_and_falls_back(monkeypatch, caplog):
    def no_compiler() -> None:
        raise RuntimeError("C++ compiler 'c++' not found (apt install g++)\nmore detail")

    monkeypatch.delenv("SLLM_CPU_KERNELS", raising=False)
    monkeypatch.setattr(build, "_load", no_compiler)
    with caplog.at_level(logging.WARNING, logger="kernels.cpu.build"):
        assert build._load_or_disable() is False
    (record,) = caplog.records
    assert "not found" in record.getMessage() and "more detail" not in record.getMessage()


def test_library_name_follows_the_sources(monkeypatch, tmp_path):
    name = build.library_name()
    assert name.startswith("sllm_cpu_") and name == build.library_name()
    src = tmp_path / "csrc"
    src.mkdir()
    for f in build.SOURCES + build.HEADERS:
        (src / f).write_bytes((build.CSRC / f).read_bytes())
    monkeypatch.setattr(build, "CSRC", src)
    assert build.library_name() == name
    (src / build.SOURCES[0]).write_bytes((src / build.SOURCES[0]).read_bytes() + b"\n// changed\n")
    assert build.library_name() != name


def test_cpu_benchmark_dry_run():
    """`sllm bench kernels --cpu` at toy sizes: every row checked against the reference and timed."""
    from benchmarks.cpu_kernels import cpu_main

    lines: list[str] = []
    with isa.forced("auto"):  # every path the CPU runs, whatever SLLM_CPU_ISA the run was started with
        rows = cpu_main(4, 40, 6, 2, 64, 16, ("float32", "bfloat16"), 24, lines.append, min_seconds=0.0,
                        copy_bytes=1 << 16, hidden=64, intermediate=96, long_context=300)
    text = "\n".join(lines)
    assert "memory copy bandwidth" in text and "correctness failure" not in text, text
    paths = len(isa.supported())
    assert f"paths timed: {'/'.join(reversed(isa.supported()))}" in text and "flags:" in text
    attention = [r for r in rows if "attention" in r.name]
    assert len(attention) == 2 * paths * 4
    assert len([r for r in rows if r.name.endswith("[C++]")]) == 2 * 2 * 3  # 3 small ops, 2 sizes, 2 dtypes
    assert len([r for r in rows if r.name.startswith("small_linear")]) == 2 * paths
    assert all(r.err <= r.tol and r.ms and r.ref_ms for r in rows)
    decode = [r for r in rows if r.name.startswith("paged_decode")]
    assert all(r.gbps and r.frac for r in decode)
