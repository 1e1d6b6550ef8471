"""The scheduler on its own (no model, no HTTP): schedules are rows that survive a restart, a due
time missed while the server was down runs once and not once per missed time, a run cut short by a
stop is marked interrupted (once its lease expired) and not run again, and a due time is claimed
once even by two schedulers; on SQLite and on a real PostgreSQL server."""

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from sqlalchemy import select

import gateway.scheduler as scheduling
from gateway.db import Database
from gateway.jobs.leases import LeasePolicy, replica_id
from gateway.scheduler import Scheduler, check_cron, next_after
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
               lease: LeasePolicy | None = None) -> Scheduler:
    async def run(schedule: Text2SQLSchedule):
        calls.append(schedule.id)
        if block is not None:
            await block.wait()
        return "completed", {"sql": "SELECT 1"}, None

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


async def test_a_run_cut_by_a_stop_is_interrupted_not_rerun(db_url, clock):
    db = await _database(db_url)
    await _schedule(db)
    calls: list[str] = []
    lease = LeasePolicy(replica_id(), lease_s=0.5, scan_s=0.1)
    blocked = _scheduler(db, calls, block=asyncio.Event(), lease=lease)
    clock.t = T0 + HOUR
    assert len(await blocked.run_due()) == 1
    await asyncio.sleep(0)
    await blocked.renew()
    await blocked.stop()  # the server dies mid-run: its lease is left to expire
    (run,) = await _runs(db)
    assert run.status == "running" and run.owner == lease.owner

    restarted = _scheduler(db, calls)
    # While the lease lasts, the run may be another replica's live one: it is left alone.
    assert await restarted.recover() == 0 and run.lease_expires_at > time.time()
    deadline = time.monotonic() + 10
    while (recovered := await restarted.recover()) == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert recovered == 1
    assert await restarted.run_due() == []  # its due time was claimed; the next one is an hour away
    (run,) = await _runs(db)
    assert run.status == "failed" and run.error["code"] == "interrupted"
    await db.dispose()


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
