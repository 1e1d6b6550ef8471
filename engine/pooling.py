"""Embedding requests: prefill-only sequences whose final hidden states are pooled into one vector.

An embedding request is a `Sequence` with `pooling` set (a `PoolingState`). It is scheduled like any
prompt (chunked, batched beside generation, preempted by recompute) but samples nothing: each step hands
it the rows of the model's final (normed) hidden states that it computed (`pool_rows`), and once its last
prompt token is computed the engine finishes it there, its KV blocks freed, and answers a
`PoolingOutput`. Pooling as sentence-transformers' Pooling module computes it (its `1_Pooling/config.json`
modes): `mean` over every token, `last` (its `lasttoken`: the last token's state, what decoder embedding
models such as Qwen3-Embedding use), `cls` (the first token's), `max` (each dimension's largest value),
`weightedmean` (token i weighted i + 1, so later tokens count more: SGPT's pooling for decoders) and
`mean_sqrt_len` (its `mean_sqrt_len_tokens`: the sum divided by the square root of the length). Every mode
but `last` needs every row computed, so such a sequence takes nothing from the prefix cache.
`pool_padded` computes the same modes over a padded batch (engine/encoder_engine.py).

A decoder reranker (Qwen3-Reranker) answers through the same path: `classify_token_ids` takes the last
token's logits at those ids (its "no" and "yes"), softmaxed, instead of its hidden state."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch

from engine.outputs import RequestMetrics

PoolingType = Literal["mean", "last", "cls", "max", "weightedmean", "mean_sqrt_len"]
POOLING_TYPES: tuple[str, ...] = get_args(PoolingType)


@dataclass(frozen=True)
class PoolingParams:
    pooling: PoolingType = "mean"
    normalize: bool = True  # L2-normalised, as OpenAI's embeddings are
    dimensions: int | None = None  # keep the first `dimensions` values (Matryoshka models), then normalise
    # A reranker's answer: the last token's logits at these ids, softmaxed (Qwen3-Reranker: no, yes).
    classify_token_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        assert self.pooling in POOLING_TYPES, self.pooling
        assert self.dimensions is None or self.dimensions >= 1
        assert self.classify_token_ids is None or (self.pooling == "last" and not self.normalize), self


def finish_vector(v: torch.Tensor, params: PoolingParams) -> torch.Tensor:
    """A pooled vector as the request asked: its first `dimensions` values, then L2-normalised."""
    if params.dimensions is not None:
        v = v[: params.dimensions]
    if params.normalize:
        v = torch.nn.functional.normalize(v, dim=0)
    return v


@dataclass
class PoolingState:
    """One embedding sequence's running pool; restarted whenever its prompt is computed from the start
    again (after a preemption)."""

    params: PoolingParams
    total: torch.Tensor | None = None  # the sums: the rows' (weighted) sum; max: the running max; last, cls: the row
    rows: int = 0
    weight: float = 0.0  # weightedmean: the sum of the weights so far

    @property
    def needs_every_row(self) -> bool:
        """Whether rows served from the prefix cache (never computed) would be missing from the pool."""
        return self.params.pooling != "last"

    def take(self, hidden: torch.Tensor, start: int, length: int,
             logits: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        """`hidden`: the rows of positions `start..start + len(hidden)` of a prompt of `length` tokens;
        `logits`: the model's head, for `classify_token_ids`."""
        ids = self.params.classify_token_ids
        if ids is not None:
            if start + hidden.shape[0] == length:
                assert logits is not None, "a reranker request needs the model's head"
                self.total = logits(hidden[-1:])[0, list(ids)].float().cpu()
            return
        if start == 0:
            self.total, self.rows, self.weight = None, 0, 0.0
        rows = hidden.float()
        kind = self.params.pooling
        if kind in ("mean", "mean_sqrt_len", "weightedmean"):
            if kind == "weightedmean":  # position i (0-based, in the whole prompt) weighs i + 1
                w = torch.arange(start + 1, start + rows.shape[0] + 1, dtype=rows.dtype, device=rows.device)
                part = (rows * w[:, None]).sum(0)
                self.weight += float(w.sum())
            else:
                part = rows.sum(0)
            self.total = part if self.total is None else self.total + part
            self.rows += rows.shape[0]
        elif kind == "max":
            part = rows.max(0).values
            self.total = part if self.total is None else torch.maximum(self.total, part)
        elif kind == "cls" and start == 0:
            self.total = rows[0].clone()
        elif kind == "last" and start + rows.shape[0] == length:
            self.total = rows[-1].clone()

    def result(self) -> torch.Tensor:
        assert self.total is not None, "pooled before the prompt was computed"
        if self.params.classify_token_ids is not None:
            return torch.softmax(self.total, dim=0)
        kind = self.params.pooling
        v = self.total
        if kind == "mean":
            v = v / self.rows
        elif kind == "mean_sqrt_len":
            v = v / self.rows ** 0.5
        elif kind == "weightedmean":
            v = v / self.weight
        return finish_vector(v, self.params).cpu()


def pool_padded(states: torch.Tensor, mask: torch.Tensor, kind: PoolingType) -> torch.Tensor:
    """`[B, H]` vectors of a right-padded batch (`states` `[B, T, H]`, `mask` `[B, T]` 1 on real tokens):
    the same modes as PoolingState, as sentence-transformers' Pooling computes them on such a batch."""
    m = mask.unsqueeze(-1).to(states.dtype)
    lengths = mask.sum(1)
    if kind == "cls":
        return states[:, 0]
    if kind == "last":
        return states[torch.arange(states.shape[0]), lengths - 1]
    if kind == "max":
        return states.masked_fill(m == 0, float("-inf")).max(1).values
    if kind == "weightedmean":
        m = m * torch.arange(1, states.shape[1] + 1, dtype=states.dtype)[None, :, None]
    total, count = (states * m).sum(1), m.sum(1).clamp(min=1e-9)
    return total / (count.sqrt() if kind == "mean_sqrt_len" else count)


@dataclass
class PoolingOutput:
    """An embedding request's answer (finished in the step that computed its last prompt token)."""

    request_id: str
    prompt_token_ids: list[int]
    embedding: torch.Tensor  # float32 [hidden] or [dimensions]
    metrics: RequestMetrics
    finished: bool = True
    outputs: list = field(default_factory=list)  # no samples: read as a RequestOutput by generic code

    @property
    def num_output_tokens(self) -> int:
        return 0


def pool_rows(scheduled, hidden: torch.Tensor, logits: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
    """Hands each embedding sequence of a step its rows of `hidden` (the step's final hidden states, one
    row per scheduled token in schedule order). Called before the step's results are applied, so each
    sequence's `num_computed_tokens` is still where its rows start. `logits`: the model's head."""
    offset = 0
    for item in scheduled:
        n = item.num_new_tokens
        seq = item.seq
        if seq.pooling is not None:
            seq.pooling.take(hidden[offset : offset + n], seq.num_computed_tokens, len(seq), logits)
        offset += n


def pooled_sequences(scheduled) -> list:
    """The embedding sequences of a step whose whole prompt is now computed (after update_from_output)."""
    return [item.seq for item in scheduled
            if item.seq.pooling is not None and not item.seq.is_finished and item.seq.num_uncomputed_tokens == 0]
