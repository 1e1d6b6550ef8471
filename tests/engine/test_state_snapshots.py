"""Which recurrent states a step keeps (engine/state_snapshots.py), planned without a model: a prompt's boundaries,
then one state past the prompt that moves with the sequence, taken over by a greedy sibling reaching the same
tokens, and left in the pool when the sequence stops. The tokens these states give are checked against HF in
tests/engine/test_hybrid_models.py."""

import torch

from engine.block_manager import BlockManager
from engine.recurrent_state import RecurrentStates, StateShape
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.state_snapshots import StateSnapshots


def _pool(capacity: int = 8) -> tuple[StateSnapshots, BlockManager]:
    states = RecurrentStates([StateShape((4, 3), (2, 4, 4))], 2, torch.float32, torch.device("cpu"))
    bm = BlockManager(32, 8)
    states.snapshots = bm.state_cache = StateSnapshots(states, bm, capacity, every=256)
    return states.snapshots, bm


def _seq(prompt: int, total: int) -> Sequence:
    return Sequence("r", list(range(3, 3 + total)), prompt, SamplingParams())


def test_a_recomputed_chunk_keeps_its_last_boundary_past_the_prompt():
    """20 prompt tokens and 25 generated, computed again in one chunk (after preemption): the prompt's last full
    block (16) and the last boundary reached (40), not 24 or 32; decode steps then move that state to 48."""
    snapshots, bm = _pool()
    seq = _seq(20, 45)
    [saves] = snapshots.plan([(seq, 0, 45)])
    assert [at for at, _ in saves] == [16, 40]
    assert snapshots.plan([(seq, 45, 1)]) == [[]]
    seq.token_ids += [100, 101, 102]
    assert snapshots.plan([(seq, 47, 1)]) == [[(1, saves[1][1])]]  # the entry that held 40
    assert snapshots.block_hashes == [bm.prefix_hash(seq, 2), bm.prefix_hash(seq, 6)]
    snapshots.release(seq)
    snapshots.check_no_leak()


def test_a_sibling_on_the_same_tokens_keeps_one_state():
    snapshots, bm = _pool()
    a, b = _seq(20, 24), _seq(20, 24)
    [saves_a, saves_b] = snapshots.plan([(a, 23, 1), (b, 23, 1)])
    assert [at for at, _ in saves_a] == [1] and saves_b == []
    assert len(snapshots) == 1
    for s in (a, b):
        snapshots.release(s)
    snapshots.check_no_leak()
    assert snapshots.block_hashes == [bm.prefix_hash(a, 3)]


def test_running_sequences_hold_at_most_half_the_pool():
    """A pool of 4: two running sequences keep their latest states, a third keeps none rather than evict the
    prompts' states; the first two move theirs on."""
    snapshots, _ = _pool(capacity=4)
    seqs = [Sequence(f"r{i}", [i + 3] * 30, 20, SamplingParams()) for i in range(3)]
    plans = snapshots.plan([(s, 23, 1) for s in seqs])
    assert [len(p) for p in plans] == [1, 1, 0]
    assert [len(p) for p in snapshots.plan([(s, 31, 1) for s in seqs[:2]])] == [1, 1]
    assert len(snapshots) == 2
    for s in seqs:
        snapshots.release(s)
    snapshots.check_no_leak()
