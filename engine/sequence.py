"""One generated sequence: its tokens, how many of them are in the KV cache, and its block table."""

import enum
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


_ids = itertools.count()


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    index: int = 0  # which of the request's n samples this is
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # of those, prompt tokens found in the prefix cache
    block_table: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    arrival_time: float = 0.0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    # Forking for n > 1 waits until the prompt is computed, so the prompt's blocks are allocated once.
    pending_forks: int = 0
    waiting_steps: int = 0
    # Speculative decoding: draft tokens proposed for verification in the next step.
    spec_tokens: list[int] = field(default_factory=list)
    num_hashed_blocks: int = 0  # full blocks already registered in the prefix cache
    prompt_hashes: list[int] | None = None  # chain hashes of the prompt's full blocks (BlockManager.prompt_hashes)
    long_rope: bool = False  # its cache is computed with LongRoPE's long factors (Scheduler._set_long_rope)
    matcher: Any = None  # xgrammar GrammarMatcher when the request is constrained
    # Scheduling order (engine/scheduler.py): lower priority runs first; at equal priority, fairness
    # keys (API keys) take turns. Aging counts the seconds spent waiting, across preemptions.
    priority: int = 0
    fairness_key: Hashable | None = None
    queued_at: float = 0.0  # the scheduler's clock when the request was queued: what aging counts from
    effective_priority: int = 0  # while it runs: as of the current step (Scheduler.schedule)
    admitted_order: int = 0
    lora_int_id: int = 0  # the LoRA adapter (engine/lora.py) this sequence runs with; 0: none
    pooling: Any = None  # an embedding request (engine/pooling.py's PoolingState): prefill only, samples nothing

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def num_blocks_needed(self, block_size: int, num_tokens: int | None = None) -> int:
        n = len(self.token_ids) if num_tokens is None else num_tokens
        return (n + block_size - 1) // block_size
