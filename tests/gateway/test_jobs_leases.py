"""Leases on their own (gateway/jobs/leases.py), on SQLite and on a real PostgreSQL server: replicas
claiming at once get disjoint lines; a line with a result, a live lease or a batch no longer in
progress is not claimed; an expired or handed back line is; a heartbeat keeps only what it holds; a
background response is claimed by one replica and taken over once its lease expired."""

import asyncio
import time

from sqlalchemy import insert, select, update

from gateway.db import Database
from gateway.jobs.leases import LeasePolicy, claim_lines, release_lines, renew_lines, renew_rows
from gateway.jobs.responses import claim
from gateway.tables.batches import Batch, BatchLine, BatchResult
from gateway.tables.responses import StoredResponse

LINES = 40


def _policy(name: str, lease_s: float = 30.0) -> LeasePolicy:
    return LeasePolicy(owner=name, lease_s=lease_s, scan_s=1.0)


async def _database(db_url: str) -> Database:
    db = Database(db_url)
    await db.create_all()
    async with db.sessions() as session:
        session.add(Batch(id="batch_1", endpoint="/v1/completions", input_file_id="file-1", completion_window="24h",
                          status="in_progress", total=LINES))
        await session.flush()
        await session.execute(insert(BatchLine), [
            {"batch_id": "batch_1", "line": n, "custom_id": f"c{n}", "url": "/v1/completions", "body": {}}
            for n in range(1, LINES + 1)])
        await session.commit()
    return db


async def _claim(db: Database, policy: LeasePolicy, limit: int = 1) -> list[int]:
    async with db.sessions() as session:
        return [line.line for line in await claim_lines(session, "batch_1", policy, limit)]


async def test_replicas_claiming_at_once_get_disjoint_lines(db_url):
    db = await _database(db_url)
    replicas = [_policy(f"r{i}") for i in range(4)]

    async def drain(policy: LeasePolicy) -> list[int]:
        got = []
        while lines := await _claim(db, policy, limit=3):
            got += lines
        return got

    claimed = await asyncio.gather(*(drain(p) for p in replicas))
    every = [n for lines in claimed for n in lines]
    assert sorted(every) == list(range(1, LINES + 1))  # each line once, none left out
    async with db.sessions() as session:
        owners = dict((await session.execute(select(BatchLine.line, BatchLine.owner))).all())
    for policy, lines in zip(replicas, claimed, strict=True):
        assert all(owners[n] == policy.owner for n in lines)
    await db.dispose()


async def test_what_is_claimed_and_what_is_not(db_url):
    db = await _database(db_url)
    a, b = _policy("a"), _policy("b", lease_s=0.2)
    assert await _claim(db, a, 2) == [1, 2]
    async with db.sessions() as session:  # line 3 has a result: it is never claimed
        session.add(BatchResult(id="batch_req_3", batch_id="batch_1", line=3, custom_id="c3", status_code=200,
                                request_id="req_3", body={}))
        await session.commit()
    assert await _claim(db, b, 2) == [4, 5]  # a's live leases and the recorded line are skipped

    # a's heartbeat keeps lines 1 and 2; b stops renewing, and its lines are free after its lease.
    async with db.sessions() as session:
        assert await renew_lines(session, "batch_1", {1, 2, 4}, a) == 2  # line 4 is b's
        await session.commit()
    assert await _claim(db, a, LINES) == list(range(6, LINES + 1))  # all the rest, while b's lease lasts
    deadline = time.monotonic() + 10
    while (taken := await _claim(db, a, 2)) != [4, 5]:
        assert time.monotonic() < deadline and taken == [], taken
        await asyncio.sleep(0.05)

    # A line handed back is free at once.
    async with db.sessions() as session:
        await release_lines(session, "batch_1", {1}, a)
        await session.commit()
    assert await _claim(db, b, 1) == [1]

    # A batch no longer in progress (cancelled, on any replica) gives no more lines.
    async with db.sessions() as session:
        await session.execute(update(Batch).where(Batch.id == "batch_1").values(status="cancelling"))
        await session.commit()
    assert await _claim(db, b, 5) == []
    await db.dispose()


async def test_a_background_response_is_taken_over_once_its_lease_expired(db_url):
    db = await _database(db_url)
    async with db.sessions() as session:
        session.add(StoredResponse(id="resp_1", model="m", status="queued", conversation=[], body={}, background=True))
        await session.commit()
    dead, alive = _policy("dead", lease_s=0.3), _policy("alive")
    async with db.sessions() as session:
        assert await claim(session, "resp_1", {"n": 1}, dead) and not await claim(session, "resp_1", {"n": 2}, alive)
        assert await renew_rows(session, StoredResponse, {"resp_1"}, alive, status="in_progress") == set()
        assert await renew_rows(session, StoredResponse, {"resp_1"}, dead, status="in_progress") == {"resp_1"}
        await session.commit()
        deadline = time.monotonic() + 10
        while not await claim(session, "resp_1", {"n": 2}, alive):  # the dead replica stopped renewing
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    async with db.sessions() as session:
        row = await session.get(StoredResponse, "resp_1")
        assert (row.owner, row.status, row.body) == ("alive", "in_progress", {"n": 2})
        # Finished, it is nobody's to claim, whatever its lease says.
        await session.execute(update(StoredResponse).values(status="completed", lease_expires_at=0))
        await session.commit()
        assert not await claim(session, "resp_1", {"n": 3}, dead)
    await db.dispose()
