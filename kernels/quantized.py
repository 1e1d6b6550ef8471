"""Weights kept in GGUF's quantized blocks (`QuantizedWeight`), and the ops that read them: the matmul
(`quantized_linear`) and the row lookup of a quantized embedding table (`quantized_embedding`).

The torch reference dequantizes the blocks as the GGUF format defines them (kernels/gguf_blocks.py)
and calls `F.linear`; on the CPU, few-row products go to the C++ kernel (csrc/quantized_linear.h), which
reads each block once and dequantizes it in registers, so its result is the reference's up to float
rounding."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.cpu.build import cpu_kernels_available
from kernels.gguf_blocks import BLOCK, NAMES, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, decode_blocks

SUPPORTED_TYPES = frozenset(BLOCK)
__all__ = ["BLOCK", "NAMES", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "SUPPORTED_TYPES",
           "QuantizedWeight", "StackedWeight", "as_one_type", "cat_rows", "dequantize", "quantize_q8_0",
           "quantized_embedding", "quantized_linear", "stacked_linear", "weight_tensors", "quantized_linear_ref",
           "serves_quantized", "int8_activations", "quantized_linear_int8_ref", "use_int8_activations"]


@dataclass(frozen=True)
class QuantizedWeight:
    """A matrix [N, K] as GGUF stores it: N rows of K // block_weights blocks, bytes as in the file."""

    data: torch.Tensor  # uint8 [N, row_bytes], contiguous
    qtype: int
    shape: tuple[int, int]  # (N out_features, K in_features)

    def __post_init__(self) -> None:
        per, size = BLOCK[self.qtype]
        n, k = self.shape
        if k % per or tuple(self.data.shape) != (n, k // per * size) or self.data.dtype != torch.uint8:
            raise ValueError(f"{NAMES[self.qtype]} weight {self.shape} needs uint8 [{n}, {k // per * size}] "
                             f"(K a multiple of {per}), got {self.data.dtype} {list(self.data.shape)}")


# Types whose every weight is d * (integer in [-128, 127]) with one fp16 d per 32: Q8_0 holds any of them exactly.
_SIGNED_32 = {Q4_0: 8, Q5_0: 16, Q8_0: 0}


def as_q8_0(w: QuantizedWeight) -> QuantizedWeight:
    """A Q4_0 or Q5_0 weight as Q8_0 blocks with the same scales and integers: lossless (each weight is
    d * (q - 8) or d * (q - 16) either way), so a fused matrix can share one type."""
    if w.qtype == Q8_0:
        return w
    per, size = BLOCK[w.qtype]
    blocks = w.data.reshape(-1, size)
    start = 2 + (4 if w.qtype == Q5_0 else 0)
    nibbles = blocks[:, start:]
    q = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=1).to(torch.int16)  # weights 0-15 low, 16-31 high
    if w.qtype == Q5_0:
        qh = blocks[:, 2:6].to(torch.int64)
        bits = qh[:, 0] | (qh[:, 1] << 8) | (qh[:, 2] << 16) | (qh[:, 3] << 24)
        q = q | (((bits.unsqueeze(1) >> torch.arange(32)) & 1) << 4).to(torch.int16)
    signed = (q - _SIGNED_32[w.qtype]).to(torch.int8).view(torch.uint8)
    data = torch.cat([blocks[:, :2], signed], dim=1).reshape(w.shape[0], -1).contiguous()
    return QuantizedWeight(data, Q8_0, w.shape)


@dataclass(frozen=True)
class StackedWeight:
    """Two quantized matrices of different types stacked along their output rows and read apart: a
    Q4_K_M file's Q4_K q and k beside its Q6_K v, Qwen2.5-0.5B's Q5_0 q and k beside a Q8_0 v. As one
    type they would be Q8_0 throughout (Llama-3.2-1B's q/k/v: 82 MB a token where the file's blocks are
    59), and the K-quant parts requantized; apart, each is the file's own."""

    parts: tuple[QuantizedWeight, QuantizedWeight]

    @property
    def shape(self) -> tuple[int, int]:
        return (sum(p.shape[0] for p in self.parts), self.parts[0].shape[1])


def weight_tensors(w: torch.Tensor | QuantizedWeight | StackedWeight) -> list[torch.Tensor]:
    """The tensors that hold a weight's values or blocks."""
    if isinstance(w, StackedWeight):
        return [p.data for p in w.parts]
    return [w.data if isinstance(w, QuantizedWeight) else w]


def cat_rows(parts: list[torch.Tensor | QuantizedWeight]) -> torch.Tensor | QuantizedWeight | StackedWeight:
    """Stacks matrices along their output rows (q, k, v into one projection). Quantized ones stay quantized:
    as they are when they share a type; as a `StackedWeight` of two runs of one type each (q and k, then
    v); else as one Q8_0 matrix (`_as_q8_0_rows`)."""
    if len(parts) == 1:
        return parts[0]  # a stacked weight's lone v: the file's own blocks, uncopied
    if not all(isinstance(p, QuantizedWeight) for p in parts):
        return torch.cat([dequantize(p) if isinstance(p, QuantizedWeight) else p for p in parts]).contiguous()
    runs = [[parts[0]]]
    for p in parts[1:]:
        if p.qtype == runs[-1][-1].qtype:
            runs[-1].append(p)
        else:
            runs.append([p])
    if len(runs) == 1:
        return QuantizedWeight(torch.cat([p.data for p in parts]), parts[0].qtype,
                               (sum(p.shape[0] for p in parts), parts[0].shape[1]))
    if len(runs) == 2:
        return StackedWeight((cat_rows(runs[0]), cat_rows(runs[1])))
    return _as_q8_0_rows(parts)


def _as_q8_0_rows(parts: list[QuantizedWeight] | tuple[QuantizedWeight, ...]) -> QuantizedWeight:
    """Matrices of several types stacked as one Q8_0 matrix: Q4_0 and Q5_0 parts without loss (`as_q8_0`),
    others requantized, each weight within half a step of max|w| / 127 of its 32 (a sixteenth of a Q4
    step). Kept as float instead, Llama-3.2-1B's fused q/k/v would read 25 MB a layer where these read 7."""
    q8 = [as_q8_0(p) if p.qtype in _SIGNED_32 else quantize_q8_0(dequantize(p)) for p in parts]
    return QuantizedWeight(torch.cat([p.data for p in q8]), Q8_0, (sum(p.shape[0] for p in q8), q8[0].shape[1]))


def dequantize(w: QuantizedWeight | StackedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The reference: every block's weights as the format defines them, [N, K]."""
    if isinstance(w, StackedWeight):
        return torch.cat([dequantize(p, dtype) for p in w.parts])
    return decode_blocks(w.data, w.qtype).reshape(w.shape).to(dtype)


def as_one_type(w: QuantizedWeight | StackedWeight) -> QuantizedWeight:
    """A stacked weight as one matrix of one type (`_as_q8_0_rows`), for callers that reorder its rows."""
    return w if isinstance(w, QuantizedWeight) else _as_q8_0_rows(w.parts)


def quantized_linear_ref(x: torch.Tensor, w: QuantizedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The product with the dequantized weight, in float: what the model means."""
    return F.linear(x, dequantize(w, x.dtype), bias)


def quantize_activations(x: torch.Tensor, span: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows [M, K] as int8, as the C++ int8 path quantizes them for a weight whose blocks hold `span`
    weights (32, or a K-quant's 256: llama.cpp's Q8_1 and Q8_K), with the same float32 operations, so the
    same q: q [M, K], and per 32 values d = max|x| / 127 over their span and s = d * sum(q) [M, K / 32]."""
    spans = x.float().reshape(x.shape[0], -1, span)
    d = (spans.abs().amax(dim=-1, keepdim=True) / 127).expand(-1, -1, span // 32).reshape(x.shape[0], -1, 1)
    blocks = spans.reshape(x.shape[0], -1, 32)
    v = blocks * torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)  # half away from zero
    return q.reshape(x.shape), d.squeeze(-1), d.squeeze(-1) * q.sum(dim=-1)


def quantized_linear_int8_ref(x: torch.Tensor, w: QuantizedWeight | StackedWeight,
                              bias: torch.Tensor | None = None) -> torch.Tensor:
    """The int8-activation product (`int8_activations`) in float64: the dequantized weight times the
    activations as their int8 blocks stand for them (q * d per 32 values, d per the weight's block:
    `quantize_activations`). The kernels compute the same sum split per 32 weights, d_w * d_x *
    sum(q_w * q_x) + m_w * s_x, so they differ from it by float rounding only; against
    `quantized_linear_ref` it differs by the activations' rounding (half a step of max|x| / 127 per value).
    A stacked weight's parts each quantize x for their own type, as the kernels call them apart."""
    if isinstance(w, StackedWeight):
        y = torch.cat([quantized_linear_int8_ref(x, p) for p in w.parts], dim=-1)
        return y if bias is None else y + bias
    n, k = w.shape
    q, d, _ = quantize_activations(x.reshape(-1, k), BLOCK[w.qtype][0])
    x8 = (q.double().reshape(-1, k // 32, 32) * d.double().unsqueeze(-1)).reshape(-1, k)
    y = F.linear(x8, dequantize(w, torch.float64), None if bias is None else bias.double())
    return y.float().reshape(*x.shape[:-1], n)


@contextlib.contextmanager
def int8_activations() -> Iterator[None]:
    """Within it, the C++ kernels take int8 activations (quantized_linear.h) for every block type and
    every product, the few-row op, the one-call decode step and (on the AVX2 and AVX-512 paths) the
    many-row octet product of prefill and batched decode: llama.cpp's trade of exactness for speed."""
    before = torch.ops.sllm_cpu.int8_activations()
    torch.ops.sllm_cpu.set_int8_activations(True)
    try:
        yield
    finally:
        torch.ops.sllm_cpu.set_int8_activations(before)


def use_int8_activations(device: torch.device, dtype: torch.dtype) -> None:
    """Switches the C++ kernels to int8 activations for the rest of the process (`--activations int8`):
    every quantized product after this, of every model the process serves, takes the integer path."""
    if not serves_quantized(device, dtype):
        raise ValueError("activations int8 needs quantized weights on the CPU in float32 with the C++ kernels' "
                         "AVX2 or AVX-512 path")
    torch.ops.sllm_cpu.set_int8_activations(True)


# Rows of x up to which the C++ kernel beats dequantizing the weight for MKL's GEMM where only its passes
# of 8 rows exist (the portable path). Measured against the whole fallback
# (the dequantize op's fresh tensor, then F.linear) on a 2-core Xeon (AVX-512), for SmolLM2's matrices: at
# 17 rows 0.50 against 0.86 ms (gate_up), 0.24 against 0.60 (down); at 32 rows 0.86 against 0.95; at 64
# rows the fallback wins (1.55 against 1.85). The AVX2 and AVX-512 float paths have no such limit: past 8
# rows they dequantize a tile of the weight into cache once for every row (quantized_gemm_avx2), 1.0-2.0x
# MKL's speed on the same weight already in float32 at 16-128 rows of Llama-3.2-1B's matrices (one
# thread, a 2-core EPYC), where the fallback's dequantizing costs 2-5x more than the product.
QUANT_MAX_ROWS = 48
# A weight this large (the tied LM head: 49152 x 576) costs ~30 ms to dequantize into a fresh ~113 MB
# tensor (mostly page faults), more than the kernel's extra passes up to ~200 rows: 7 against 43 ms at
# 17 rows, 24 against 54 at 64.
LARGE_WEIGHT = 1 << 24
QUANT_MAX_ROWS_LARGE = 192


def _kernel_takes(w: QuantizedWeight, rows: int) -> bool:
    from kernels.cpu import isa

    if rows <= (QUANT_MAX_ROWS_LARGE if w.shape[0] * w.shape[1] >= LARGE_WEIGHT else QUANT_MAX_ROWS):
        return True
    # int8 activations promise llama.cpp's arithmetic for every product, so the portable path keeps them too
    return isa.resolve(32) != "generic" or torch.ops.sllm_cpu.int8_activations()


def quantized_linear(x: torch.Tensor, w: QuantizedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W^T (+ bias) for a weight in GGUF blocks: the C++ kernel for float32 CPU activations (blocks
    dequantized in registers, or in cached tiles past 8 rows on the vector paths), else the weight
    dequantized for MKL's GEMM."""
    rows = x.reshape(-1, x.shape[-1])
    if x.dtype == torch.float32 and x.device.type == "cpu" and cpu_kernels_available():
        if _kernel_takes(w, rows.shape[0]):
            y = torch.ops.sllm_cpu.quantized_linear(rows, w.data, w.qtype, w.shape[0], w.shape[1], bias)
        else:
            y = F.linear(rows, torch.ops.sllm_cpu.dequantize(w.data, w.qtype, w.shape[1]), bias)
        return y.reshape(*x.shape[:-1], w.shape[0])
    return quantized_linear_ref(x, w, bias)


def stacked_linear(x: torch.Tensor, w: StackedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W^T (+ bias) for a stacked weight: each part's columns, side by side."""
    split = w.parts[0].shape[0]
    biases = (None, None) if bias is None else (bias[:split], bias[split:])
    return torch.cat([quantized_linear(x, p, b) for p, b in zip(w.parts, biases, strict=True)], dim=-1)


def quantized_embedding(ids: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    """Rows of a quantized table, dequantizing only the rows asked for."""
    rows = w.data.index_select(0, ids.reshape(-1))
    if rows.device.type == "cpu" and cpu_kernels_available():
        flat = torch.ops.sllm_cpu.dequantize(rows, w.qtype, w.shape[1])
    else:
        flat = decode_blocks(rows, w.qtype)
    return flat.reshape(*ids.shape, w.shape[1])


def quantize_q8_0(w: torch.Tensor) -> QuantizedWeight:
    """A float matrix [N, K] (K a multiple of 32) as weight-only int8 with one scale per 32 weights:
    GGUF's Q8_0 blocks, byte for byte as ggml (and the gguf package) writes them, so every Q8_0 kernel
    serves it. Each block: d = max|w| / 127 as fp16, then q = round(w / d) with ties away from zero."""
    n, k = w.shape
    if k % 32:
        raise ValueError(f"int8 (Q8_0) needs in_features a multiple of 32, got {k}")
    blocks = w.detach().to(torch.float32).reshape(n, k // 32, 32)
    d = blocks.abs().amax(dim=-1, keepdim=True) / 127
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    scaled = blocks * inv
    q = (torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)).to(torch.int8)
    scale = d.to(torch.float16).view(torch.uint8)  # little-endian fp16, as the file stores it
    data = torch.cat([scale, q.view(torch.uint8)], dim=-1).reshape(n, k // 32 * 34).contiguous()
    return QuantizedWeight(data, Q8_0, (n, k))


def serves_quantized(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `quantization="auto"` keeps a GGUF file's blocks: on the CPU, in float32, where a vector
    path of the C++ kernel runs (the portable one measured 0.4x of the float32 matmul it replaces)."""
    from kernels.cpu import isa

    return (device.type == "cpu" and dtype == torch.float32 and cpu_kernels_available()
            and isa.resolve(32) != "generic")
