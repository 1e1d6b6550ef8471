"""Kernel benchmark: correctness against the torch references, timings, and bandwidth on a CUDA GPU.

`main()` prints one table. For every kernel it checks the Triton output against the reference on the
timed inputs, times both (median of `triton.testing.do_bench`), and for memory-bound kernels turns the
minimum number of bytes the op must move into an achieved bandwidth, reported as a fraction of the
device-to-device copy bandwidth measured first (the practical ceiling; HBM peak is never reached).
Paged decode attention is also compared with torch SDPA on a contiguous copy of the context and with
`flash_attn` when importable; the target is >= 70% of copy bandwidth at batch 64, context 2048.
A short pass over float16 / bfloat16 / float32 at small shapes checks dtypes the CPU interpreter
cannot (bfloat16 `tl.dot`, round-to-nearest bfloat16 casts).

Everything that builds inputs and checks results takes a device, so the tests run it on the CPU
under the Triton interpreter; only timing needs CUDA."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernels.activation import silu_and_mul_ref
from kernels.attention import paged_attention_ref, paged_decode_attention_ref
from kernels.cache import store_kv_ref
from kernels.norm import rms_norm_ref
from kernels.rotary import build_cos_sin_cache, rotary_embedding_ref

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
DECODE_TARGET = 0.70  # fraction of copy bandwidth for paged decode attention at batch 64, context 2048


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|; inf when the output has NaN/inf."""
    out, ref = out.float(), ref.float()
    if out.shape != ref.shape or not bool(torch.isfinite(out).all()):
        return math.inf
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


@dataclass
class Case:
    """One benchmarked op: `run`/`ref` are what gets timed (in-place ops may keep mutating their
    buffers); `check` runs both on fresh copies and returns the relative error."""

    name: str
    shape: str
    run: Callable[[], object]
    ref: Callable[[], object] | None
    check: Callable[[], float]
    tol: float
    bytes: int = 0  # minimum bytes moved to/from memory; 0 when the op is compute-bound
    flops: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class Row:
    name: str
    shape: str
    err: float | None
    tol: float | None
    ms: float | None
    ref_ms: float | None = None
    gbps: float | None = None
    frac: float | None = None
    tflops: float | None = None
    note: str = ""
    baseline: bool = False  # a comparison (SDPA, flash_attn), not one of our kernels


# --------------------------------------------------------------------------------------------------
# inputs


def paged_kv(
    context_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device,
    gen: torch.Generator,
):
    """A cache holding exactly the blocks the sequences need, in shuffled physical order."""
    needed = [max(1, math.ceil(n / block_size)) for n in context_lens]
    num_blocks = sum(needed)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    v_cache = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    perm = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    block_tables = torch.zeros(len(context_lens), max(needed), dtype=torch.int32, device=device)
    start = 0
    for b, nb in enumerate(needed):
        block_tables[b, :nb] = perm[start : start + nb]
        start += nb
    return k_cache, v_cache, block_tables


def _randn(shape, dtype, device, gen, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=gen, device=device, dtype=torch.float32)).to(dtype)


# --------------------------------------------------------------------------------------------------
# cases


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
) -> Case:
    from kernels.triton.attention import paged_decode_attention_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    lens = [context] * batch
    k_cache, v_cache, block_tables = paged_kv(lens, block_size, num_kv_heads, head_dim, dtype, device, gen)
    q = _randn((batch, num_q_heads, head_dim), dtype, device, gen)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    scale = head_dim**-0.5
    slopes = (
        torch.tensor([2.0 ** (-8.0 * (i + 1) / num_q_heads) for i in range(num_q_heads)], device=device)
        if alibi
        else None
    )

    def run():
        return paged_decode_attention_triton(
            q, k_cache, v_cache, block_tables, context_lens, scale, slopes, split_k=split_k
        )

    def ref():
        return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, slopes)

    elt = k_cache.element_size()
    kv_bytes = 2 * sum(lens) * num_kv_heads * head_dim * elt
    io_bytes = 2 * q.numel() * q.element_size() + block_tables.numel() * 4 + batch * 4
    label = {None: "auto", True: "split-K", False: "single"}[split_k]
    return Case(
        name=f"paged_decode_attention [{label}]" + (" alibi" if alibi else ""),
        shape=f"B={batch} ctx={context} Hq={num_q_heads} Hkv={num_kv_heads} D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        bytes=kv_bytes + io_bytes,
        flops=4 * sum(lens) * num_q_heads * head_dim,
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
) -> Case:
    from kernels.triton.attention import paged_attention_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    ctx = [n + p for n, p in zip(q_lens, prefix_lens, strict=True)]
    k_cache, v_cache, block_tables = paged_kv(ctx, block_size, num_kv_heads, head_dim, dtype, device, gen)
    q = _randn((sum(q_lens), num_q_heads, head_dim), dtype, device, gen)
    query_start_loc = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=device)
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    scale = head_dim**-0.5
    slopes = (
        torch.tensor([2.0 ** (-8.0 * (i + 1) / num_q_heads) for i in range(num_q_heads)], device=device)
        if alibi
        else None
    )
    args = (q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, slopes)

    def run():
        return paged_attention_triton(*args)

    def ref():
        return paged_attention_ref(*args)

    # Causal work: query i of a sequence with prefix p sees p + i + 1 keys.
    pairs = sum(n * p + n * (n + 1) // 2 for n, p in zip(q_lens, prefix_lens, strict=True))
    return Case(
        name="paged_attention (prefill)" + (" alibi" if alibi else ""),
        shape=f"q_lens={_short(q_lens)} prefix={_short(prefix_lens)} Hq={num_q_heads} Hkv={num_kv_heads} "
        f"D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        flops=4 * pairs * num_q_heads * head_dim,
    )


def store_kv_case(num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int, dtype, device,
                  op=None, label: str = "") -> Case:
    """`op` is the implementation timed against the reference: the Triton kernel unless given (the CPU
    benchmark passes the public `kernels.store_kv`, which picks the C++ kernel); `label` tags its name.
    The other small-op cases below take the same two arguments."""
    if op is None:
        from kernels.triton.cache import store_kv_triton as op

    gen = torch.Generator(device=device).manual_seed(1)
    num_blocks = math.ceil(num_tokens / block_size) + 1
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k = _randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)
    v = _randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)
    k_cache = torch.zeros(shape, dtype=dtype, device=device)
    v_cache = torch.zeros(shape, dtype=dtype, device=device)
    slots = torch.randperm(num_blocks * block_size, generator=gen, device=device)[:num_tokens]

    def check():
        kc, vc, kr, vr = (torch.zeros(shape, dtype=dtype, device=device) for _ in range(4))
        op(k, v, kc, vc, slots)
        store_kv_ref(k, v, kr, vr, slots)
        return max(rel_err(kc, kr), rel_err(vc, vr))

    return Case(
        name="store_kv" + label,
        shape=f"T={num_tokens} Hkv={num_kv_heads} D={head_dim} bs={block_size}",
        run=lambda: op(k, v, k_cache, v_cache, slots),
        ref=lambda: store_kv_ref(k, v, k_cache, v_cache, slots),
        check=check,
        tol=0.0,  # a copy: exact in every dtype
        bytes=4 * k.numel() * k.element_size() + slots.numel() * slots.element_size(),
    )


def rms_norm_case(num_tokens: int, hidden: int, dtype, device, residual: bool = True, op=None,
                  label: str = "") -> Case:
    if op is None:
        from kernels.triton.norm import rms_norm_triton as op

    gen = torch.Generator(device=device).manual_seed(2)
    x = _randn((num_tokens, hidden), dtype, device, gen, scale=3.0)
    w = _randn((hidden,), dtype, device, gen, scale=0.1) + 1
    r = _randn((num_tokens, hidden), dtype, device, gen) if residual else None

    def check():
        out, ref = op(x, w, 1e-6, r), rms_norm_ref(x, w, 1e-6, r)
        if r is None:
            return rel_err(out, ref)
        return max(rel_err(out[0], ref[0]), rel_err(out[1], ref[1]))

    elt = x.element_size()
    traffic = (x.numel() * (4 if residual else 2) + hidden) * elt  # x[, residual] in; out[, x+residual] out
    return Case(
        name="rms_norm" + (" + residual" if residual else "") + label,
        shape=f"T={num_tokens} H={hidden}",
        run=lambda: op(x, w, 1e-6, r),
        ref=lambda: rms_norm_ref(x, w, 1e-6, r),
        check=check,
        tol=TOL[dtype],
        bytes=traffic,
    )


def rotary_case(num_tokens: int, num_q_heads: int, num_kv_heads: int, head_dim: int, dtype, device, op=None,
                label: str = "") -> Case:
    if op is None:
        from kernels.triton.rotary import rotary_embedding_triton as op

    gen = torch.Generator(device=device).manual_seed(3)
    max_pos = 8192
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    cache = build_cos_sin_cache(inv_freq.cpu(), max_pos).to(device)
    positions = torch.randint(0, max_pos, (num_tokens,), generator=gen, device=device)
    q = _randn((num_tokens, num_q_heads, head_dim), dtype, device, gen)
    k = _randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)

    def check():
        qt, kt, qr, kr = q.clone(), k.clone(), q.clone(), k.clone()
        op(positions, qt, kt, cache)
        rotary_embedding_ref(positions, qr, kr, cache)
        return max(rel_err(qt, qr), rel_err(kt, kr))

    qk = (q.numel() + k.numel()) * q.element_size()
    return Case(
        name="rotary_embedding" + label,
        shape=f"T={num_tokens} Hq={num_q_heads} Hkv={num_kv_heads} D={head_dim}",
        run=lambda: op(positions, q, k, cache),
        ref=lambda: rotary_embedding_ref(positions, q, k, cache),
        check=check,
        tol=TOL[dtype],
        bytes=2 * qk + num_tokens * (head_dim * cache.element_size() + positions.element_size()),
    )


def silu_case(num_tokens: int, inter: int, dtype, device) -> Case:
    from kernels.triton.activation import silu_and_mul_triton

    gen = torch.Generator(device=device).manual_seed(4)
    x = _randn((num_tokens, 2 * inter), dtype, device, gen, scale=2.0)
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
    return [
        decode_case(3, 77, 8, 2, 128, 16, dtype, device, split_k=False, seed=5),
        decode_case(3, 600, 8, 2, 128, 16, dtype, device, split_k=True, alibi=True, seed=6),
        decode_case(2, 40, 24, 3, 64, 32, dtype, device, split_k=None, alibi=False, seed=7),
        prefill_case([1, 33, 70], [19, 0, 50], 8, 2, 128, 16, dtype, device, seed=8),
        prefill_case([17, 64], [16, 5], 6, 2, 64, 8, dtype, device, alibi=True, seed=9),
        store_kv_case(37, 2, 128, 16, dtype, device),
        rms_norm_case(5, 1000, dtype, device, residual=True),
        rms_norm_case(5, 256, dtype, device, residual=False),
        rotary_case(7, 8, 2, 128, dtype, device),
        silu_case(5, 300, dtype, device),
    ]


def check_cases(cases: list[Case]) -> list[Row]:
    rows = []
    for case in cases:
        try:
            err, note = case.check(), ""
        except Exception as exc:  # noqa: BLE001 - a broken kernel is a row in the report, not a crash
            err, note = math.inf, f"error: {type(exc).__name__}: {exc}"[:120]
        if err > case.tol and not note:
            note = "FAIL"
        rows.append(Row(case.name, case.shape, err, case.tol, None, note=note))
    return rows


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


def measured_row(case: Case, err: float, ms: float, ref_ms: float | None, copy_gbps: float) -> Row:
    """A timed case's row: bandwidth against a plain copy, TFLOP/s, and FAIL past its tolerance."""
    row = Row(case.name, case.shape, err, case.tol, ms, ref_ms)
    if case.bytes:
        row.gbps = case.bytes / (ms * 1e-3) / 1e9
        row.frac = row.gbps / copy_gbps
    if case.flops:
        row.tflops = case.flops / (ms * 1e-3) / 1e12
    if err > case.tol:
        row.note = "FAIL"
    return row


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
# report


def format_table(rows: list[Row]) -> str:
    head = ["kernel", "shape", "rel err", "ms", "ref ms", "speedup", "GB/s", "% copy BW", "TFLOP/s", "note"]
    body = []
    for r in rows:
        body.append(
            [
                r.name,
                r.shape,
                "" if r.err is None else ("inf" if math.isinf(r.err) else f"{r.err:.1e}"),
                _num(r.ms, "{:.4f}"),
                _num(r.ref_ms, "{:.4f}"),
                "" if r.ms is None or r.ref_ms is None else f"{r.ref_ms / r.ms:.1f}x",
                _num(r.gbps, "{:.0f}"),
                "" if r.frac is None else f"{100 * r.frac:.0f}%",
                _num(r.tflops, "{:.1f}"),
                r.note,
            ]
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)).rstrip() for b in body]
    return "\n".join(lines)


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None else fmt.format(x)


def _short(xs: list[int]) -> str:
    return str(xs) if len(xs) <= 4 else f"[{xs[0]}, ... x{len(xs)}]"


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
    print_fn(
        f"device: {torch.cuda.get_device_name(dev)}  torch {torch.__version__}  triton {triton.__version__}"
    )
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
    timed.append(time_case(prefill_case([prefill_len] * 4, [0] * 4, *heads), copy_gbps))
    half = prefill_len // 2
    timed.append(time_case(prefill_case([half] * 4, [3 * half] * 4, *heads), copy_gbps))
    timed.append(time_case(store_kv_case(tokens, num_kv_heads, head_dim, block_size, dt, device), copy_gbps))
    timed.append(time_case(rms_norm_case(tokens, hidden, dt, device, residual=True), copy_gbps))
    timed.append(time_case(rms_norm_case(tokens, hidden, dt, device, residual=False), copy_gbps))
    timed.append(time_case(rotary_case(tokens, num_q_heads, num_kv_heads, head_dim, dt, device), copy_gbps))
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


if __name__ == "__main__":
    main()


def bench_kernels(
    batch: int | None = None,
    context: int | None = None,
    num_q_heads: int | None = None,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    block_size: int = 16,
    dtype: str | None = None,
    cpu: bool = False,
) -> None:
    """`sllm bench kernels`: check and time the kernels against their torch references: the Triton
    kernels on a CUDA GPU (defaults: batch 64, context 2048, 32/8 heads of 128, float16), or with --cpu
    or no GPU the C++ CPU attention kernels (defaults: SmolLM2-135M's decode step, batch 32, context
    514, 9/3 heads of 64, float32 and bfloat16)."""
    if cpu or not torch.cuda.is_available():
        from kernels.cpu.bench import cpu_main

        cpu_main(
            batch=batch or 32, context=context or 514, num_q_heads=num_q_heads or 9,
            num_kv_heads=num_kv_heads or 3, head_dim=head_dim or 64, block_size=block_size,
            dtypes=(dtype,) if dtype else ("float32", "bfloat16"),
        )  # fmt: skip
        return
    main(batch=batch or 64, context=context or 2048, num_q_heads=num_q_heads or 32,
         num_kv_heads=num_kv_heads or 8, head_dim=head_dim or 128, block_size=block_size,
         dtype=dtype or "float16")
