"""Priority in the encoder engine (engine/encoder_engine.py), the paged scheduler's rule: a better-priority
request submitted while a large low-priority backlog runs gets in after at most the batch in progress,
the backlog's vectors are those it gives alone, and an aged low-priority request outranks fresh better
ones; shutdown fails what still waits instead of leaving it hanging."""

import asyncio
import threading
import time

import pytest
import torch

from engine.encoder_engine import EncoderEngine, _Job
from engine.errors import EngineDeadError
from engine.pooling import PoolingParams
from tests.engine.encoder_helpers import make_sentence_transformer

TEXTS = [f"document number {i} about {['cats', 'sql', 'rain', 'music'][i % 4]}" for i in range(1200)]
BATCH = 2


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_sentence_transformer(tmp_path_factory.mktemp("prio") / "tiny-bert", "bert", "mean", seed=5)


@pytest.fixture
def engine(folder):
    # Two inputs a forward pass: the backlog below is hundreds of passes, so "after the batch in
    # progress" and "after the backlog" are far apart.
    e = EncoderEngine(folder, max_batch_size=BATCH)
    yield e
    e.shutdown()


def _params(engine: EncoderEngine) -> PoolingParams:
    return PoolingParams(engine.spec.pooling, normalize=engine.spec.normalize)


def test_a_better_priority_request_overtakes_a_running_backlog(engine):
    # The worker is held in its 5th forward pass (the backlog's round has begun) while the better request
    # is submitted, so "the batch in progress" is exact: read at the hold, not raced against a worker that
    # runs on while the event loop waits for the GIL (a loaded CI host ran 13 passes in that gap).
    params = _params(engine)
    order: list[str] = []
    reached, go = threading.Event(), threading.Event()
    passes = 0
    forward = engine._run

    def held_run(batch):
        nonlocal passes
        passes += 1
        if passes == 5:
            reached.set()
            assert go.wait(30)
        forward(batch)

    engine._run = held_run

    async def one(name: str, text: str, priority: int) -> torch.Tensor:
        out = await engine.embed(engine.check_request(text), params, name, priority)
        order.append(name)
        return out.embedding

    async def run():
        backlog = [asyncio.ensure_future(one(f"batch{i}", t, 10)) for i, t in enumerate(TEXTS)]
        deadline = time.monotonic() + 30
        while not reached.is_set():
            assert time.monotonic() < deadline, engine.stats()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)  # the backlog's coroutines not yet started submit theirs
        queued_behind = len(TEXTS) - engine.stats()["requests"]
        interactive = asyncio.ensure_future(one("interactive", TEXTS[7], 0))
        while engine.stats()["num_waiting"] < queued_behind - BATCH + 1:  # submitted beside the backlog
            assert time.monotonic() < deadline, engine.stats()
            await asyncio.sleep(0.001)
        go.set()
        return await interactive, queued_behind, await asyncio.gather(*backlog)

    interactive, queued_behind, vectors = asyncio.run(run())
    assert queued_behind > len(TEXTS) // 2, "the backlog ran out before the test could overtake it"
    position = order.index("interactive")
    # Ahead of it: what had run when it came, and the batch in progress then.
    assert position <= len(TEXTS) - queued_behind + BATCH, (position, queued_behind)
    assert engine.stats()["num_waiting"] == 0 and len(order) == len(TEXTS) + 1
    # Suspending the round and taking it up again changes no vector.
    torch.testing.assert_close(interactive, vectors[7])
    alone = asyncio.run(one("alone", TEXTS[1000], 10))
    torch.testing.assert_close(vectors[1000], alone, atol=1e-5, rtol=1e-5)


def test_the_requests_of_the_round_in_progress_count_as_waiting(engine):
    # A round takes every request waiting at its priority off the pending list; they still wait until their
    # own batch runs (the /metrics gauge and tests/gateway/test_embedding_priority.py read this count). The
    # worker is held in its 1st forward pass while the backlog queues, so the 2nd begins a round of all of
    # it, and held again in its 3rd, so the count is read while nothing moves.
    params = _params(engine)
    ids = [engine.check_request(t) for t in TEXTS]
    reached = {1: threading.Event(), 3: threading.Event()}
    go = {1: threading.Event(), 3: threading.Event()}
    passes = 0
    forward = engine._run

    def held_run(batch):
        nonlocal passes
        passes += 1
        if passes in reached:
            reached[passes].set()
            assert go[passes].wait(30)
        forward(batch)

    engine._run = held_run
    first = engine._submit(_Job(ids[0], None, params, 10))
    assert reached[1].wait(30)
    futures = [engine._submit(_Job(x, None, params, 10)) for x in ids]
    go[1].set()
    assert reached[3].wait(30)
    assert engine.stats()["num_waiting"] == len(TEXTS) - 2 * BATCH  # less the batch run and the one running
    go[3].set()
    for f in [first, *futures]:
        f.result(timeout=60)
    assert engine.stats()["num_waiting"] == 0


def test_an_aged_request_outranks_fresh_better_ones(folder):
    engine = EncoderEngine(folder, max_batch_size=1, priority_aging_s=0.5)
    params = _params(engine)
    ids = [engine.check_request(t) for t in TEXTS[:300]]
    try:
        order: list[str] = []

        def job(name: str, job_ids: list[int], priority: int, age_s: float = 0.0) -> _Job:
            j = _Job(job_ids, None, params, priority, arrived=time.monotonic() - age_s)
            j.future.add_done_callback(lambda _: order.append(name))
            return j

        futures = [engine._submit(job(f"fresh{i}", x, 0)) for i, x in enumerate(ids)]
        # Priority 10 queued 10 s ago: 10 - 10 / 0.5 = -10, better than the fresh ones' 0.
        futures.append(engine._submit(job("aged", ids[0], 10, age_s=10.0)))
        for f in futures:
            f.result(timeout=60)
        assert order.index("aged") < 20, order.index("aged")
    finally:
        engine.shutdown()


def test_shutdown_fails_the_requests_still_waiting(folder):
    engine = EncoderEngine(folder, max_batch_size=1)
    params = _params(engine)
    futures = [engine._submit(_Job(engine.check_request(t), None, params)) for t in TEXTS[:400]]
    engine.shutdown()
    outcomes = [f.exception(timeout=10) for f in futures]
    assert any(isinstance(e, EngineDeadError) for e in outcomes)
    assert all(e is None or isinstance(e, EngineDeadError) for e in outcomes)


def test_requests_whose_callers_left_are_dropped_without_failing_others(folder):
    engine = EncoderEngine(folder, max_batch_size=4)
    params = _params(engine)
    try:
        futures = [engine._submit(_Job(engine.check_request(t), None, params)) for t in TEXTS[:400]]
        gone = [f for i, f in enumerate(futures) if i % 3 == 0 and f.cancel()]
        kept = [f for f in futures if not f.cancelled()]
        assert gone and all(f.result(timeout=60).shape == (32,) for f in kept)
        assert engine.stats()["requests"] == len(kept)  # the cancelled ones took no place in a forward pass
    finally:
        engine.shutdown()
