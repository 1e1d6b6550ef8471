"""Prefix caching for hybrid models: snapshots of the per-sequence recurrent state (engine/recurrent_state.py)
at block boundaries of prompts, keyed by the block manager's hash chain (engine/block_manager.py).

A cached KV prefix alone is of no use to a linear-attention layer: its state summarises every token before the
point where computation resumes, so a sequence may skip a prefix only if the state after exactly that prefix was
kept. As vLLM does for its Mamba-style layers, a prefill step copies the state out at chosen block boundaries of
the prompt, under the hash of the block that ends there; a prefix hit is cut back to the longest prefix with a
snapshot (the block manager asks `usable_prefix`), and the sequence's slot starts as a copy of it. Which
boundaries: every `every` tokens (EngineConfig.mamba_block_size rounded up to whole blocks) and the prompt's last
full block (and the one before it when the prompt ends on a boundary: an identical prompt reuses every block but
the one holding its last token). Past the prompt, a sequence keeps one state, at the last block boundary it reached
(decode steps, or a recomputed chunk after preemption): a chat's next turn (the prompt, the answer, new text)
resumes there, after the answer's last full block, which the block manager registers when the sequence finishes.
Each newer boundary takes the entry of the one before, so a long answer holds one entry, not one per block, and
running sequences hold at most half the pool. Not every block: a state is far larger than a block of KV
(Qwen3.5-0.8B keeps about 18 MiB per sequence against 192 KiB per 16-token block), and a pool flooded by one long
prompt's boundaries would evict the shared prefixes that other requests hit.

The pool is bounded (`capacity` snapshots: EngineConfig.max_state_snapshots, or a share of the KV cache's bytes;
tensors grown on demand up to it) and least-recently-used first to go; a snapshot also goes with its block, when
the block manager forgets the block's hash (`forget`), since no lookup can reach it after that. A step takes the
states it saves inside a prefill chunk (the model splits the chunk's delta rule there, engine/models/qwen3_5.py);
`plan` chooses them before the forward pass."""

from collections import OrderedDict
from typing import TYPE_CHECKING

import torch

from engine.sequence import Sequence

if TYPE_CHECKING:
    from engine.block_manager import BlockManager
    from engine.recurrent_state import RecurrentStates

MAX_SNAPSHOTS = 256
MIN_SNAPSHOTS = 4
KV_SHARE = 4  # the pool may take up to 1 / KV_SHARE of the KV cache's bytes


class StateSnapshots:
    def __init__(self, states: "RecurrentStates", bm: "BlockManager", capacity: int, every: int):
        self.states, self.bm, self.capacity = states, bm, capacity
        bs = bm.block_size
        self.every = -(-every // bs) * bs
        self.conv: list[torch.Tensor] = []  # per layer [entries, channels, kernel - 1], as RecurrentStates.conv
        self.recurrent: list[torch.Tensor] = []  # per layer [entries, H, Dk, Dv]
        self._by_hash: OrderedDict[int, int] = OrderedDict()  # block hash -> entry, least recently used first
        self._free: list[int] = []
        self._step: set[int] = set()  # entries the step being prepared writes: never evicted for one another
        self._latest: dict[int, int] = {}  # seq_id -> hash of the state it kept past its prompt, while it runs

    def __len__(self) -> int:
        return len(self._by_hash)

    @property
    def block_hashes(self) -> list[int]:
        """The hashes of the blocks after which a state is kept, least recently used first."""
        return list(self._by_hash)

    def _grow(self) -> bool:
        start = self.conv[0].shape[0] if self.conv else 0
        n = min(max(1, start), self.capacity - start)
        if n <= 0:
            return False
        for i, (conv, rec) in enumerate(zip(self.states.conv, self.states.recurrent, strict=True)):
            more_conv = torch.zeros((n, *conv.shape[1:]), dtype=conv.dtype, device=conv.device)
            more_rec = torch.zeros((n, *rec.shape[1:]), dtype=rec.dtype, device=rec.device)
            if start:
                self.conv[i], self.recurrent[i] = torch.cat([self.conv[i], more_conv]), torch.cat([self.recurrent[i],
                                                                                                   more_rec])
            else:
                self.conv.append(more_conv)
                self.recurrent.append(more_rec)
        self._free.extend(range(start + n - 1, start - 1, -1))
        return True

    def _take(self) -> int | None:
        """A free entry, growing the pool or evicting the least recently used snapshot; None when every entry
        is being written by this step."""
        if not self._free and not self._grow():
            victim = next((h for h, e in self._by_hash.items() if e not in self._step), None)
            if victim is None:
                return None
            self.forget(victim)
        return self._free.pop()

    # -- the block manager's side -----------------------------------------------------------------------
    def usable_prefix(self, hashes: list[int]) -> int:
        """Of a cached prefix of full blocks (their chain hashes), how many the sequence can skip: up to the
        last block after which a state was kept."""
        for n in range(len(hashes), 0, -1):
            if hashes[n - 1] in self._by_hash:
                return n
        return 0

    def forget(self, block_hash: int) -> None:
        """The block manager no longer knows this hash (its block was reused): no lookup reaches the snapshot."""
        entry = self._by_hash.pop(block_hash, None)
        if entry is not None:
            self._free.append(entry)

    # -- the slots' side -----------------------------------------------------------------------------------
    def release(self, seq: Sequence) -> None:
        """The sequence stopped running (finished or preempted): the state it kept past its prompt stays, for a
        next turn, but is no longer its to move on."""
        self._latest.pop(seq.seq_id, None)

    # -- the model runner's side --------------------------------------------------------------------------
    def restore(self, seq: Sequence, slot: int) -> None:
        """Fills `slot` with the state after the sequence's cached prefix (num_computed_tokens, a boundary)."""
        h = self.bm.prefix_hash(seq, seq.num_computed_tokens // self.bm.block_size)
        entry = self._by_hash[h]
        self._by_hash.move_to_end(h)
        for conv, rec, snap_conv, snap_rec in zip(self.states.conv, self.states.recurrent, self.conv, self.recurrent,
                                                  strict=True):
            conv[slot].copy_(snap_conv[entry])
            rec[slot].copy_(snap_rec[entry])

    def _points(self, seq: Sequence, start: int, end: int) -> list[int]:
        bs, prompt = self.bm.block_size, seq.num_prompt_tokens
        points = set(range(self.every, prompt + 1, self.every))
        points |= {prompt // bs * bs, (prompt - 1) // bs * bs}
        return sorted(p for p in points if start < p <= min(end, prompt))

    def plan(self, steps: list[tuple[Sequence, int, int]]) -> list[list[tuple[int, int]]]:
        """For each (sequence, first token, tokens) of a step, the states it keeps: (tokens into its part of the
        step, entry) pairs in order, the entries taken now under their block hashes. A step's entries are never
        evicted for one another; boundaries already kept are touched."""
        self._step.clear()
        return [self._saves(seq, start, n) for seq, start, n in steps]

    def _saves(self, seq: Sequence, start: int, num_tokens: int) -> list[tuple[int, int]]:
        if seq.pooling is not None:
            return []  # an embedding request's prompt is not continued by others
        out: list[tuple[int, int]] = []
        end = start + num_tokens
        if start < seq.num_prompt_tokens:
            self._prompt_saves(seq, start, end, out)
        last = end // self.bm.block_size * self.bm.block_size
        if last > max(start, seq.num_prompt_tokens):
            self._latest_save(seq, start, last, out)
        return out

    def _latest_save(self, seq: Sequence, start: int, point: int, out: list[tuple[int, int]]) -> None:
        """Keeps the state at `point`, a boundary past the prompt, in place of the one the sequence kept before."""
        h = self.bm.prefix_hash(seq, point // self.bm.block_size)
        old = self._latest.pop(seq.seq_id, None)
        if old is not None and old != h and self._by_hash.get(old, -1) not in self._step:
            self.forget(old)  # its entry is the next one taken
        elif old is None and len(self._latest) >= max(1, self.capacity // 2):
            return  # running sequences' states would crowd out the prompts' shared prefixes
        if h in self._by_hash:  # kept already: the same tokens' state (a greedy sibling's), or its own
            self._by_hash.move_to_end(h)
            if old == h:
                self._latest[seq.seq_id] = h
            return
        if self._keep(h, point - start, out):
            self._latest[seq.seq_id] = h

    def _prompt_saves(self, seq: Sequence, start: int, end: int, out: list[tuple[int, int]]) -> None:
        for p in self._points(seq, start, end):
            h = self.bm.prefix_hash(seq, p // self.bm.block_size)
            if h in self._by_hash:
                self._by_hash.move_to_end(h)
                continue
            if not self._keep(h, p - start, out):
                break

    def _keep(self, h: int, offset: int, out: list[tuple[int, int]]) -> bool:
        """A new entry for the state under hash `h`, which the step writes at `offset` of the sequence's chunk;
        False when the pool has none to give."""
        entry = self._take()
        if entry is None:
            return False
        self._by_hash[h] = entry
        self._step.add(entry)
        out.append((offset, entry))
        return True

    def check_no_leak(self) -> None:
        """Every entry is free or holds one snapshot, and the pool keeps to its bound."""
        total = self.conv[0].shape[0] if self.conv else 0
        held = sorted(self._by_hash.values())
        assert total <= self.capacity and len(set(held)) == len(held), "snapshot entries over the bound or shared"
        assert sorted(held + self._free) == list(range(total)), "snapshot entries lost"
        assert not self._latest, f"sequences {sorted(self._latest)[:20]} still move a kept state"


def snapshot_capacity(per_state_bytes: int, kv_cache_bytes: int, limit: int | None = None) -> int:
    """Snapshots the pool may hold: `limit` when set, else a share of the KV cache's bytes, within [MIN_SNAPSHOTS,
    MAX_SNAPSHOTS]."""
    if limit is not None:
        return limit
    return max(MIN_SNAPSHOTS, min(MAX_SNAPSHOTS, kv_cache_bytes // KV_SHARE // max(1, per_state_bytes)))
