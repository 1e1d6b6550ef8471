"""Physical KV blocks: allocation, reference counts, copy-on-write and automatic prefix caching.

A block holds `block_size` token slots in every layer's cache. Sequences map logical blocks to
physical ones through their block table. A full block is registered under a hash chained from its
predecessor's, so a later prompt with the same prefix reuses it; the token ids are kept beside the
hash so a collision can never serve the wrong cache. Free blocks keep their hash until they are
reused, and are reused least-recently-freed first, which makes the free list an LRU prefix cache."""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from engine.sequence import Sequence


class StateCache(Protocol):
    """What the block manager asks of a hybrid model's kept recurrent states (engine/state_snapshots.py,
    which imports this module, hence a protocol rather than an import)."""

    def forget(self, block_hash: int) -> None: ...

    def usable_prefix(self, hashes: list[int]) -> int: ...


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] | None = None


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        assert num_blocks > 0
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.pending_copies: list[tuple[int, int]] = []  # copy-on-write work for the next forward pass
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  # of those, found
        # Hybrid models: a prefix is usable only up to a kept recurrent state (engine/state_snapshots.py).
        self.state_cache: StateCache | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks

    def reset_prefix_cache(self) -> None:
        """Forgets every cached block that no sequence holds (benchmarks start cold; vLLM has the same)."""
        for block_id in self.free_ids:
            block = self.blocks[block_id]
            if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
                self._forget(block.hash)
            block.hash = block.token_ids = None

    def _forget(self, block_hash: int) -> None:
        del self.hash_to_block[block_hash]
        if self.state_cache is not None:
            self.state_cache.forget(block_hash)

    def _take(self, block_id: int | None = None) -> int:
        if block_id is None:
            block_id, _ = self.free_ids.popitem(last=False)
        else:
            del self.free_ids[block_id]
        block = self.blocks[block_id]
        assert block.ref_count == 0
        block.ref_count = 1
        return block_id

    def _new_block(self) -> int:
        block_id = self._take()
        block = self.blocks[block_id]
        if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
            self._forget(block.hash)
        block.hash = block.token_ids = None
        return block_id

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        assert block.ref_count > 0, f"double free of block {block_id}"
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free_ids[block_id] = None

    @staticmethod
    def _chain_hash(prev: int | None, tokens: tuple[int, ...]) -> int:
        return hash((prev, tokens))

    @staticmethod
    def _root_hash(seq: Sequence) -> int | None:
        """Where a sequence's hash chain starts: the KV of a prompt depends on its LoRA adapter, so a
        block cached under one adapter (or none) never serves another."""
        if seq.long_rope:  # rotated by LongRoPE's long factors: not the same KV as a short sequence's
            return hash(("lora", seq.lora_int_id, "long_rope"))
        return hash(("lora", seq.lora_int_id)) if seq.lora_int_id else None

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        """Physical blocks holding this sequence's longest cached prefix of full blocks.

        The block holding the last token is never taken from the cache: its logits must be computed. An
        embedding request pooling over every token takes nothing (those rows must be computed)."""
        if not self.enable_prefix_caching or (seq.pooling is not None and seq.pooling.needs_every_row):
            return []
        hits: list[int] = []
        hashes: list[int] = []
        prev = self._root_hash(seq)
        bs = self.block_size
        for i in range((len(seq) - 1) // bs):
            tokens = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            h = self._chain_hash(prev, tokens)
            block_id = self.hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
            hashes.append(h)
            prev = h
        if self.state_cache is not None:
            return hits[: self.state_cache.usable_prefix(hashes)]
        return hits

    def prefix_hash(self, seq: Sequence, num_blocks: int) -> int | None:
        """The chain hash of the sequence's first `num_blocks` full blocks, registered or not."""
        known = min(seq.num_hashed_blocks, num_blocks)
        h = self.blocks[seq.block_table[known - 1]].hash if known else self._root_hash(seq)
        bs = self.block_size
        for i in range(known, num_blocks):
            h = self._chain_hash(h, tuple(seq.token_ids[i * bs : (i + 1) * bs]))
        return h

    def prompt_hashes(self, seq: Sequence) -> list[int]:
        """The chain hashes of the prompt's full blocks (the last token's block aside, as the cache takes
        it), whether registered or not; computed once per sequence."""
        if seq.prompt_hashes is None:
            hashes, prev, bs = [], self._root_hash(seq), self.block_size
            for i in range((seq.num_prompt_tokens - 1) // bs):
                prev = self._chain_hash(prev, tuple(seq.token_ids[i * bs : (i + 1) * bs]))
                hashes.append(prev)
            seq.prompt_hashes = hashes
        return seq.prompt_hashes

    def cached_prefix_tokens(self, seq: Sequence) -> int:
        return len(self._cached_prefix(seq)) * self.block_size

    def blocks_to_admit(self, seq: Sequence, num_new_tokens: int) -> int:
        """Free blocks a waiting sequence (no blocks yet) takes for its first chunk: new ones, and the
        cached prefix blocks it revives from the free list."""
        hits = self._cached_prefix(seq)
        start = len(hits) * self.block_size
        needed = seq.num_blocks_needed(self.block_size, min(len(seq), start + num_new_tokens)) - len(hits)
        reclaimable = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return needed + reclaimable

    def can_admit(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether a waiting sequence (no blocks yet) can get blocks for its first chunk."""
        return self.blocks_to_admit(seq, num_new_tokens) <= self.num_free_blocks

    def admit(self, seq: Sequence) -> int:
        """Gives a waiting sequence its cached prefix; returns how many tokens that covers."""
        assert not seq.block_table
        hits = self._cached_prefix(seq)
        for block_id in hits:
            if self.blocks[block_id].ref_count == 0:
                self._take(block_id)
            else:
                self.blocks[block_id].ref_count += 1
        seq.block_table = hits
        seq.num_hashed_blocks = len(hits)
        cached = len(hits) * self.block_size
        seq.num_computed_tokens = seq.num_cached_tokens = cached
        if seq.num_output_tokens == 0:  # recomputation after preemption is not a prompt lookup
            self.prefix_queries += len(seq)
            self.prefix_hits += cached
        return cached

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """New physical blocks needed to compute `num_new_tokens` more tokens (copy-on-write included)."""
        total = seq.num_blocks_needed(self.block_size, seq.num_computed_tokens + num_new_tokens)
        needed = max(0, total - len(seq.block_table))
        first = seq.num_computed_tokens // self.block_size
        if first < len(seq.block_table) and self.blocks[seq.block_table[first]].ref_count > 1:
            needed += 1
        return needed

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Makes the slots for the next `num_new_tokens` writable: new blocks, or a private copy of a
        shared block about to be written (copy-on-write)."""
        first = seq.num_computed_tokens // self.block_size
        if first < len(seq.block_table):
            shared = seq.block_table[first]
            if self.blocks[shared].ref_count > 1:
                fresh = self._new_block()
                self.pending_copies.append((shared, fresh))
                self._release(shared)
                seq.block_table[first] = fresh
        total = seq.num_blocks_needed(self.block_size, seq.num_computed_tokens + num_new_tokens)
        while len(seq.block_table) < total:
            seq.block_table.append(self._new_block())

    def register_full_blocks(self, seq: Sequence) -> None:
        """Publishes the sequence's newly computed full blocks to the prefix cache."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        full = min(seq.num_computed_tokens, len(seq)) // bs
        prev = (self.blocks[seq.block_table[seq.num_hashed_blocks - 1]].hash if seq.num_hashed_blocks
                else self._root_hash(seq))
        for i in range(seq.num_hashed_blocks, full):
            block = self.blocks[seq.block_table[i]]
            tokens = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            h = self._chain_hash(prev, tokens)
            if block.hash is None:
                block.hash, block.token_ids = h, tokens
                self.hash_to_block.setdefault(h, block.block_id)
            prev = block.hash
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, full)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent until one of them writes (copy-on-write)."""
        child.block_table = list(parent.block_table)
        child.num_hashed_blocks = parent.num_hashed_blocks
        for block_id in child.block_table:
            self.blocks[block_id].ref_count += 1

    def free(self, seq: Sequence) -> None:
        # Tail first, so the LRU free list evicts a sequence's last blocks before its shared prefix.
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table = []
        seq.num_hashed_blocks = 0

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Releases the blocks past the first `num_tokens` slots (rejected speculative tokens)."""
        keep = seq.num_blocks_needed(self.block_size, num_tokens)
        while len(seq.block_table) > keep:
            self._release(seq.block_table.pop())
        seq.num_hashed_blocks = min(seq.num_hashed_blocks, len(seq.block_table))

    def take_pending_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def check_no_leak(self) -> None:
        """Asserts every block is free; tests call this after all requests have ended."""
        busy = [b.block_id for b in self.blocks if b.ref_count != 0]
        assert not busy and self.num_free_blocks == self.num_blocks, f"blocks still referenced: {busy[:20]}"
