"""Priority in the scheduler: a better-priority request gets in within a step or two and preempts what
it must, greedy outputs of the preempted sequences still equal HF's, keys flooding at once take
turns, and aging lets a low-priority request in despite a steady stream of better ones."""

import random

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.sequence import SequenceStatus
from tests.engine.test_hf_parity import Reference, prompts_of

MAX_NEW = 12
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def gqa(tiny_models):
    folder = tiny_models["gqa"]
    return folder, Reference(folder)


def step_until_first_token(engine: LLMEngine, request_id: str, done: dict, limit: int) -> int:
    """Steps the engine until `request_id` has a token; returns how many steps that took."""
    for steps in range(1, limit + 1):
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
            if out.request_id == request_id and out.outputs[0].token_ids:
                return steps
    raise AssertionError(f"{request_id} had no token after {limit} steps")


def drain(engine: LLMEngine, done: dict) -> dict:
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done


def running_ids(engine: LLMEngine) -> set[str]:
    return {s.request_id for s in engine.scheduler.running}


def test_high_priority_takes_a_slot_from_a_full_batch(gqa):
    folder, hf = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=256, block_size=8, max_num_seqs=4))
    prompts = prompts_of(5, seed=31, lo=8, hi=20)
    for i in range(4):
        engine.add_request(f"low{i}", prompts[i], GREEDY, priority=10)
    done: dict = {}
    engine.step()
    engine.step()
    assert running_ids(engine) == {f"low{i}" for i in range(4)}  # max_num_seqs reached
    engine.add_request("high", prompts[4], GREEDY, priority=0)
    assert step_until_first_token(engine, "high", done, limit=2) == 1
    # The most recently admitted of the low-priority sequences gave its slot.
    assert running_ids(engine) == {"low0", "low1", "low2", "high"}
    assert engine.scheduler.preemptions_by_priority == {10: 1}
    drain(engine, done)
    outputs = [done[f"low{i}"].outputs[0].token_ids for i in range(4)] + [done["high"].outputs[0].token_ids]
    assert outputs == hf(prompts)
    assert done["high"].metrics.priority == 0 and done["low3"].metrics.priority == 10
    engine.block_manager.check_no_leak()


def test_high_priority_takes_kv_blocks_from_low_priority_sequences(gqa):
    folder, hf = gqa
    # 14 blocks of 8 slots: three 32-token prompts hold 12 of them after their prefill, and the
    # newcomer's 30 tokens need 4.
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=14, block_size=8, max_num_seqs=8,
                                    enable_prefix_caching=False))
    low = prompts_of(3, seed=32, lo=32, hi=32)
    high = prompts_of(1, seed=33, lo=30, hi=30)
    for i, p in enumerate(low):
        engine.add_request(f"low{i}", p, GREEDY, priority=5)
    done: dict = {}
    engine.step()
    assert running_ids(engine) == {"low0", "low1", "low2"}
    assert engine.block_manager.num_free_blocks < 4
    engine.add_request("high", high[0], GREEDY, priority=-1)
    assert step_until_first_token(engine, "high", done, limit=2) <= 2
    assert engine.scheduler.preemptions_by_priority.get(5, 0) >= 1
    assert "low2" not in running_ids(engine)  # the most recently admitted went first
    drain(engine, done)
    assert [done[f"low{i}"].outputs[0].token_ids for i in range(3)] == hf(low)
    assert done["high"].outputs[0].token_ids == hf(high)[0]
    engine.block_manager.check_no_leak()


def test_equal_priority_never_preempts_and_priority_orders_admission(gqa):
    folder, _ = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=64, block_size=8, max_num_seqs=1))
    one = SamplingParams(temperature=0, max_tokens=1)
    engine.add_request("running", [5, 6, 7], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    engine.step()
    for name, prio in (("c", 3), ("a", 1), ("same", 0), ("b", 2)):
        engine.add_request(name, [8, 9, 10], one, priority=prio)
    order = []
    while engine.has_unfinished_requests():
        order += [o.request_id for o in engine.step() if o.finished]
    assert order == ["running", "same", "a", "b", "c"]
    assert engine.scheduler.num_preemptions == 0
    engine.block_manager.check_no_leak()


def test_two_keys_flooding_at_once_take_turns(gqa):
    folder, _ = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=64, block_size=8, max_num_seqs=1))
    one = SamplingParams(temperature=0, max_tokens=1)
    for i in range(4):
        engine.add_request(f"A{i}", [5, 6, 7 + i], one, fairness_key="key-a")
    for i in range(4):
        engine.add_request(f"B{i}", [5, 6, 7 + i], one, fairness_key="key-b")
    engine.add_request("late-A", [9, 9], one, fairness_key="key-a", priority=1)  # worse priority: last
    order = []
    while engine.has_unfinished_requests():
        order += [o.request_id for o in engine.step() if o.finished]
    assert order == ["A0", "B0", "A1", "B1", "A2", "B2", "A3", "B3", "late-A"]
    engine.block_manager.check_no_leak()


def test_a_flood_of_equal_priority_requests_outliving_the_aging_period_never_preempts_itself(gqa):
    """Aging counts from when a request was queued, running or not. Were a running sequence's priority
    frozen at admission, requests still waiting after `priority_aging_s` would outrank the ones that
    arrived with them and got in first, preempt them, and so on: a batch of 600 text-to-SQL requests
    made 2,278 preemptions by recompute and finished none in its first 25 steps."""
    folder, hf = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=128, block_size=8, max_num_seqs=2,
                                    priority_aging_s=1.0))
    clock = [0.0]
    engine.scheduler.clock = lambda: clock[0]  # one simulated second per step: every wait is an aging period
    prompts = prompts_of(6, seed=36, lo=5, hi=12)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, GREEDY)
    done: dict = {}
    order = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
                order.append(out.request_id)
        clock[0] += 1.0
    assert engine.scheduler.num_preemptions == 0
    assert sorted(order[:2]) == ["r0", "r1"] and sorted(order[2:4]) == ["r2", "r3"]  # first come, first served
    assert [done[f"r{i}"].outputs[0].token_ids for i in range(6)] == hf(prompts)
    engine.block_manager.check_no_leak()


@pytest.mark.parametrize("aging_s", [1.0, 0.0])
def test_aging_lets_a_low_priority_request_in_eventually(gqa, aging_s):
    folder, _ = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=64, block_size=8, max_num_seqs=1,
                                    priority_aging_s=aging_s))
    clock = [0.0]
    engine.scheduler.clock = lambda: clock[0]  # one simulated second per step: no waiting on a real clock
    one = SamplingParams(temperature=0, max_tokens=1)
    engine.add_request("low", [5, 6, 7], one, priority=3)
    finished_at = None
    for step in range(12):
        engine.add_request(f"high{step}", [8, 9, 10], one, priority=0)  # a steady stream of better work
        if any(o.request_id == "low" and o.finished for o in engine.step()):
            finished_at = step
            break
        clock[0] += 1.0
    if aging_s:
        # Effective priority 0 after 3 s waited: then it ties with the stream and arrived first.
        assert finished_at == 3
    else:
        assert finished_at is None
    for rid in list(engine.requests):
        engine.abort_request(rid)
    engine.block_manager.check_no_leak()


def test_high_priority_prefill_chunks_go_first(gqa):
    folder, hf = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=128, block_size=8,
                                    max_num_batched_tokens=16))
    low, high = prompts_of(2, seed=34, lo=60, hi=60)
    engine.add_request("low", low, GREEDY, priority=2)
    engine.step()
    engine.add_request("high", high, GREEDY, priority=1)
    done: dict = {}
    # 60 prompt tokens at 16 a step: 4 steps when the whole budget goes to it, not 8.
    assert step_until_first_token(engine, "high", done, limit=4) == 4
    low_seq = engine.requests["low"].states[0].seq
    assert low_seq.num_computed_tokens == 16 + 4  # it waited, but for the 4 tokens high's last chunk left
    drain(engine, done)
    assert [done["low"].outputs[0].token_ids, done["high"].outputs[0].token_ids] == hf([low, high])
    engine.block_manager.check_no_leak()


def test_a_worse_prompt_waits_out_the_step_that_prefills_a_better_one(gqa):
    folder, hf = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=128, block_size=8))
    low, high = prompts_of(2, seed=35, lo=30, hi=30)
    engine.add_request("low", low, GREEDY, priority=3)
    engine.add_request("high", high, GREEDY, priority=0)
    engine.step()
    assert running_ids(engine) == {"high"}  # room and budget for both, but the step is high's
    engine.step()
    assert running_ids(engine) == {"high", "low"}
    done = drain(engine, {})
    assert [done["low"].outputs[0].token_ids, done["high"].outputs[0].token_ids] == hf([low, high])
    engine.block_manager.check_no_leak()


@pytest.mark.parametrize("seed", [0, 1])
def test_random_arrivals_of_mixed_priorities_under_pressure_equal_hf(gqa, seed):
    """Slots, blocks and token budget all scarce, priorities and keys mixed, arrivals spread over the
    steps: every preemption and re-admission still yields HF's greedy tokens, no block leaks, and a
    newcomer that running sequences were preempted for is admitted in that same step."""
    folder, hf = gqa
    rng = random.Random(seed)
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=16, block_size=8, max_num_seqs=3,
                                    max_num_batched_tokens=24, priority_aging_s=0.05))
    prompts = prompts_of(10, seed=40 + seed, lo=5, hi=40)
    arrivals = sorted(rng.randrange(12) for _ in prompts)
    scheduler = engine.scheduler
    plans: list = []
    make_room = scheduler._make_room

    def watched(out, now, head):  # the real planning, its plan and preemptions kept for the check
        before = len(out.preempted)
        plan = make_room(out, now, head)
        plans.append((plan.seqs, len(out.preempted) > before))
        return plan

    scheduler._make_room = watched
    done: dict = {}
    step = 0
    while len(done) < len(prompts):
        for i, at in enumerate(arrivals):
            if at == step:
                engine.add_request(f"r{i}", prompts[i], GREEDY, priority=rng.choice([0, 5, 10]),
                                   fairness_key=rng.choice(["a", "b", None]))
        plans.clear()
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        for newcomers, preempted in plans:
            assert not preempted or all(s.status is not SequenceStatus.WAITING for s in newcomers)
        step += 1
        assert step < 2000
    assert engine.scheduler.num_preemptions > 0
    assert [done[f"r{i}"].outputs[0].token_ids for i in range(len(prompts))] == hf(prompts)
    engine.block_manager.check_no_leak()


def test_priority_must_be_an_integer(gqa):
    folder, _ = gqa
    engine = LLMEngine(EngineConfig(model=str(folder), num_kv_blocks=16, block_size=8))
    with pytest.raises(Exception, match="priority"):
        engine.add_request("x", [5, 6], priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="priority_aging_s"):
        EngineConfig(model=str(folder), priority_aging_s=-1)
