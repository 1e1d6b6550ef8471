"""Per-sequence recurrent state of hybrid models' linear-attention layers (Qwen3.5's Gated DeltaNet), kept beside
the paged KV cache: one slot per running sequence, holding for every such layer the causal convolution's last
inputs and the delta rule's state matrix.

Unlike KV blocks, a state summarises every token before it and cannot be shared or cut: a sequence gets a zeroed
slot when its computation starts from its first token (admission, or again after preemption), a copy of a kept
snapshot when it starts after a cached prefix (engine/state_snapshots.py: prefix caching for such models), the
scheduler frees the slot wherever it frees the sequence's blocks (finish, abort, preemption), and an n > 1 sample
forked after the prompt copies its parent's slot. Speculative decoding, whose rejected drafts the state cannot
forget, is refused."""

import logging
from dataclasses import dataclass
from typing import Protocol

import torch

from engine.sequence import Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateShape:
    """One linear-attention layer's state per sequence: conv [channels, kernel - 1], recurrent [H, Dk, Dv]."""

    conv: tuple[int, int]
    recurrent: tuple[int, int, int]


class Snapshots(Protocol):
    """What the slots ask of the kept states (engine/state_snapshots.py, which imports this module, hence a
    protocol rather than an import)."""

    def restore(self, seq: Sequence, slot: int) -> None: ...

    def release(self, seq: Sequence) -> None: ...

    def check_no_leak(self) -> None: ...


class RecurrentStates:
    def __init__(self, shapes: list[StateShape], num_slots: int, dtype: torch.dtype, device: torch.device):
        self.shapes, self.dtype, self.device = shapes, dtype, device
        self.conv: list[torch.Tensor] = []  # per layer [slots, channels, kernel - 1], in the model's dtype
        self.recurrent: list[torch.Tensor] = []  # per layer [slots, H, Dk, Dv], float32 as the rule runs
        self._slots: dict[int, int] = {}  # seq_id -> slot
        self._free: list[int] = []
        self.snapshots: Snapshots | None = None  # with prefix caching (engine/llm_engine.py sets it)
        self._grow(num_slots)
        log.info("recurrent state: %d linear-attention layers, %.1f MiB per sequence, %d slots to start",
                 len(shapes), self.bytes_per_slot / 2**20, num_slots)

    @property
    def bytes_per_slot(self) -> int:
        return sum(s.conv[0] * s.conv[1] * self.conv[0].element_size() + 4 * s.recurrent[0] * s.recurrent[1]
                   * s.recurrent[2] for s in self.shapes)

    def _grow(self, n: int) -> None:
        start = self.conv[0].shape[0] if self.conv else 0
        for i, s in enumerate(self.shapes):
            conv = torch.zeros((n, *s.conv), dtype=self.dtype, device=self.device)
            rec = torch.zeros((n, *s.recurrent), dtype=torch.float32, device=self.device)
            if start:
                conv, rec = torch.cat([self.conv[i], conv]), torch.cat([self.recurrent[i], rec])
                self.conv[i], self.recurrent[i] = conv, rec
            else:
                self.conv.append(conv)
                self.recurrent.append(rec)
        self._free.extend(range(start + n - 1, start - 1, -1))

    def _take(self) -> int:
        if not self._free:
            self._grow(max(1, self.conv[0].shape[0]))
        return self._free.pop()

    def slot(self, seq: Sequence) -> int:
        """The sequence's slot for this step; a zeroed one when its computation starts at its first token, a
        snapshot's copy when it starts after a cached prefix (the block manager cut the hit to a kept state)."""
        if seq.num_computed_tokens == 0:
            self.free(seq)
            slot = self._slots[seq.seq_id] = self._take()
            for conv, rec in zip(self.conv, self.recurrent, strict=True):
                conv[slot].zero_()
                rec[slot].zero_()
            return slot
        if seq.seq_id not in self._slots:
            assert self.snapshots is not None, f"sequence {seq.seq_id} resumed without its recurrent state"
            slot = self._slots[seq.seq_id] = self._take()
            self.snapshots.restore(seq, slot)
            return slot
        return self._slots[seq.seq_id]

    def free(self, seq: Sequence) -> None:
        slot = self._slots.pop(seq.seq_id, None)
        if slot is not None:
            self._free.append(slot)
        if self.snapshots is not None:
            self.snapshots.release(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child continues from the parent's state (both have computed the same tokens)."""
        src, dst = self._slots[parent.seq_id], self._take()
        self._slots[child.seq_id] = dst
        for conv, rec in zip(self.conv, self.recurrent, strict=True):
            conv[dst].copy_(conv[src])
            rec[dst].copy_(rec[src])

    def check_no_leak(self) -> None:
        assert not self._slots, f"recurrent state slots still held by sequences {sorted(self._slots)[:20]}"
        assert sorted(self._free) == list(range(self.conv[0].shape[0])), "recurrent state slots lost"
        if self.snapshots is not None:
            self.snapshots.check_no_leak()
