"""What the kernel benchmarks share, on any device: the case (an op, its torch reference and the bytes
and FLOPs it must move), paged-KV inputs, the checks against the references, the row a timing becomes,
and its table. The ops that run on every device (store_kv, RMSNorm, rotary) are built here with the
implementation to time passed in: the Triton kernel on a GPU, the public `kernels.*` function on the CPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from benchmarks.harness import format_table as text_table
from kernels.cache import store_kv_ref
from kernels.norm import rms_norm_ref
from kernels.rotary import build_cos_sin_cache, rotary_embedding_ref

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


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


def randn(shape, dtype, device, gen, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=gen, device=device, dtype=torch.float32)).to(dtype)



def store_kv_case(num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int, dtype, device,
                  op: Callable, label: str = "") -> Case:
    """`op` is the implementation timed against the reference (the Triton kernel, or the public
    `kernels.store_kv`, which picks the C++ kernel on the CPU); `label` tags its name. The other
    small-op cases below take the same two arguments."""
    gen = torch.Generator(device=device).manual_seed(1)
    num_blocks = math.ceil(num_tokens / block_size) + 1
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k = randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)
    v = randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)
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


def rms_norm_case(num_tokens: int, hidden: int, dtype, device, op: Callable, residual: bool = True,
                  label: str = "") -> Case:
    gen = torch.Generator(device=device).manual_seed(2)
    x = randn((num_tokens, hidden), dtype, device, gen, scale=3.0)
    w = randn((hidden,), dtype, device, gen, scale=0.1) + 1
    r = randn((num_tokens, hidden), dtype, device, gen) if residual else None

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


def rotary_case(num_tokens: int, num_q_heads: int, num_kv_heads: int, head_dim: int, dtype, device, op: Callable,
                label: str = "") -> Case:
    gen = torch.Generator(device=device).manual_seed(3)
    max_pos = 8192
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    cache = build_cos_sin_cache(inv_freq.cpu(), max_pos).to(device)
    positions = torch.randint(0, max_pos, (num_tokens,), generator=gen, device=device)
    q = randn((num_tokens, num_q_heads, head_dim), dtype, device, gen)
    k = randn((num_tokens, num_kv_heads, head_dim), dtype, device, gen)

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


def format_table(rows: list[Row]) -> str:
    head = ["kernel", "shape", "rel err", "ms", "ref ms", "speedup", "GB/s", "% copy BW", "TFLOP/s", "note"]
    body = [
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
        for r in rows
    ]
    return text_table(head, body, rule=True)


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None else fmt.format(x)


def short(xs: list[int]) -> str:
    return str(xs) if len(xs) <= 4 else f"[{xs[0]}, ... x{len(xs)}]"
