"""GGUF's quantized block formats the kernels serve, and their reference decoding in torch.

Each type packs `weights` consecutive weights of a row into `bytes` bytes: the legacy types (Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0) one fp16 scale (and minimum) per 32 weights, the K-quants (Q4_K, Q5_K, Q6_K)
a 256-weight super-block holding an fp16 scale and 8 or 16 small integer sub-scales. The decoding
follows ggml's `dequantize_row_*` operation for operation (float32, no fused multiply-add), so it equals
the `gguf` package's `gguf.quants.dequantize` bit for bit."""

from __future__ import annotations

import torch

# GGML type ids (gguf.GGMLQuantizationType), and (weights, bytes) per block.
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 2, 3, 6, 7, 8
Q4_K, Q5_K, Q6_K = 12, 13, 14
BLOCK = {
    Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34),
    Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
}
# Byte offsets of the fp16 fields (scale, minimum) in each type's block; the other bytes are integers.
HALF_FIELDS = {Q4_0: (0,), Q4_1: (0, 2), Q5_0: (0,), Q5_1: (0, 2), Q8_0: (0,), Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,)}
NAMES = {Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0",
         Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K"}


def decode_blocks(data: torch.Tensor, qtype: int) -> torch.Tensor:
    """uint8 bytes holding whole blocks of `qtype` -> float32 [blocks, weights per block]."""
    per, size = BLOCK[qtype]
    blocks = data.reshape(-1, size)
    if qtype in (Q4_K, Q5_K):
        return _decode_q4_k_q5_k(blocks, qtype)
    if qtype == Q6_K:
        return _decode_q6_k(blocks)
    d = _half(blocks[:, :2])  # [B, 1]
    if qtype == Q8_0:
        return d * blocks[:, 2:].contiguous().view(torch.int8).float()
    with_min = qtype in (Q4_1, Q5_1)
    start = (4 if with_min else 2) + (4 if qtype in (Q5_0, Q5_1) else 0)
    q = _nibbles(blocks[:, start:])  # a block's 16 bytes: weights 0-15 low nibbles, 16-31 high ones
    if qtype in (Q5_0, Q5_1):
        q = q | (_bits(blocks[:, start - 4:start]) << 4)  # bit j of the little-endian uint32 qh: weight j
    if with_min:
        return d * q.float() + _half(blocks[:, 2:4])
    return d * (q.to(torch.int16) - (8 if qtype == Q4_0 else 16)).float()


def _decode_q4_k_q5_k(blocks: torch.Tensor, qtype: int) -> torch.Tensor:
    # d, dmin, 12 bytes of eight 6-bit (scale, min) pairs, [Q5_K: 32 bytes of high bits], 128 bytes of
    # nibbles: sub-block j (32 weights) reads bytes 32 * (j // 2) onwards, low nibbles for even j.
    d, dmin = _half(blocks[:, 0:2]), _half(blocks[:, 2:4])
    sc, mn = _scale_min_k4(blocks[:, 4:16])
    qs = blocks[:, -128:].reshape(-1, 4, 1, 32)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=2).reshape(-1, 8, 32)
    if qtype == Q5_K:  # sub-block j's fifth bits: bit j of each of the 32 qh bytes
        qh = blocks[:, 16:48].reshape(-1, 1, 32)
        q = q | (((qh >> torch.arange(8, dtype=torch.uint8).view(1, 8, 1)) & 1) << 4)
    scale = (d * sc.float()).unsqueeze(-1)
    minimum = (dmin * mn.float()).unsqueeze(-1)
    return (scale * q.float() - minimum).reshape(-1, 256)


def _scale_min_k4(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K's eight 6-bit scales and minimums packed in 12 bytes (ggml's get_scale_min_k4):
    bytes 0-3 scales 0-3 (+ top bits of scales 4-7), bytes 4-7 minimums 0-3 (+ top bits of minimums
    4-7), bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and minimums 4-7 (high nibble)."""
    s = scales.reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc, mn


def _decode_q6_k(blocks: torch.Tensor) -> torch.Tensor:
    # 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8 scales (one per 16 weights), d.
    # Each half (128 weights) reads 64 ql bytes and 32 qh bytes: its group g of 32 weights takes ql byte
    # 32 * (g % 2) + l (low nibble for g < 2) and bits 2g, 2g+1 of qh byte l.
    ql = blocks[:, :128].reshape(-1, 2, 1, 64)
    ql = torch.cat([ql & 0x0F, ql >> 4], dim=2).reshape(-1, 2, 4, 32)
    qh = blocks[:, 128:192].reshape(-1, 2, 1, 32)
    qh = (qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(1, 1, 4, 1)) & 3
    q = ((ql | (qh << 4)).to(torch.int16) - 32).float().reshape(-1, 16, 16)
    scale = _half(blocks[:, 208:210]) * blocks[:, 192:208].contiguous().view(torch.int8).float()
    return (scale.unsqueeze(-1) * q).reshape(-1, 256)


def _half(two_bytes: torch.Tensor) -> torch.Tensor:
    """Little-endian fp16 values (2 bytes each) as float32, one column per value."""
    return two_bytes.contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    return torch.cat([qs & 0x0F, qs >> 4], dim=1)


def _bits(qh: torch.Tensor) -> torch.Tensor:
    """The 32 bits of 4 bytes, least significant first: [B, 4] -> [B, 32] of 0/1."""
    return ((qh.unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1).reshape(qh.shape[0], 32)
