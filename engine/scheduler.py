"""Decides, before every step, which sequences run and how many tokens each computes.

Continuous batching (the default) re-plans after every step: running sequences go first (a decode
token each, or the next chunk of a long prompt), then waiting sequences are admitted while the token
budget (`max_num_batched_tokens`), the sequence budget (`max_num_seqs`) and free KV blocks allow.
When blocks run out, the most recently admitted sequence is preempted by recompute: its blocks are
freed and it goes back to the front of the queue with everything it generated so far, to be
prefilled again later. `static` and `dynamic` exist to reproduce the static-batching comparison."""

import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last token, so its logits produce a new token."""
        return self.seq.num_computed_tokens + self.num_new_tokens >= len(self.seq)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.config = config
        self.bm = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _tokens_wanted(self, seq: Sequence) -> int:
        return seq.num_uncomputed_tokens + len(seq.spec_tokens)

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.spec_tokens = []
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        out.preempted.append(seq)
        self.num_preemptions += 1

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        queue = deque(self.running)
        self.running = []
        while queue:
            seq = queue.popleft()
            n = min(self._tokens_wanted(seq), budget)
            if n <= 0:
                self.running.append(seq)
                continue
            while not self.bm.can_append(seq, n):
                if queue:
                    self._preempt(queue.pop(), out)
                else:
                    self._preempt(seq, out)
                    seq = None
                    break
            if seq is None:
                break
            if n < self._tokens_wanted(seq):
                seq.spec_tokens = seq.spec_tokens[: max(0, n - seq.num_uncomputed_tokens)]
            self.bm.append_slots(seq, n)
            out.scheduled.append(ScheduledSeq(seq, n))
            self.running.append(seq)
            budget -= n
        return budget

    def _admission_open(self) -> bool:
        cfg = self.config
        if cfg.scheduling == "static":
            return not self.running
        if cfg.scheduling == "dynamic":
            if self.running or not self.waiting:
                return False
            waited_ms = (time.monotonic() - self.waiting[0].arrival_time) * 1000
            return len(self.waiting) >= cfg.max_num_seqs or waited_ms >= cfg.batch_wait_ms
        if self.running and cfg.waiting_served_ratio > 0:
            head = self.waiting[0]
            if len(self.waiting) < cfg.waiting_served_ratio * len(self.running):
                head.waiting_steps += 1
                return head.waiting_steps > cfg.max_waiting_steps
        return True

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        cfg = self.config
        num_seqs = len(self.running)
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            width = 1 + seq.pending_forks  # an n > 1 request will fork into n running sequences
            if num_seqs + width > cfg.max_num_seqs and num_seqs > 0:
                break
            cached = self.bm.cached_prefix_tokens(seq)
            n = len(seq) - cached
            if n > budget:
                if not cfg.enable_chunked_prefill and out.scheduled:
                    break
                n = budget
            if not self.bm.can_admit(seq, n):
                break
            self.waiting.popleft()
            self.bm.admit(seq)
            n = min(n, len(seq) - seq.num_computed_tokens)
            self.bm.append_slots(seq, n)
            seq.status = SequenceStatus.RUNNING
            out.scheduled.append(ScheduledSeq(seq, n))
            self.running.append(seq)
            num_seqs += width
            budget -= n

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted and self.waiting and self._admission_open():
            self._admit_waiting(out, budget)
        out.blocks_to_copy = self.bm.take_pending_copies()
        return out

    def finish(self, seq: Sequence) -> None:
        """Removes a finished or aborted sequence and returns its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free(seq)
        seq.status = SequenceStatus.FINISHED
