"""Attention over one packed training sequence that computes only what its mask lets through.

A packed sequence (:class:`~.train.Encoded`) is a shared prompt prefix, then one segment per question,
each seeing the prefix and itself. As a dense masked attention over the whole sequence, about three
quarters of the score matrix is masked out and still computed (SDPA's CPU kernel does not skip masked
blocks): on a 2-core CPU that was a third of a training step. Here the prefix attends causally to itself,
and the segments, gathered into a batch of their own, attend to the prefix's keys and causally to their
own: the same outputs, for the work the mask keeps.

It plugs into transformers as an attention implementation (:data:`NAME`); the layout travels as the
``packed_layout`` keyword that the model passes down to every attention call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

NAME = "sllm_packed"


@dataclass(frozen=True)
class PackedLayout:
    """Where the segments of one packed sequence lie: the prefix is ``[0, prefix)``, then the segments
    back to back. ``gather`` (segments, longest) indexes each segment's positions, padded with its last
    one; ``valid`` marks the real ones; ``keys`` (segments, 1, longest, prefix + longest) is what a
    segment's query may see."""

    prefix: int
    gather: torch.Tensor
    valid: torch.Tensor
    keys: torch.Tensor

    @classmethod
    def of(cls, segments: torch.Tensor) -> PackedLayout:
        """From one row of segment ids (0: the shared prefix; k: the k-th question; no padding)."""
        seg = segments.tolist()
        prefix = seg.index(1) if 1 in seg else len(seg)
        if any(s != 0 for s in seg[:prefix]) or seg[prefix:] != sorted(seg[prefix:]) or min(seg) < 0:
            raise ValueError("a packed layout needs the prefix first, then the segments in order, unpadded")
        bounds: list[tuple[int, int]] = []
        for i in range(prefix, len(seg)):
            if i == prefix or seg[i] != seg[i - 1]:
                bounds.append((i, i + 1))
            else:
                bounds[-1] = (bounds[-1][0], i + 1)
        longest = max((end - start for start, end in bounds), default=0)
        steps = torch.arange(longest)
        starts = torch.tensor([start for start, _ in bounds])
        lengths = torch.tensor([end - start for start, end in bounds])
        valid = steps[None, :] < lengths[:, None]
        gather = starts[:, None] + torch.minimum(steps[None, :], lengths[:, None] - 1)
        own = torch.ones(longest, longest, dtype=torch.bool).tril()[None] & valid[:, None, :]
        # A padded query row still sees its segment's first key, so no softmax row is empty.
        own = own | torch.eye(longest, dtype=torch.bool)[None]
        keys = torch.cat([torch.ones(len(bounds), longest, prefix, dtype=torch.bool), own], dim=2)[:, None]
        return cls(prefix, gather, valid, keys)

    def to(self, device) -> PackedLayout:
        return PackedLayout(self.prefix, self.gather.to(device), self.valid.to(device), self.keys.to(device))


def packed_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, packed_layout=None,
                     **kwargs):
    """transformers' attention signature: ``query`` (1, heads, T, dim), ``key``/``value`` (1, kv heads, T,
    dim); returns (1, T, heads, dim) and no weights."""
    lay: PackedLayout | None = packed_layout
    if lay is None or query.shape[0] != 1:
        raise ValueError(f"the {NAME} attention needs one packed sequence and its packed_layout")
    gqa = query.shape[1] != key.shape[1]
    p = lay.prefix
    head = F.scaled_dot_product_attention(query[:, :, :p], key[:, :, :p], value[:, :, :p], is_causal=True,
                                          scale=scaling, enable_gqa=gqa)
    n, longest = lay.gather.shape
    if n == 0:
        return head.transpose(1, 2).contiguous(), None

    def segments_of(x):  # (1, h, T, d) -> (n, h, longest, d)
        return x[0][:, lay.gather.reshape(-1)].reshape(x.shape[1], n, longest, -1).transpose(0, 1)

    def with_prefix(x):  # each segment's keys: the prefix's, then its own
        return torch.cat([x[:, :, :p].expand(n, -1, -1, -1), segments_of(x)], dim=2)

    out = F.scaled_dot_product_attention(segments_of(query), with_prefix(key), with_prefix(value),
                                         attn_mask=lay.keys, scale=scaling, enable_gqa=gqa)
    # Row-major (segment, step) order of the valid entries is the order of positions prefix..T-1.
    tail = out.transpose(0, 1).reshape(out.shape[1], n * longest, -1)[:, lay.valid.reshape(-1)]
    return torch.cat([head[0], tail], dim=1)[None].transpose(1, 2).contiguous(), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, packed_attention)
