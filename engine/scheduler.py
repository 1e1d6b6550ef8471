"""Decides, before every step, which sequences run and how many tokens each computes.

Continuous batching (the default) re-plans after every step: running sequences go first (a decode
token each, or the next chunk of a long prompt), then waiting sequences are admitted while the token
budget (`max_num_batched_tokens`), the sequence budget (`max_num_seqs`) and free KV blocks allow.
`static` and `dynamic` exist to reproduce the static-batching comparison.

Priority, as vLLM's `priority` argument: lower values run first. Waiting sequences are admitted in
order of effective priority, then, at equal priority, by fairness key (an API key) taking turns:
the key admitted least recently goes first, then arrival order within a key. Running sequences get
the token budget in priority order too, so a high-priority prompt's prefill chunks come before a
low-priority one's. Aging keeps that from starving anyone: a sequence's effective priority improves
by 1 for every `priority_aging_s` seconds since it was first queued, waiting or running (running
sequences' values are brought up to date at the start of every step), and is what preemption
compares. Aging while running is what keeps equal priorities in arrival order: a request that came
later has aged less than one that came with it and got in first, so it never outranks it. Frozen at
admission instead, every request still waiting after `priority_aging_s` would outrank the running
ones that came with it, preempt them, and be preempted in turn (a batch of 600 made 2,278 preemptions
and finished nothing in its first 25 steps).

Preemption is by recompute: the victim's blocks are freed and it waits again with everything it
generated so far, to be prefilled again later. The victim is always the running sequence of lowest
effective priority, most recently admitted among equals. Two things preempt:
- a running sequence that needs a KV block and finds none (the victim may be itself, when nothing
  worse is running); then nothing new is admitted in that step;
- a waiting sequence whose effective priority is strictly better than a running one's, when it lacks
  a batch slot or blocks for its first chunk. Those preemptions are planned at the start of
  `schedule()`, before any running sequence is given slots, so a step never schedules a sequence it
  then preempts; the tokens the newcomer will take are kept from worse-priority running sequences.
A step that prefills a prompt admits no worse-priority newcomer beside it: their prefill would only
lengthen the step that brings the better request its first token.

Requests that arrive together with one long common prefix (one system prompt or schema, one n8n
workflow's calls) would each compute that prefix in the same step, none of it cached yet. So a waiting
prompt whose next uncached blocks (at least SHARED_PREFILL_BLOCKS of them) are blocks another prompt is
prefilling waits for that prefill instead (SGLang's in-batch prefix caching): a step or two later they
are cached, it computes only its own rest, and every such sequence's table starts with the same
physical blocks, which decode attention then reads once for all of them (kernels/cpu's shared-prefix
tasks)."""

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.outputs import EngineStats
from engine.recurrent_state import RecurrentStates
from engine.sequence import Sequence, SequenceStatus

# Fairness keys remembered beyond those of live sequences before the oldest are forgotten.
MAX_REMEMBERED_KEYS = 1024
# A waiting prompt sharing at least this many uncached blocks with one being prefilled waits for it.
SHARED_PREFILL_BLOCKS = 4


@dataclass
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last token, so its logits produce a new token (an
        embedding request's never do: engine/pooling.py)."""
        return self.seq.num_computed_tokens + self.num_new_tokens >= len(self.seq) and self.seq.pooling is None


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


@dataclass
class SampledSeq:
    """A sequence's new tokens from one step (engine/step_sampler.py), before the output processor
    appends them (up to a stop) and the scheduler applies the step (update_from_output)."""

    seq: Sequence
    tokens: list[int]
    logprobs: list[Any]  # TokenLogprobs or None, one per token
    num_drafts: int | None = None  # speculative drafts verified this step; None: none
    accepted_drafts: int = 0  # of those, kept: set once the tokens are appended
    forked_from: Sequence | None = None  # an n > 1 sample created this step, sharing its parent's blocks


@dataclass
class _Plan:
    """Waiting sequences that will be admitted this step, and the tokens each was promised."""

    seqs: list[Sequence] = field(default_factory=list)
    reserved: list[tuple[int, int]] = field(default_factory=list)  # (effective priority, tokens)

    def reserve_for(self, priority: int) -> int:
        """Tokens a running sequence of this priority must leave for better-priority newcomers."""
        return sum(n for p, n in self.reserved if p < priority)


def _width(seq: Sequence) -> int:
    return 1 + seq.pending_forks  # an n > 1 request will fork into n running sequences


def _running_order(seq: Sequence) -> tuple[int, int]:
    return seq.effective_priority, seq.admitted_order


class Scheduler:
    def __init__(self, config: EngineConfig, num_blocks: int, clock: Callable[[], float] = time.monotonic):
        self.config = config
        # The scheduler alone allocates and frees KV blocks (as in vLLM and nano-vllm).
        self.bm = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.clock = clock
        self.waiting: list[Sequence] = []  # in no particular order: _next_waiting picks
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.preemptions_by_priority: dict[int, int] = {}  # keyed by the victim's own priority
        self._admissions = 0
        self._key_admitted: dict[Hashable | None, int] = {}  # fairness key -> its last admission
        # LongRoPE's original context (the model's long_rope_from): a sequence longer than it is computed
        # with the long factors, all its tokens, as HF computes it.
        self.long_rope_from: int | None = None
        # Hybrid models' recurrent states (engine/recurrent_state.py): freed and forked with the blocks.
        self.recurrent: RecurrentStates | None = None

    @property
    def block_manager(self) -> BlockManager:
        return self.bm

    def add(self, seq: Sequence) -> None:
        seq.queued_at = self.clock()
        self._set_long_rope(seq)
        self.waiting.append(seq)

    def _set_long_rope(self, seq: Sequence) -> None:
        """Called whenever a sequence's cache is to be computed from its first token."""
        seq.long_rope = self.long_rope_from is not None and len(seq) > self.long_rope_from
        seq.prompt_hashes = None  # their chain starts from long_rope

    def _recompute_outgrown(self) -> None:
        """HF's Phi-3 drops a sequence's cache and computes it again with LongRoPE's long factors when the
        sequence outgrows the original context; so do we, once per sequence: it waits for a prefill again."""
        if self.long_rope_from is None:
            return
        for seq in [s for s in self.running if not s.long_rope and len(s) > self.long_rope_from]:
            self.running.remove(seq)
            self._free(seq)
            seq.num_computed_tokens = 0
            seq.spec_tokens = []
            seq.status = SequenceStatus.WAITING
            self._set_long_rope(seq)
            self.waiting.append(seq)

    def _free(self, seq: Sequence) -> None:
        """Its KV blocks, and its recurrent state where the model keeps one."""
        self.bm.free(seq)
        if self.recurrent is not None:
            self.recurrent.free(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def effective_priority(self, seq: Sequence, now: float) -> int:
        aging = self.config.priority_aging_s
        if aging <= 0:
            return seq.priority
        return seq.priority - int((now - seq.queued_at) // aging)

    def _next_waiting(self, now: float, admitted: dict, skip: set[int] | None = None) -> Sequence | None:
        """The waiting sequence to admit next: best effective priority, then the fairness key admitted
        least recently (never: first), then arrival."""
        best, best_key = None, None
        for seq in self.waiting:
            if skip and seq.seq_id in skip:
                continue
            key = (self.effective_priority(seq, now), admitted.get(seq.fairness_key, -1), seq.arrival_time,
                   seq.seq_id)
            if best_key is None or key < best_key:
                best, best_key = seq, key
        return best

    def _tokens_wanted(self, seq: Sequence) -> int:
        return seq.num_uncomputed_tokens + len(seq.spec_tokens)

    def _preempt(self, seq: Sequence, out: SchedulerOutput, now: float) -> None:
        self._free(seq)
        seq.num_computed_tokens = 0
        seq.spec_tokens = []
        seq.status = SequenceStatus.WAITING
        self._set_long_rope(seq)
        self.waiting.append(seq)
        out.preempted.append(seq)
        self.num_preemptions += 1
        self.preemptions_by_priority[seq.priority] = self.preemptions_by_priority.get(seq.priority, 0) + 1

    def _mark_admitted(self, seq: Sequence, now: float) -> None:
        seq.effective_priority = self.effective_priority(seq, now)
        seq.admitted_order = self._admissions
        self._key_admitted[seq.fairness_key] = self._admissions
        self._admissions += 1
        seq.status = SequenceStatus.RUNNING
        if len(self._key_admitted) > MAX_REMEMBERED_KEYS:
            live = {s.fairness_key for s in self.waiting} | {s.fairness_key for s in self.running}
            for key, _ in sorted(self._key_admitted.items(), key=lambda kv: kv[1]):
                if len(self._key_admitted) <= MAX_REMEMBERED_KEYS // 2:
                    break
                if key not in live:
                    del self._key_admitted[key]

    # -- planning for better-priority newcomers ---------------------------------------------------------
    def _blocks_for_step(self, running: list[Sequence], plan: _Plan, extra: tuple[int, int] | None) -> int:
        """New blocks the running sequences (best first) take this step, given the tokens promised to
        newcomers: what _schedule_running will hand out, computed without handing it out."""
        reserved = plan.reserved + ([extra] if extra else [])
        budget = self.config.max_num_batched_tokens
        blocks = 0
        for seq in running:
            promised = sum(t for p, t in reserved if p < seq.effective_priority)
            n = min(self._tokens_wanted(seq), budget - promised)
            if n > 0:
                blocks += self.bm.blocks_needed(seq, n)
                budget -= n
        return blocks

    def _make_room(self, out: SchedulerOutput, now: float, head: Sequence | None) -> _Plan:
        """Admission plan for waiting sequences strictly better than some running one: each gets a
        slot, blocks for its first chunk and the tokens for it, preempting worse running sequences
        (worst first) where it must. Stops at the first that cannot be placed, as admission does."""
        plan = _Plan()
        if self.config.scheduling != "continuous" or not self.waiting or not self.running:
            return plan
        cfg = self.config
        running = sorted(self.running, key=_running_order)
        seats = sum(_width(s) for s in running)
        admitted = dict(self._key_admitted)
        tick = self._admissions
        taken: set[int] = set()
        promised_blocks = 0
        while True:
            cand = head if not taken else self._next_waiting(now, admitted, taken)
            if cand is None or not running:
                return plan
            prio = self.effective_priority(cand, now)
            if prio >= running[-1].effective_priority or any(p < prio for p, _ in plan.reserved):
                return plan  # nothing worse to preempt; or a better newcomer's prefill has this step
            while True:
                better = [s for s in running if s.effective_priority <= prio]
                if any(s.num_computed_tokens < s.num_prompt_tokens for s in better):
                    return plan  # a better prompt is being prefilled: no newcomer beside it (see below)
                left = cfg.max_num_batched_tokens - sum(t for _, t in plan.reserved)
                left -= sum(min(self._tokens_wanted(s), cfg.max_num_batched_tokens) for s in better)
                if left <= 0:
                    return plan  # better work fills this step; it is admitted in a later one
                n = min(len(cand) - self.bm.cached_prefix_tokens(cand), left)
                need = (promised_blocks + self.bm.blocks_to_admit(cand, n)
                        + self._blocks_for_step(running, plan, (prio, n)))
                if seats + _width(cand) <= cfg.max_num_seqs and need <= self.bm.num_free_blocks:
                    break
                if not running or running[-1].effective_priority <= prio:
                    return plan  # only equal or better work is left running: it waits its turn
                victim = running.pop()
                self.running.remove(victim)
                self._preempt(victim, out, now)
                seats -= _width(victim)
            promised_blocks += self.bm.blocks_to_admit(cand, n)
            plan.seqs.append(cand)
            plan.reserved.append((prio, n))
            seats += _width(cand)
            taken.add(cand.seq_id)
            admitted[cand.fairness_key] = tick
            tick += 1

    # -- the step -------------------------------------------------------------------------------------
    def _schedule_running(self, out: SchedulerOutput, budget: int, plan: _Plan, now: float) -> int:
        queue = deque(sorted(self.running, key=_running_order))  # best first: the tail is preempted first
        self.running = []
        while queue:
            seq = queue.popleft()
            n = min(self._tokens_wanted(seq), budget - plan.reserve_for(seq.effective_priority))
            if n <= 0:
                self.running.append(seq)
                continue
            while not self.bm.can_append(seq, n):
                if queue:
                    self._preempt(queue.pop(), out, now)
                else:
                    self._preempt(seq, out, now)
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

    def _admission_open(self, head: Sequence, now: float) -> bool:
        cfg = self.config
        if cfg.scheduling == "static":
            return not self.running
        if cfg.scheduling == "dynamic":
            if self.running:
                return False
            waited_ms = (now - min(s.arrival_time for s in self.waiting)) * 1000
            return len(self.waiting) >= cfg.max_num_seqs or waited_ms >= cfg.batch_wait_ms
        if self.running and cfg.waiting_served_ratio > 0:
            if len(self.waiting) < cfg.waiting_served_ratio * len(self.running):
                head.waiting_steps += 1
                return head.waiting_steps > cfg.max_waiting_steps
        return True

    def _admit_waiting(self, out: SchedulerOutput, budget: int, plan: _Plan, now: float,
                       first: Sequence | None) -> None:
        cfg = self.config
        num_seqs = sum(_width(s) for s in self.running)
        planned = {s.seq_id: n for s, (_, n) in zip(plan.seqs, plan.reserved, strict=True)}
        # Prompts being prefilled this step, by priority (continuous batching only: static and dynamic
        # batching start their batch whole).
        prefills = [s.seq.effective_priority for s in out.scheduled
                    if s.seq.num_computed_tokens < s.seq.num_prompt_tokens and cfg.scheduling == "continuous"]
        # Prompt blocks being computed by prompts in prefill (continuous batching: the others start whole).
        in_flight = {h for s in self.running if s.num_computed_tokens < s.num_prompt_tokens
                     for h in self.bm.prompt_hashes(s)} if cfg.scheduling == "continuous" else None
        deferred: set[int] = set()
        while self.waiting and budget > 0:
            seq = first or self._next_waiting(now, self._key_admitted, deferred)
            first = None
            if seq is None:
                break
            if in_flight and seq.seq_id not in planned and self._waits_for_a_prefill(seq, in_flight):
                deferred.add(seq.seq_id)
                if len(deferred) >= cfg.max_num_seqs:
                    break  # each pick scans the queue: a burst of thousands waits without a scan apiece
                continue
            width = _width(seq)
            if num_seqs + width > cfg.max_num_seqs and num_seqs > 0:
                break
            if prefills and self.effective_priority(seq, now) > min(prefills):
                break  # a better prompt is being prefilled: a worse one would only lengthen its step
            cached = self.bm.cached_prefix_tokens(seq)
            n = len(seq) - cached
            if n > budget:
                if not cfg.enable_chunked_prefill and out.scheduled:
                    break
                n = budget
            if seq.seq_id in planned and cfg.enable_chunked_prefill:
                n = min(n, planned[seq.seq_id])  # what was planned, so the next planned one gets its share
            if not self.bm.can_admit(seq, n) and seq.seq_id in planned and cfg.enable_chunked_prefill:
                # Room was made for it: start with the chunk that fits (cached ends on a block boundary).
                n = min(n, (self.bm.num_free_blocks - self.bm.blocks_to_admit(seq, 0)) * self.bm.block_size)
            if n <= 0 or not self.bm.can_admit(seq, n):
                break
            self.waiting.remove(seq)
            self.bm.admit(seq)
            n = min(n, len(seq) - seq.num_computed_tokens)
            self.bm.append_slots(seq, n)
            self._mark_admitted(seq, now)
            out.scheduled.append(ScheduledSeq(seq, n))
            self.running.append(seq)
            if cfg.scheduling == "continuous":
                prefills.append(seq.effective_priority)
                in_flight.update(self.bm.prompt_hashes(seq))
            num_seqs += width
            budget -= n

    def _waits_for_a_prefill(self, seq: Sequence, in_flight: set[int]) -> bool:
        """Whether the prompt's next SHARED_PREFILL_BLOCKS uncached blocks are being computed by another
        prompt (chain hashes: equal hashes mean equal prefixes)."""
        hashes = self.bm.prompt_hashes(seq)
        last = self.bm.cached_prefix_tokens(seq) // self.bm.block_size + SHARED_PREFILL_BLOCKS - 1
        return last < len(hashes) and hashes[last] in in_flight

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        now = self.clock()
        self._recompute_outgrown()
        for seq in self.running:  # they age too: see the module's docstring
            seq.effective_priority = self.effective_priority(seq, now)
        # The best waiting sequence, picked once (a scan of the queue): planning starts from it and,
        # when nothing was preempted, it is still the one admission takes first.
        head = self._next_waiting(now, self._key_admitted) if self.waiting else None
        plan = self._make_room(out, now, head)
        planned_preemptions = len(out.preempted)
        budget = self._schedule_running(out, self.config.max_num_batched_tokens, plan, now)
        starved = len(out.preempted) > planned_preemptions  # running work lacked blocks: admit nothing
        if not starved and self.waiting:
            first = plan.seqs[0] if plan.seqs else head
            if plan.seqs or self._admission_open(first, now):
                self._admit_waiting(out, budget, plan, now, first)
        out.blocks_to_copy = self.bm.take_pending_copies()
        return out

    def snapshot_stats(self, **engine_counters: Any) -> EngineStats:
        """The scheduler's state as an immutable EngineStats, with the engine's own counters."""
        bm = self.bm
        running = {s.request_id for s in self.running}
        return EngineStats(
            num_running=len(self.running), num_waiting=len(self.waiting), num_requests_running=len(running),
            num_requests_waiting=len({s.request_id for s in self.waiting} - running),
            kv_usage=bm.usage, num_free_blocks=bm.num_free_blocks, num_blocks=bm.num_blocks,
            prefix_queries=bm.prefix_queries, prefix_hits=bm.prefix_hits, num_preemptions=self.num_preemptions,
            preemptions_by_priority=dict(self.preemptions_by_priority), **engine_counters)

    def update_from_output(self, sched: SchedulerOutput, sampled: list[SampledSeq]) -> int:
        """Applies a step's results: computed tokens advance, the slots of rejected drafts and the
        blocks of finished sequences return to the pool, and newly full blocks join the prefix cache.
        Returns how many prompt tokens the step computed."""
        prompt_tokens = 0
        got_tokens = {s.seq.seq_id for s in sampled}
        for item in sched.scheduled:
            seq = item.seq
            real = item.num_new_tokens - len(seq.spec_tokens)
            seq.spec_tokens = []
            if seq.num_computed_tokens < seq.num_prompt_tokens:
                prompt_tokens += min(real, seq.num_prompt_tokens - seq.num_computed_tokens)
            seq.num_computed_tokens += real
            if seq.seq_id not in got_tokens:  # a prompt chunk short of the prompt's end
                self.bm.register_full_blocks(seq)
        for s in sampled:
            seq = s.seq
            if s.forked_from is not None:
                seq.num_computed_tokens = s.forked_from.num_computed_tokens
                seq.num_cached_tokens = s.forked_from.num_cached_tokens
            if seq.finish_reason is not None:
                self.finish(seq)
                continue
            if s.num_drafts is not None:
                # KV of the accepted drafts is valid; the rejected drafts' slots are released.
                seq.num_computed_tokens += s.accepted_drafts
                self.bm.trim(seq, len(seq))
            self.bm.register_full_blocks(seq)
        return prompt_tokens

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """An n > 1 sample joins the batch beside its parent, with the parent's place in the order,
        sharing every block of it until one of them writes (copy-on-write)."""
        self.bm.fork(parent, child)
        if self.recurrent is not None:
            self.recurrent.fork(parent, child)
        child.long_rope = parent.long_rope
        child.priority, child.fairness_key = parent.priority, parent.fairness_key
        child.effective_priority, child.admitted_order = parent.effective_priority, parent.admitted_order
        child.queued_at = parent.queued_at
        child.status = SequenceStatus.RUNNING
        self.running.append(child)

    def finish(self, seq: Sequence) -> None:
        """Removes a finished or aborted sequence and returns its blocks, its full ones to the prefix cache: the
        step that finishes it may be the one that filled them (a request ending in its prefill step, a last
        generated token completing a block), and a repeat or a chat's next turn should find them."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.register_full_blocks(seq)
        self._free(seq)
        seq.status = SequenceStatus.FINISHED
