"""Embedding requests: prefill-only sequences whose final hidden states are pooled into one vector.

An embedding request is a `Sequence` with `pooling` set (a `PoolingState`). It is scheduled like any
prompt (chunked, batched beside generation, preempted by recompute) but samples nothing: each step hands
it the rows of the model's final (normed) hidden states that it computed (`pool_rows`), and once its last
prompt token is computed the engine finishes it there, its KV blocks freed, and answers a
`PoolingOutput`. Pooling as sentence-transformers names it: `mean` over every token, `last` (the last
token's state, what decoder embedding models such as Qwen3-Embedding use), or `cls` (the first token's).
Mean and cls need every row computed, so such a sequence takes nothing from the prefix cache.

A decoder reranker (Qwen3-Reranker) answers through the same path: `classify_token_ids` takes the last
token's logits at those ids (its "no" and "yes"), softmaxed, instead of its hidden state."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from engine.outputs import RequestMetrics

PoolingType = Literal["mean", "last", "cls"]
POOLING_TYPES: tuple[str, ...] = ("mean", "last", "cls")


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


@dataclass
class PoolingState:
    """One embedding sequence's running pool; restarted whenever its prompt is computed from the start
    again (after a preemption)."""

    params: PoolingParams
    total: torch.Tensor | None = None  # mean: the sum of the rows so far; last, cls: the row kept
    rows: int = 0

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
            self.total, self.rows = None, 0
        rows = hidden.float()
        kind = self.params.pooling
        if kind == "mean":
            part = rows.sum(0)
            self.total = part if self.total is None else self.total + part
            self.rows += rows.shape[0]
        elif kind == "cls" and start == 0:
            self.total = rows[0].clone()
        elif kind == "last" and start + rows.shape[0] == length:
            self.total = rows[-1].clone()

    def result(self) -> torch.Tensor:
        assert self.total is not None, "pooled before the prompt was computed"
        if self.params.classify_token_ids is not None:
            return torch.softmax(self.total, dim=0)
        v = self.total / self.rows if self.params.pooling == "mean" else self.total
        if self.params.dimensions is not None:
            v = v[: self.params.dimensions]
        if self.params.normalize:
            v = torch.nn.functional.normalize(v, dim=0)
        return v.cpu()


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
