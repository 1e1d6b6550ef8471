"""`sllm bench kernels` on a CUDA GPU: the Triton kernels' correctness against the torch references,
their timings, and bandwidth.

`main()` prints one table. For every kernel it checks the Triton output against the reference on the
timed inputs, times both (median of `triton.testing.do_bench`), and for memory-bound kernels turns the
minimum number of bytes the op must move into an achieved bandwidth, reported as a fraction of the
device-to-device copy bandwidth measured first (the practical ceiling; HBM peak is never reached).
Paged decode attention is also compared with torch SDPA on a contiguous copy of the context and with
`flash_attn` when importable; the target is >= 70% of copy bandwidth at batch 64, context 2048.
A short pass over float16 / bfloat16 / float32 at small shapes checks dtypes the CPU interpreter
cannot (bfloat16 `tl.dot`, round-to-nearest bfloat16 casts). Sliding-window cases (Mistral, Gemma's
local layers) are checked there too, and timed on a context four times the window, where the kernels
should take about the time of a context as long as the window (they skip the blocks behind it).

Everything that builds inputs and checks results takes a device, so the tests run it on the CPU
under the Triton interpreter; only timing needs CUDA."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable

import torch

from benchmarks.harness import machine_header
from benchmarks.kernel_cases import (
    DTYPES,
    TOL,
    Case,
    Row,
    check_cases,
    format_table,
    measured_row,
    paged_kv,
    randn,
    rel_err,
    rms_norm_case,
    rotary_case,
    short,
    store_kv_case,
)
from kernels.activation import silu_and_mul_ref
from kernels.attention import paged_attention_ref, paged_decode_attention_ref

DECODE_TARGET = 0.70  # fraction of copy bandwidth for paged decode attention at batch 64, context 2048


def decode_case(
    batch: int,
    context: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device,
    split_k: bool | None = None,
    alibi: bool = False,
    seed: int = 0,
    window: int | None = None,
    partition_size: int | None = None,
) -> Case:
    from kernels.triton.attention import paged_decode_attention_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    lens = [context] * batch
    k_cache, v_cache, block_tables = paged_kv(lens, block_size, num_kv_heads, head_dim, dtype, device, gen)
    q = randn((batch, num_q_heads, head_dim), dtype, device, gen)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    scale = head_dim**-0.5
    slopes = (
        torch.tensor([2.0 ** (-8.0 * (i + 1) / num_q_heads) for i in range(num_q_heads)], device=device)
        if alibi
        else None
    )

    def run():
        return paged_decode_attention_triton(
            q, k_cache, v_cache, block_tables, context_lens, scale, slopes, window, split_k=split_k,
            partition_size=partition_size,
        )

    def ref():
        return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, slopes, window)

    # A windowed query needs only its window's keys: the bandwidth is counted on those.
    seen = sum(lens) if window is None else sum(min(n, window) for n in lens)
    elt = k_cache.element_size()
    kv_bytes = 2 * seen * num_kv_heads * head_dim * elt
    io_bytes = 2 * q.numel() * q.element_size() + block_tables.numel() * 4 + batch * 4
    label = {None: "auto", True: "split-K", False: "single"}[split_k]
    return Case(
        name=f"paged_decode_attention [{label}]" + (" alibi" if alibi else "") + _window_tag(window),
        shape=f"B={batch} ctx={context} Hq={num_q_heads} Hkv={num_kv_heads} D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        bytes=kv_bytes + io_bytes,
        flops=4 * seen * num_q_heads * head_dim,
        extra=dict(
            q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, context_lens=context_lens
        ),
    )


def prefill_case(
    q_lens: list[int],
    prefix_lens: list[int],
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device,
    alibi: bool = False,
    seed: int = 0,
    window: int | None = None,
) -> Case:
    from kernels.triton.attention import paged_attention_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    ctx = [n + p for n, p in zip(q_lens, prefix_lens, strict=True)]
    k_cache, v_cache, block_tables = paged_kv(ctx, block_size, num_kv_heads, head_dim, dtype, device, gen)
    q = randn((sum(q_lens), num_q_heads, head_dim), dtype, device, gen)
    query_start_loc = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=device)
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    scale = head_dim**-0.5
    slopes = (
        torch.tensor([2.0 ** (-8.0 * (i + 1) / num_q_heads) for i in range(num_q_heads)], device=device)
        if alibi
        else None
    )
    args = (q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, slopes, window)

    def run():
        return paged_attention_triton(*args)

    def ref():
        return paged_attention_ref(*args)

    # Causal work: query i of a sequence with prefix p sees p + i + 1 keys, at most the window's.
    pairs = sum(min(p + i + 1, window or p + i + 1) for n, p in zip(q_lens, prefix_lens, strict=True)
                for i in range(n))
    return Case(
        name="paged_attention (prefill)" + (" alibi" if alibi else "") + _window_tag(window),
        shape=f"q_lens={short(q_lens)} prefix={short(prefix_lens)} Hq={num_q_heads} Hkv={num_kv_heads} "
        f"D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        flops=4 * pairs * num_q_heads * head_dim,
    )


def _window_tag(window: int | None) -> str:
    return "" if window is None else f" window={window}"


def silu_case(num_tokens: int, inter: int, dtype, device) -> Case:
    from kernels.triton.activation import silu_and_mul_triton

    gen = torch.Generator(device=device).manual_seed(4)
    x = randn((num_tokens, 2 * inter), dtype, device, gen, scale=2.0)
    return Case(
        name="silu_and_mul",
        shape=f"T={num_tokens} I={inter}",
        run=lambda: silu_and_mul_triton(x),
        ref=lambda: silu_and_mul_ref(x),
        check=lambda: rel_err(silu_and_mul_triton(x), silu_and_mul_ref(x)),
        tol=TOL[dtype],
        bytes=3 * num_tokens * inter * x.element_size(),
    )


def small_cases(dtype: torch.dtype, device) -> list[Case]:
    """Small shapes covering every kernel and option, for the per-dtype correctness pass."""
    from kernels.triton.cache import store_kv_triton
    from kernels.triton.norm import rms_norm_triton
    from kernels.triton.rotary import rotary_embedding_triton

    return [
        decode_case(3, 77, 8, 2, 128, 16, dtype, device, split_k=False, seed=5),
        decode_case(3, 600, 8, 2, 128, 16, dtype, device, split_k=True, alibi=True, seed=6),
        decode_case(2, 40, 24, 3, 64, 32, dtype, device, split_k=None, alibi=False, seed=7),
        prefill_case([1, 33, 70], [19, 0, 50], 8, 2, 128, 16, dtype, device, seed=8),
        prefill_case([17, 64], [16, 5], 6, 2, 64, 8, dtype, device, alibi=True, seed=9),
        # Windows starting inside a block and at a block edge, shorter than some contexts and longer than
        # others; split-K partitions laid over the window; a chunk that starts after its window.
        decode_case(3, 77, 8, 2, 128, 16, dtype, device, split_k=False, seed=10, window=21),
        decode_case(3, 600, 8, 2, 128, 16, dtype, device, split_k=True, seed=11, window=320, partition_size=128),
        prefill_case([1, 33, 70, 40], [19, 0, 50, 200], 8, 2, 128, 16, dtype, device, seed=12, window=32),
        store_kv_case(37, 2, 128, 16, dtype, device, store_kv_triton),
        rms_norm_case(5, 1000, dtype, device, rms_norm_triton, residual=True),
        rms_norm_case(5, 256, dtype, device, rms_norm_triton, residual=False),
        rotary_case(7, 8, 2, 128, dtype, device, rotary_embedding_triton),
        silu_case(5, 300, dtype, device),
    ]


# --------------------------------------------------------------------------------------------------
# timing (CUDA only)


def _time_ms(fn: Callable[[], object]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_bandwidth_gbps(nbytes: int = 1 << 30, device="cuda") -> float:
    """Device-to-device copy of a large buffer: bytes read + bytes written per second, in GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def time_case(case: Case, copy_gbps: float) -> Row:
    try:
        err = case.check()
        ms = _time_ms(case.run)
        ref_ms = _time_ms(case.ref) if case.ref is not None else None
    except Exception as exc:  # noqa: BLE001
        return Row(
            case.name, case.shape, math.inf, case.tol, None, note=f"error: {type(exc).__name__}: {exc}"[:120]
        )
    return measured_row(case, err, ms, ref_ms, copy_gbps)


def baseline_rows(case: Case, copy_gbps: float) -> list[Row]:
    """torch SDPA on a contiguous copy of the context, and flash_attn's decode kernel if installed."""
    import torch.nn.functional as F

    x = case.extra
    q, k_cache, v_cache = x["q"], x["k_cache"], x["v_cache"]
    block_tables, context_lens = x["block_tables"], x["context_lens"]
    batch, num_q_heads, head_dim = q.shape
    context = int(context_lens.max())
    scale = head_dim**-0.5
    nb = block_tables.shape[1]
    # [B, ctx, Hkv, D] contiguous copies, as a non-paged engine would keep them.
    k = k_cache[block_tables.long()].reshape(batch, nb * k_cache.shape[1], *k_cache.shape[2:])[:, :context]
    v = v_cache[block_tables.long()].reshape(batch, nb * v_cache.shape[1], *v_cache.shape[2:])[:, :context]
    k, v = k.contiguous(), v.contiguous()
    rows = []

    kt, vt = k.transpose(1, 2), v.transpose(1, 2)  # [B, Hkv, ctx, D] views for SDPA
    q4 = q[:, :, None, :]
    gqa = num_q_heads != k.shape[2]

    def sdpa():
        return F.scaled_dot_product_attention(q4, kt, vt, scale=scale, enable_gqa=gqa)[:, :, 0]

    rows.append(_baseline_row("torch SDPA (contiguous)", case, sdpa, copy_gbps))

    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        rows.append(
            Row("flash_attn_with_kvcache", case.shape, None, None, None, note="not installed", baseline=True)
        )
    else:
        q_fa = q[:, None]  # [B, 1, Hq, D]
        seqlens = context_lens.to(torch.int32)

        def fa():
            return flash_attn_with_kvcache(q_fa, k, v, cache_seqlens=seqlens, softmax_scale=scale)[:, 0]

        rows.append(_baseline_row("flash_attn_with_kvcache (contiguous)", case, fa, copy_gbps))
    return rows


def _baseline_row(name: str, case: Case, fn: Callable[[], torch.Tensor], copy_gbps: float) -> Row:
    try:
        err = rel_err(fn(), case.ref())
        ms = _time_ms(fn)
    except Exception as exc:  # noqa: BLE001
        note = f"error: {type(exc).__name__}: {exc}"[:120]
        return Row(name, case.shape, None, None, None, note=note, baseline=True)
    gbps = case.bytes / (ms * 1e-3) / 1e9
    return Row(name, case.shape, err, case.tol, ms, None, gbps, gbps / copy_gbps, baseline=True)


# --------------------------------------------------------------------------------------------------
# the run


def main(
    batch: int = 64,
    context: int = 2048,
    num_q_heads: int = 32,
    num_kv_heads: int = 8,
    head_dim: int = 128,
    block_size: int = 16,
    dtype: str = "float16",
    check_dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32"),
    print_fn: Callable[[str], None] = print,
) -> list[Row]:
    """Benchmarks every kernel on the current CUDA device and prints a table; returns its rows.

    Raises SystemExit with a message when there is no CUDA device or Triton is missing."""
    if not torch.cuda.is_available():
        raise SystemExit(
            "sllm bench kernels: no CUDA device found (torch.cuda.is_available() is False); the "
            "Triton kernels only run on CUDA. Their CPU correctness tests: "
            "TRITON_INTERPRET=1 pytest tests/kernels"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit(
            "sllm bench kernels: TRITON_INTERPRET=1 is set; unset it to time the compiled kernels"
        )
    try:
        import triton
    except ImportError:
        raise SystemExit("sllm bench kernels: Triton is not installed (pip install 'sllm[triton]')") from None
    if dtype not in DTYPES or not set(check_dtypes) <= set(DTYPES):
        raise SystemExit(f"sllm bench kernels: dtypes must be among {sorted(DTYPES)}")
    dev = torch.device("cuda")
    print_fn(machine_header())
    print_fn(f"device: {torch.cuda.get_device_name(dev)}  triton {triton.__version__}")
    return run_all(
        dev, batch, context, num_q_heads, num_kv_heads, head_dim, block_size, dtype, check_dtypes, print_fn
    )


def run_all(
    device,
    batch: int,
    context: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: str,
    check_dtypes: tuple[str, ...],
    print_fn: Callable[[str], None],
    *,
    long_context: int = 16384,
    prefill_len: int = 1024,
    tokens: int = 8192,
    hidden: int = 4096,
    intermediate: int = 11008,
    copy_bytes: int = 1 << 30,
) -> list[Row]:
    """The benchmark proper, on `device`; the keyword sizes exist so a CPU dry run can shrink them."""
    dt = DTYPES[dtype]
    rows: list[Row] = []
    for name in check_dtypes:
        rows += [_tag(r, name) for r in check_cases(small_cases(DTYPES[name], device))]
    print_fn("correctness at small shapes (all kernels, all options):")
    print_fn(format_table(rows))

    copy_gbps = copy_bandwidth_gbps(copy_bytes, device)
    print_fn(f"\ndevice-to-device copy bandwidth: {copy_gbps:.0f} GB/s (read + write), the 100% below\n")
    heads = (num_q_heads, num_kv_heads, head_dim, block_size, dt, device)
    timed: list[Row] = []
    target = None
    for split in (None, False, True):
        case = decode_case(batch, context, *heads, split_k=split)
        row = time_case(case, copy_gbps)
        timed.append(row)
        if split is None:
            target = row
            timed += baseline_rows(case, copy_gbps)
        del case
        _empty_cache(device)
    # Few sequences, long contexts: where split-K (flash-decoding) matters.
    for split in (None, False):
        case = decode_case(4, long_context, *heads, split_k=split)
        timed.append(time_case(case, copy_gbps))
        if split is None:
            timed += baseline_rows(case, copy_gbps)
        del case
        _empty_cache(device)
    timed.append(time_case(decode_case(batch, context, *heads, alibi=True), copy_gbps))
    # A window a quarter of the context: the bandwidth is counted on the window's keys only, so a kernel
    # that reads the whole context and masks shows up as a quarter of the unwindowed row's.
    timed.append(time_case(decode_case(batch, context, *heads, window=context // 4), copy_gbps))
    timed.append(time_case(decode_case(4, long_context, *heads, window=long_context // 4), copy_gbps))
    timed.append(time_case(prefill_case([prefill_len] * 4, [0] * 4, *heads), copy_gbps))
    half = prefill_len // 2
    timed.append(time_case(prefill_case([half] * 4, [3 * half] * 4, *heads), copy_gbps))
    timed.append(time_case(prefill_case([prefill_len] * 4, [0] * 4, *heads, window=prefill_len // 4), copy_gbps))
    from kernels.triton.cache import store_kv_triton
    from kernels.triton.norm import rms_norm_triton
    from kernels.triton.rotary import rotary_embedding_triton

    timed.append(time_case(store_kv_case(tokens, num_kv_heads, head_dim, block_size, dt, device, store_kv_triton),
                           copy_gbps))
    timed.append(time_case(rms_norm_case(tokens, hidden, dt, device, rms_norm_triton, residual=True), copy_gbps))
    timed.append(time_case(rms_norm_case(tokens, hidden, dt, device, rms_norm_triton, residual=False), copy_gbps))
    timed.append(time_case(rotary_case(tokens, num_q_heads, num_kv_heads, head_dim, dt, device,
                                       rotary_embedding_triton), copy_gbps))
    timed.append(time_case(silu_case(tokens, intermediate, dt, device), copy_gbps))
    print_fn(f"timings ({dtype}; ms = median of triton.testing.do_bench; ref = the torch reference):")
    print_fn(format_table(timed))

    if target is not None and target.frac is not None:
        verdict = "meets" if target.frac >= DECODE_TARGET else "MISSES"
        print_fn(
            f"\npaged decode attention, batch {batch}, context {context}: {100 * target.frac:.0f}% of copy "
            f"bandwidth ({verdict} the {100 * DECODE_TARGET:.0f}% target)"
        )
    failures = [r for r in rows + timed if r.note.startswith(("FAIL", "error")) and not r.baseline]
    if failures:
        print_fn(
            f"\n{len(failures)} correctness failure(s): "
            + "; ".join(f"{r.name} [{r.note}]" for r in failures)
        )
    return rows + timed


def _empty_cache(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _tag(row: Row, dtype_name: str) -> Row:
    row.shape = f"{dtype_name} {row.shape}"
    return row
