"""The scheduler on its own (no model, no HTTP): schedules are rows that survive a restart, a due
time missed while the server was down runs once and not once per missed time, a run cut short by a
stop is taken over once its lease expired and run again once (by one of two replicas), one cut
short twice is marked interrupted, and a due time is claimed once even by two schedulers; on
SQLite and on a real PostgreSQL server."""

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import select

import gateway.jobs.schedules as scheduling
from gateway.db import Database
from gateway.jobs.leases import LeasePolicy, replica_id
from gateway.jobs.schedules import Scheduler, check_cron, next_after
from gateway.tables.text2sql import Text2SQLRun, Text2SQLSchedule

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock(T0)
    monkeypatch.setattr(scheduling, "now", c)
    return c


async def _database(db_url: str) -> Database:
    db = Database(db_url)
    await db.create_all()
    return db


def _scheduler(db: Database, calls: list[str], block: asyncio.Event | None = None,
               lease: LeasePolicy | None = None, sql: str = "SELECT 1") -> Scheduler:
    async def run(schedule: Text2SQLSchedule):
        calls.append(schedule.id)
        if block is not None:
            await block.wait()
        return "completed", {"sql": sql}, None

    return Scheduler(SimpleNamespace(db=db, engine=object(), load_error=None, jobs=None), run, lease)


async def _runs(db: Database) -> list[Text2SQLRun]:
    async with db.sessions() as session:
        return list((await session.scalars(select(Text2SQLRun).order_by(Text2SQLRun.scheduled_for))).all())


async def _schedule(db: Database, cron: str = "0 * * * *") -> Text2SQLSchedule:
    async with db.sessions() as session:
        row = Text2SQLSchedule(id="t2ssched_1", created_at=T0, cron=cron, source="demo_shop", question="q",
                               next_run_at=next_after(cron, T0))
        session.add(row)
        await session.commit()
    return row


def test_cron_checks():
    assert check_cron("*/5 * * * *") is None and check_cron("@daily") is None
    assert "five-field" in check_cron("* * *") and check_cron("61 * * * *")
    assert next_after("0 * * * *", T0) == T0 + HOUR  # strictly after


async def test_missed_times_while_down_run_once_after_a_restart(db_url, clock):
    db = await _database(db_url)
    await _schedule(db)
    calls: list[str] = []
    first = _scheduler(db, calls)
    clock.t = T0 + HOUR + 1
    assert len(await first.run_due()) == 1
    await first.wait_idle()
    await db.dispose()

    # The server is down for five hours; a new process opens the same database.
    clock.t = T0 + 6 * HOUR + 30
    db = await _database(db_url)
    second = _scheduler(db, calls)
    assert await second.recover() == 0
    assert len(await second.run_due()) == 1  # one run for the five missed hours
    await second.wait_idle()
    assert await second.run_due() == []
    runs = await _runs(db)
    assert [r.scheduled_for for r in runs] == [T0 + HOUR, T0 + 2 * HOUR]
    assert all(r.status == "completed" and r.result == {"sql": "SELECT 1"} for r in runs)
    async with db.sessions() as session:
        row = await session.get(Text2SQLSchedule, "t2ssched_1")
    assert row.next_run_at == T0 + 7 * HOUR and row.last_run_at == clock.t  # the next time after now
    assert calls == ["t2ssched_1", "t2ssched_1"]
    await db.dispose()


async def _cut_short(db: Database, calls: list[str], lease_s: float = 0.5) -> Scheduler:
    """A scheduler whose runs block until it dies (stop() with runs under way, leases left to expire)."""
    return _scheduler(db, calls, block=asyncio.Event(), lease=LeasePolicy(replica_id(), lease_s=lease_s, scan_s=0.1))


async def _recover_when_expired(*schedulers: Scheduler) -> list[int]:
    """Each scheduler recovers at once, again until one of them found the expired run."""
    deadline = time.monotonic() + 10
    while sum(found := await asyncio.gather(*(s.recover() for s in schedulers))) == 0:
        assert time.monotonic() < deadline, "the run's lease never expired"
        await asyncio.sleep(0.05)
    return list(found)


async def test_a_run_cut_by_a_stop_is_run_again_once_by_another_replica(db_url, clock):
    db = await _database(db_url)
    await _schedule(db)
    calls: list[str] = []
    dying = await _cut_short(db, calls)
    clock.t = T0 + HOUR
    assert len(await dying.run_due()) == 1
    await asyncio.sleep(0)
    await dying.renew()
    await dying.stop()  # the server dies mid-run: its lease is left to expire
    (run,) = await _runs(db)
    assert run.status == "running" and run.owner == dying.lease.owner and run.attempts == 1

    a, b = _scheduler(db, calls), _scheduler(db, calls)
    # While the lease lasts, the run may be another replica's live one: it is left alone.
    assert await a.recover() == 0 and run.lease_expires_at > time.time()
    assert sorted(await _recover_when_expired(a, b)) == [0, 1]  # one of the two takes it over
    await a.wait_idle()
    await b.wait_idle()
    assert await a.run_due() == [] and await b.run_due() == []  # its due time was claimed once
    (again,) = await _runs(db)
    assert (again.id, again.scheduled_for, again.status, again.attempts) == (run.id, run.scheduled_for, "completed", 2)
    assert again.owner in (a.lease.owner, b.lease.owner) and again.result == {"sql": "SELECT 1"}
    assert calls == ["t2ssched_1", "t2ssched_1"]  # the first try, and the one re-run
    await db.dispose()


async def test_a_run_cut_short_twice_is_interrupted_and_a_late_result_is_dropped(db_url, clock):
    db = await _database(db_url)
    await _schedule(db)
    calls: list[str] = []
    first = await _cut_short(db, calls)
    clock.t = T0 + HOUR
    assert len(await first.run_due()) == 1
    await asyncio.sleep(0)
    await first.stop()
    second = await _cut_short(db, calls)
    assert await _recover_when_expired(second) == [1]
    await asyncio.sleep(0)
    await second.stop()  # the takeover dies too

    third = _scheduler(db, calls)
    assert await _recover_when_expired(third) == [1]
    await third.wait_idle()
    (run,) = await _runs(db)
    assert (run.status, run.attempts, run.error["code"]) == ("failed", 2, "interrupted")
    assert calls == ["t2ssched_1", "t2ssched_1"]  # not a third time

    # A replica that was only slow (it missed its heartbeats, so another took its run over) keeps
    # nothing of its own when it finishes after all: the run is the other's to end.
    clock.t = T0 + 2 * HOUR
    release = asyncio.Event()
    slow = _scheduler(db, calls, block=release, lease=LeasePolicy(replica_id(), lease_s=0.5, scan_s=0.1),
                      sql="SELECT 'slow'")
    (late_id,) = await slow.run_due()
    other = _scheduler(db, calls)
    assert await _recover_when_expired(other) == [1]
    await other.wait_idle()
    release.set()
    await slow.wait_idle()
    late = (await _runs(db))[-1]
    assert (late.id, late.status, late.owner, late.result) == (late_id, "completed", other.lease.owner,
                                                               {"sql": "SELECT 1"})
    await db.dispose()


async def _schedule_row(db: Database) -> Text2SQLSchedule:
    async with db.sessions() as session:
        return await session.get(Text2SQLSchedule, "t2ssched_1")


async def test_two_schedulers_claim_a_due_time_once(db_url, clock):
    db = await _database(db_url)
    await _schedule(db)
    calls: list[str] = []
    a, b = _scheduler(db, calls), _scheduler(db, calls)
    clock.t = T0 + HOUR
    started = await asyncio.gather(a.run_due(), b.run_due())
    await a.wait_idle()
    await b.wait_idle()
    assert sum(len(s) for s in started) == 1 and calls == ["t2ssched_1"]
    assert len(await _runs(db)) == 1
    await db.dispose()
