"""`sllm bench kernels --cpu` (or on a host with no GPU): the C++ CPU kernels against the torch references.

Times paged decode attention (the engine's decode step) and varlen prefill attention at SmolLM2's
head shapes by default, for each instruction-set path this CPU can run (AVX-512, AVX2, portable C++;
see `kernels/cpu/isa.py`) and each KV dtype, on a cache in the engine's head-major layout with
shuffled blocks. Decode attention is memory-bound, so its row also turns the K/V bytes it must read
into GB/s, as a fraction of a large `copy_` measured first. The layer's small ops follow (through the
public `kernels.*` functions, which pick the C++ kernels for CPU tensors; at one decode row, where the
per-call cost is the whole cost, and at a prompt's rows), then `sllm_cpu.small_linear` against
`F.linear` (MKL) on each path, under the shared header (benchmarks/harness.py)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

import kernels
from benchmarks.harness import machine_header, time_ms
from benchmarks.kernel_cases import (
    DTYPES,
    TOL,
    Case,
    Row,
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
from kernels.attention import paged_attention_ref, paged_decode_attention_ref
from kernels.cpu import isa
from kernels.cpu.attention import paged_attention_cpu, paged_decode_attention_cpu
from kernels.cpu.build import cpu_kernels_available
from kernels.linear import use_small_linear


def copy_bandwidth_gbps(nbytes: int = 1 << 28) -> float:
    """A large tensor copy: bytes read + bytes written per second, in GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    src.fill_(1)
    ms = time_ms(lambda: dst.copy_(src), min_runs=5, min_seconds=0.2)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _head_major(cache: torch.Tensor) -> torch.Tensor:
    # The engine's storage: [Hkv, blocks, block_size, D] under the logical [blocks, block_size, Hkv, D].
    return cache.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)


def decode_case(batch, context, num_q_heads, num_kv_heads, head_dim, block_size, dtype, isa, seed=0) -> Case:
    gen = torch.Generator().manual_seed(seed)
    lens = [context] * batch
    k_cache, v_cache, block_tables = paged_kv(lens, block_size, num_kv_heads, head_dim, dtype, "cpu", gen)
    k_cache, v_cache = _head_major(k_cache), _head_major(v_cache)
    q = randn((batch, num_q_heads, head_dim), dtype, "cpu", gen)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    scale = head_dim**-0.5
    args = (q, k_cache, v_cache, block_tables, context_lens, scale)

    def run():
        return paged_decode_attention_cpu(*args, isa=isa)

    def ref():
        return paged_decode_attention_ref(*args)

    kv_bytes = 2 * sum(lens) * num_kv_heads * head_dim * k_cache.element_size()
    return Case(
        name=f"paged_decode_attention [C++ {isa}]",
        shape=f"B={batch} ctx={context} Hq={num_q_heads} Hkv={num_kv_heads} D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        bytes=kv_bytes + 2 * q.numel() * q.element_size(),
        flops=4 * sum(lens) * num_q_heads * head_dim,
    )


def prefill_case(q_lens, prefix_lens, num_q_heads, num_kv_heads, head_dim, block_size, dtype, isa, seed=0) -> Case:
    gen = torch.Generator().manual_seed(seed)
    ctx = [n + p for n, p in zip(q_lens, prefix_lens, strict=True)]
    k_cache, v_cache, block_tables = paged_kv(ctx, block_size, num_kv_heads, head_dim, dtype, "cpu", gen)
    k_cache, v_cache = _head_major(k_cache), _head_major(v_cache)
    q = randn((sum(q_lens), num_q_heads, head_dim), dtype, "cpu", gen)
    starts = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    args = (q, k_cache, v_cache, block_tables, starts, context_lens, head_dim**-0.5)

    def run():
        return paged_attention_cpu(*args, isa=isa)

    def ref():
        return paged_attention_ref(*args)

    pairs = sum(n * p + n * (n + 1) // 2 for n, p in zip(q_lens, prefix_lens, strict=True))
    return Case(
        name=f"paged_attention (prefill) [C++ {isa}]",
        shape=f"q_lens={short(q_lens)} prefix={short(prefix_lens)} Hq={num_q_heads} Hkv={num_kv_heads} "
        f"D={head_dim} bs={block_size}",
        run=run,
        ref=ref,
        check=lambda: rel_err(run(), ref()),
        tol=TOL[dtype],
        flops=4 * pairs * num_q_heads * head_dim,
    )


def layer_op_cases(prompt_len, hidden, num_q_heads, num_kv_heads, head_dim, block_size, dtype) -> list[Case]:
    cases = []
    for rows in (1, prompt_len):
        cases += [
            rms_norm_case(rows, hidden, dtype, "cpu", op=kernels.rms_norm, label=" [C++]"),
            rotary_case(rows, num_q_heads, num_kv_heads, head_dim, dtype, "cpu", op=kernels.rotary_embedding,
                        label=" [C++]"),
            store_kv_case(rows, num_kv_heads, head_dim, block_size, dtype, "cpu", op=kernels.store_kv,
                          label=" [C++]"),
        ]
    return cases


def small_linear_cases(hidden: int, intermediate: int, path: str) -> list[Case]:
    """fp32 x [M, hidden] @ W^T, W as large as a SmolLM2 layer's gate_up, for M = 1 and 4, on the path
    the caller forced (`isa.forced`) while the case is timed: bandwidth-bound, so the rows report GB/s."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(2 * intermediate, hidden, generator=gen)
    cases = []
    for m in (1, 4):
        x = torch.randn(m, hidden, generator=gen)
        if not use_small_linear(x, weight):
            continue

        def run(x=x):
            return kernels.linear(x, weight)

        def ref(x=x):
            return F.linear(x, weight)

        cases.append(Case(name=f"small_linear [C++ {path}] vs F.linear", shape=f"M={m} N={2 * intermediate} K={hidden}",
                          run=run, ref=ref, check=lambda run=run, ref=ref: rel_err(run(), ref()),
                          tol=TOL[torch.float32], bytes=weight.numel() * 4))
    return cases


def quantized_linear_cases(hidden: int, intermediate: int, vocab: int, path: str) -> list[Case]:
    """x [M, hidden] times weights in GGUF blocks (kernels/quantized.py) against the same weight
    dequantized for F.linear (MKL): SmolLM2's gate_up in Q4_1 and Q8_0 at M = 1, 4, 8 and 32, and its
    tied LM head (Q8_0, vocab rows) at M = 1; then the other served types at M = 1 and 4, the K-quants
    with K rounded up to whole 256-weight super-blocks. Bandwidth-bound: GB/s counts the blocks read."""
    from kernels.gguf_blocks import BLOCK, HALF_FIELDS, NAMES, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0
    from kernels.quantized import (
        QuantizedWeight,
        dequantize,
        int8_activations,
        quantized_linear,
        quantized_linear_int8_ref,
    )

    gen = torch.Generator().manual_seed(0)
    shapes = [(qt, 2 * intermediate, m) for qt in (Q4_1, Q8_0) for m in (1, 4, 8, 32)] + [(Q8_0, vocab, 1)]
    shapes += [(qt, 2 * intermediate, m) for qt in (Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) for m in (1, 4)]
    cases = []
    for qtype, n, m in shapes:
        per, size = BLOCK[qtype]
        k = -(-hidden // per) * per
        data = torch.randint(0, 256, (n * k // per, size), dtype=torch.uint8, generator=gen)
        for offset, value in zip(HALF_FIELDS[qtype], (0.01 if per == 32 else 0.0005, -0.05), strict=False):
            data[:, offset:offset + 2] = torch.full((n * k // per, 1), value, dtype=torch.float16).view(torch.uint8)
        w = QuantizedWeight(data.reshape(n, -1), qtype, (n, k))
        dense = dequantize(w)
        x = torch.randn(m, k, generator=gen)

        def run(x=x, w=w):
            return quantized_linear(x, w)

        def ref(x=x, dense=dense):
            return F.linear(x, dense)

        cases.append(Case(name=f"quantized_linear {NAMES[qtype]} [C++ {path}] vs fp32 F.linear",
                          shape=f"M={m} N={n} K={k}", run=run, ref=ref,
                          check=lambda run=run, ref=ref: rel_err(run(), ref()), tol=TOL[torch.float32],
                          bytes=data.numel()))
        if m <= 8:
            cases.append(_int8_activation_case(x, w, dense, path, int8_activations, quantized_linear,
                                               quantized_linear_int8_ref))
    return cases


def _int8_activation_case(x, w, dense, path, int8_activations, quantized_linear, int8_ref) -> Case:
    """The int8-activation product (quantized_linear.h), checked against its own exact reference, timed
    against the fp32 F.linear like the float kernel above it."""

    def run():
        with int8_activations():
            return quantized_linear(x, w)

    from kernels.gguf_blocks import NAMES

    return Case(name=f"quantized_linear {NAMES[w.qtype]} int8-activations [C++ {path}] vs fp32 F.linear",
                shape=f"M={x.shape[0]} N={w.shape[0]} K={w.shape[1]}", run=run, ref=lambda: F.linear(x, dense),
                check=lambda: rel_err(run(), int8_ref(x, w)), tol=TOL[torch.float32], bytes=w.data.numel())


def time_case(case: Case, copy_gbps: float, min_seconds: float) -> Row:
    err = case.check()
    ms = time_ms(case.run, min_seconds=min_seconds)
    ref_ms = time_ms(case.ref, min_seconds=min_seconds)
    return measured_row(case, err, ms, ref_ms, copy_gbps)


def cpu_main(
    batch: int = 32,
    context: int = 514,
    num_q_heads: int = 9,
    num_kv_heads: int = 3,
    head_dim: int = 64,
    block_size: int = 16,
    dtypes: tuple[str, ...] = ("float32", "bfloat16"),
    prefill_len: int = 514,
    print_fn: Callable[[str], None] = print,
    *,
    min_seconds: float = 0.5,
    copy_bytes: int = 1 << 28,
    hidden: int = 576,
    intermediate: int = 1536,
    vocab: int = 49152,
    long_context: int = 2048,
) -> list[Row]:
    """Benchmarks the C++ CPU kernels and prints a table; returns its rows. The defaults are the
    offline benchmark's decode step on SmolLM2-135M (batch 32, 386-token prompts + 128 new tokens)."""
    if not cpu_kernels_available():
        raise SystemExit("sllm bench kernels --cpu: the C++ CPU kernels are not available (see the warning above)")
    if not set(dtypes) <= set(DTYPES):
        raise SystemExit(f"sllm bench kernels: dtypes must be among {sorted(DTYPES)}")
    # Every path the CPU runs whose vectors divide the head size, best first.
    isas = [p for p in reversed(isa.supported()) if isa.PATHS.index(p) <= isa.PATHS.index(isa.resolve(head_dim))]
    print_fn(machine_header())
    print_fn(
        f"paths timed: {'/'.join(isas)} (the engine takes {isa.resolve(head_dim)} under the ceiling "
        f"{isa.current()}, {isa.ENV}={os.environ.get(isa.ENV, 'auto')})"
    )
    copy_gbps = copy_bandwidth_gbps(copy_bytes)
    print_fn(f"memory copy bandwidth: {copy_gbps:.1f} GB/s (read + write), the 100% below\n")
    heads = (num_q_heads, num_kv_heads, head_dim, block_size)
    half = prefill_len // 2
    rows = []
    for name, path in itertools.product(dtypes, isas):
        dt = DTYPES[name]
        cases = [
            decode_case(batch, context, *heads, dt, path),
            # One sequence: its few (sequence, KV head) tasks are split along the context.
            decode_case(1, long_context, *heads, dt, path),
            prefill_case([prefill_len] * 4, [0] * 4, *heads, dt, path),
            prefill_case([half] * 4, [half] * 4, *heads, dt, path),
        ]
        if path == isas[0]:  # the small ops have one path
            cases += layer_op_cases(prefill_len, hidden, num_q_heads, num_kv_heads, head_dim, block_size, dt)
        if name == "float32":
            cases += small_linear_cases(hidden, intermediate, path)
            cases += quantized_linear_cases(hidden, intermediate, vocab, path)
        with isa.forced(path):
            for case in cases:
                row = time_case(case, copy_gbps, min_seconds)
                row.shape = f"{name} {row.shape}"
                rows.append(row)
    print_fn("timings (ms = median wall time; ref = the torch reference):")
    print_fn(format_table(rows))
    failures = [r for r in rows if r.note]
    if failures:
        print_fn(f"\n{len(failures)} correctness failure(s): " + "; ".join(f"{r.name} {r.shape}" for r in failures))
    return rows
