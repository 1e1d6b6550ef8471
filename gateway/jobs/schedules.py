"""The scheduler inside the server: text-to-SQL questions asked on a cron, each run stored.

A schedule stores `next_run_at`. Every tick the scheduler claims the schedules due by `now()`:
in one transaction it moves `next_run_at` to the cron's next time after now and adds a `running`
run for the due time it claimed. So:
- a schedule whose time passed while the server was down runs once at the next start, not once
  per missed time, and then waits for its next time after now;
- a due time runs at most once, whatever restarts and races (the update checks the old
  `next_run_at`, and the run table has a unique (schedule, due time) constraint);
- a run cut short (a stop, a crash) is run again once: it holds a lease (gateway/jobs/leases.py)
  that its replica renews while it runs; once the lease has expired, one replica's scheduler takes
  the same run row over (a claim that only takes free rows) and runs it again for the same due
  time; a run cut short a second time is marked failed ("interrupted"). A live replica's runs are
  never mistaken for a dead one's, and a run's end is written only by the replica holding it, so
  one due time has one result even if a slow replica finishes after a takeover.
Runs go through the job gate and run at `priority_schedule` (below interactive requests), then
POST their result to the schedule's webhook through the jobs' webhook sender (signed, retried,
deliveries are rows).

Cron expressions are evaluated in UTC. `now()` is the clock: tests fast-forward it by patching
`gateway.jobs.schedules.now` (leases keep real time). Every replica on a database runs a scheduler;
the claim above makes each due time run on one of them."""

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from croniter import croniter
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from gateway.jobs.leases import LeasePolicy, free, renew_rows, replica_id
from gateway.security.tenancy import REVOKED_CODE, Caller, revoked_owner
from gateway.state import ServerState
from gateway.tables.text2sql import Text2SQLRun, Text2SQLSchedule

log = logging.getLogger(__name__)

TICK_S = 1.0  # the longest the scheduler sleeps before it looks at the clock again
MAX_ATTEMPTS = 2  # a run, and one takeover after its replica died

RunSchedule = Callable[[Text2SQLSchedule], Awaitable[tuple[str, dict | None, dict | None]]]


def now() -> float:
    """The scheduler's clock (Unix seconds); patched by tests to fast-forward time."""
    return time.time()


def check_cron(expr: str) -> str | None:
    """Why `expr` is not a cron expression we take, or None: five fields (minute hour day month
    weekday) or a macro such as @hourly, @daily."""
    expr = expr.strip()
    fields = expr.split()
    if not (len(fields) == 5 or (len(fields) == 1 and expr.startswith("@"))):
        return f"{expr!r} is not a five-field cron expression (minute hour day-of-month month day-of-week)"
    if not croniter.is_valid(expr):
        return f"{expr!r} is not a valid cron expression"
    return None


def next_after(expr: str, t: float) -> float:
    """The first time the cron matches strictly after `t`."""
    return croniter(expr.strip(), datetime.fromtimestamp(t, UTC)).get_next(datetime).timestamp()


class Scheduler:
    def __init__(self, state: ServerState, run: RunSchedule, lease: LeasePolicy | None = None):
        self.state = state
        self.run = run
        self._lease = lease
        self._wake = asyncio.Event()
        self._main: asyncio.Task | None = None
        self._runs: set[asyncio.Task] = set()
        self._running: set[str] = set()  # ids of the runs under way here, whose leases the loop renews

    @property
    def lease(self) -> LeasePolicy:
        """The job runner's (one owner name per replica), looked up late: it may start after us."""
        if self._lease is None:
            jobs = getattr(self.state, "jobs", None)
            self._lease = jobs.lease if jobs is not None else LeasePolicy(replica_id(), 15.0, 2.0)
        return self._lease

    def start(self) -> None:
        self._main = asyncio.create_task(self._loop(), name="sllm-text2sql-scheduler")

    def wake(self) -> None:
        """Looks at the schedules now (one was added or changed)."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in [self._main, *self._runs] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        while self.state.models.loading:  # runs need the models; schedules are rows meanwhile
            await asyncio.sleep(0.1)
        await self.recover()
        recovered = renewed = time.monotonic()
        while True:
            self._wake.clear()
            try:
                if time.monotonic() - renewed >= self.lease.renew_s:
                    await self.renew()
                    renewed = time.monotonic()
                if time.monotonic() - recovered >= self.lease.scan_s:
                    await self.recover()  # runs of a replica that died meanwhile
                    recovered = time.monotonic()
                await self.run_due()
                wait = await self._seconds_to_next()
            except Exception:
                log.exception("the text-to-SQL scheduler failed a tick; it tries again")
                wait = TICK_S
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.01, wait))
            except TimeoutError:
                pass

    async def _seconds_to_next(self) -> float:
        async with self.state.db.sessions() as session:
            soonest = await session.scalar(select(func.min(Text2SQLSchedule.next_run_at)).where(
                Text2SQLSchedule.disabled_reason.is_(None)))
        return TICK_S if soonest is None else min(TICK_S, soonest - now())

    async def renew(self) -> None:
        """Extends the leases of the runs under way here."""
        async with self.state.db.sessions() as session:
            await renew_rows(session, Text2SQLRun, set(self._running), self.lease, status="running")
            await session.commit()

    async def recover(self) -> int:
        """Takes over the runs left `running` by a stopped replica (their leases expired) and runs
        each again here, or marks it failed where it was cut short twice; returns how many."""
        t = time.time()
        abandoned = (Text2SQLRun.status == "running", free(Text2SQLRun, t))
        async with self.state.db.sessions() as session:
            failed = await session.execute(update(Text2SQLRun).where(
                *abandoned, Text2SQLRun.attempts >= MAX_ATTEMPTS).values(
                status="failed", finished_at=now(), lease_expires_at=None,
                error={"code": "interrupted", "message": "the server stopped during this run twice; it is not run "
                                                         "again"}).execution_options(synchronize_session=False))
            # Replicas recovering at once skip each other's locked rows (PostgreSQL); the update
            # checks the lease again, so a run is taken by one of them.
            ids = (await session.scalars(select(Text2SQLRun.id).where(*abandoned)
                                         .with_for_update(skip_locked=True))).all()
            taken = (await session.execute(update(Text2SQLRun).where(Text2SQLRun.id.in_(ids), *abandoned).values(
                owner=self.lease.owner, lease_expires_at=t + self.lease.lease_s, started_at=now(),
                attempts=Text2SQLRun.attempts + 1).returning(Text2SQLRun.id, Text2SQLRun.schedule_id)
                .execution_options(synchronize_session=False))).all() if ids else []
            schedules = {row.id: row for row in (await session.scalars(select(Text2SQLSchedule).where(
                Text2SQLSchedule.id.in_({schedule_id for _, schedule_id in taken})))).all()} if taken else {}
            await session.commit()
        if failed.rowcount:
            log.warning("%d scheduled text-to-SQL runs were interrupted twice: marked failed", failed.rowcount)
        for run_id, schedule_id in taken:
            log.warning("text-to-SQL run %s was interrupted (its replica stopped): running it again", run_id)
            self._start(run_id, schedules[schedule_id])
        return failed.rowcount + len(taken)

    async def run_due(self) -> list[str]:
        """Claims every schedule due by now() and starts its run; returns the new runs' ids."""
        t = now()
        async with self.state.db.sessions() as session:
            due = (await session.scalars(select(Text2SQLSchedule).where(
                Text2SQLSchedule.next_run_at <= t, Text2SQLSchedule.disabled_reason.is_(None))
                .order_by(Text2SQLSchedule.next_run_at))).all()
        started = []
        for schedule in due:
            run_id = await self._claim(schedule, t)
            if run_id is not None:
                started.append(run_id)
                self._start(run_id, schedule)
        return started

    def _start(self, run_id: str, schedule: Text2SQLSchedule) -> None:
        self._running.add(run_id)
        task = asyncio.create_task(self._execute(run_id, schedule), name=f"text2sql-run:{run_id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def _claim(self, schedule: Text2SQLSchedule, t: float) -> str | None:
        run = Text2SQLRun(id=f"t2srun_{uuid.uuid4().hex}", schedule_id=schedule.id,
                          scheduled_for=schedule.next_run_at, started_at=t, status="running",
                          owner=self.lease.owner, lease_expires_at=time.time() + self.lease.lease_s)
        async with self.state.db.sessions() as session:
            moved = await session.execute(update(Text2SQLSchedule).where(
                Text2SQLSchedule.id == schedule.id, Text2SQLSchedule.next_run_at == schedule.next_run_at,
            ).values(next_run_at=next_after(schedule.cron, t), last_run_at=t))
            if not moved.rowcount:  # deleted, or claimed by someone else meanwhile
                return None
            session.add(run)
            try:
                await session.commit()
            except IntegrityError:
                return None
        log.info("text-to-SQL schedule %s: run %s for %s", schedule.id, run.id,
                 datetime.fromtimestamp(run.scheduled_for, UTC).isoformat())
        return run.id

    async def wait_idle(self) -> None:
        """Waits for the runs under way (tests)."""
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)

    async def _execute(self, run_id: str, schedule: Text2SQLSchedule) -> None:
        from gateway.limits.priority import run_as

        run_as("schedule")
        try:
            await self._execute_claimed(run_id, schedule)
        finally:
            self._running.discard(run_id)

    async def _execute_claimed(self, run_id: str, schedule: Text2SQLSchedule) -> None:
        if Caller.for_owner(schedule.created_by).key_id is not None:  # an admin's schedule costs no query
            async with self.state.db.sessions() as session:
                revoked = await revoked_owner(session, schedule.created_by)
            if revoked is not None:
                await self._disable(run_id, schedule, revoked)
                return
        gate = self.state.jobs.gate if self.state.jobs is not None else None
        if gate is not None:
            await gate.acquire(self.state.settings.priority_schedule)
        try:
            status, result, error = await self.run(schedule)
        except asyncio.CancelledError:
            raise  # stopped: once its lease expired, a replica (this one restarted, or another) runs it again
        except Exception as exc:
            log.exception("scheduled run %s failed", run_id)
            status, result, error = "failed", None, {"code": "internal_error", "message": str(exc)}
        finally:
            if gate is not None:
                gate.release()
        async with self.state.db.sessions() as session:
            # Only while this replica still holds it: one taken over meanwhile is the other's to end.
            ended = await session.execute(update(Text2SQLRun).where(
                Text2SQLRun.id == run_id, Text2SQLRun.owner == self.lease.owner, Text2SQLRun.status == "running",
            ).values(status=status, result=result, error=error, finished_at=now(), lease_expires_at=None))
            if not ended.rowcount:
                log.warning("text-to-SQL run %s was taken over by another replica: its result here is dropped", run_id)
                return
            if schedule.webhook_url:
                self._notify(session, schedule, run_id, status, result, error)
            await session.commit()
        if schedule.webhook_url and self.state.jobs is not None:
            self.state.jobs.webhook_sender.wake.set()

    async def _disable(self, run_id: str, schedule: Text2SQLSchedule, revoked: str) -> None:
        """The schedule's key was revoked (read from the database at the run's claim, on whichever
        replica claimed it): the run is recorded failed without asking anything, and the schedule
        stops, in one transaction. Its owner's data is not queried as a key that no longer may."""
        log.warning("text-to-SQL schedule %s disabled: %s", schedule.id, revoked)
        error = {"code": REVOKED_CODE, "message": f"This run was not run and its schedule is disabled: {revoked}."}
        async with self.state.db.sessions() as session:
            ended = await session.execute(update(Text2SQLRun).where(
                Text2SQLRun.id == run_id, Text2SQLRun.owner == self.lease.owner, Text2SQLRun.status == "running",
            ).values(status="failed", error=error, finished_at=now(), lease_expires_at=None))
            await session.execute(update(Text2SQLSchedule).where(Text2SQLSchedule.id == schedule.id)
                                  .values(disabled_reason=revoked))
            if ended.rowcount and schedule.webhook_url:
                self._notify(session, schedule, run_id, "failed", None, error)
            await session.commit()
        if ended.rowcount and schedule.webhook_url and self.state.jobs is not None:
            self.state.jobs.webhook_sender.wake.set()

    @staticmethod
    def _notify(session, schedule: Text2SQLSchedule, run_id: str, status: str, result: dict | None,
                error: dict | None) -> None:
        """Queues the webhook in the run's own transaction: a finished run never forgets to tell."""
        from gateway.tables.webhooks import WebhookDelivery

        event_id = f"evt_{uuid.uuid4().hex}"
        payload = {"id": event_id, "object": "event", "created_at": int(time.time()),
                   "type": f"text2sql.run.{status}",
                   "data": {"id": run_id, "schedule_id": schedule.id, "status": status, "result": result,
                            "error": error}}
        session.add(WebhookDelivery(id=event_id, url=schedule.webhook_url, payload=json.dumps(payload)))
