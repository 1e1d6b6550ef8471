"""The job runner inside the server: runs batches and background responses through the engine, at
their kinds' priorities (gateway/limits/priority.py), a bounded number at once (JobGate), shared with any
other replica on the same database through leases (gateway/jobs/leases.py).

Each batch is a task that claims its free lines one at a time as places at the gate come free, and
runs each line as a task of its own; a line's result is recorded in its own transaction (unique per
(batch, line): exactly once, whichever replicas ran it). Replicas on one database work on the same
batch side by side. Every `job_scan_s` the runner looks for work nobody holds: batches with lines
never claimed or whose lease expired (their replica died), background responses likewise, batches
that only wait to be finalized; so work resumes after a restart, and a dead replica's work is taken
over once its leases expire. A heartbeat renews the leases of work under way, and notices work
cancelled through another replica. A line cut short (cancel, shutdown) records nothing and is
handed back at once; one cut by an engine failure keeps its lease until it expires, so a replica
whose engine works can take it over without this one retrying in a loop."""

import asyncio
import logging
import time

from sqlalchemy import select, update

from gateway.jobs import batches, leases, responses
from gateway.jobs.gate import JobGate
from gateway.jobs.webhooks import WebhookPolicy, WebhookSender
from gateway.limits import rate_limits
from gateway.limits.priority import run_as
from gateway.protocol.batches import BatchError
from gateway.security.tenancy import ADMIN_CALLER, REVOKED_CODE, Caller, revoked_owner
from gateway.state import ServerState
from gateway.tables.batches import Batch, BatchLine
from gateway.tables.responses import StoredResponse

log = logging.getLogger(__name__)


class BatchJob:
    def __init__(self, runner: "JobRunner", batch_id: str):
        self.runner = runner
        self.state = runner.state
        self.batch_id = batch_id
        self.cancelled = False
        self.engine_failed = False
        self.held: set[int] = set()  # lines this replica claimed and has not recorded
        self.caller: Caller = ADMIN_CALLER  # the batch's owner, whose lines these are (read in run())
        self.revoked: str | None = None  # why the owner's key may no longer run it (see _owner_gone)
        self._lines: set[asyncio.Task] = set()
        self._dispatcher: asyncio.Task | None = None

    async def run(self) -> None:
        async with self.state.db.sessions() as session:
            batch = await session.get(Batch, self.batch_id)
        if batch is None or batch.status in ("failed", "completed", "expired", "cancelled"):
            return
        self.caller = Caller.for_owner(batch.created_by)
        self.cancelled = self.cancelled or batch.status == "cancelling"
        try:
            if batch.status in ("in_progress", "validating") and not self.cancelled:
                self._dispatcher = asyncio.create_task(self._dispatch(batch.expires_at))
                await asyncio.wait([self._dispatcher])
            while self._lines:
                await asyncio.wait(set(self._lines))
            if self.engine_failed:
                log.warning("batch %s paused here: the engine is unavailable; its lines are free to any replica "
                            "once their leases expire", self.batch_id)
                self.held.clear()  # not handed back: see the module's note
                return
            await self._release()
            failure = None if self.revoked is None else BatchError(code=REVOKED_CODE, message=self.revoked)
            # None: lines are left that another replica holds; the last one to finish finalizes.
            if await batches.finalize(self.state, self.batch_id, self.runner.lease.owner, failure) is not None:
                self.runner.webhook_sender.wake.set()  # its webhook, if any, goes now rather than at the next poll
        finally:
            if self._dispatcher is not None:
                self._dispatcher.cancel()
            for t in self._lines:
                t.cancel()
            await asyncio.gather(*self._lines, *([self._dispatcher] if self._dispatcher else []),
                                 return_exceptions=True)
            await asyncio.shield(self._release())

    async def _release(self) -> None:
        if not self.held:
            return
        held, self.held = set(self.held), set()
        try:
            async with self.state.db.sessions() as session:
                await leases.release_lines(session, self.batch_id, held, self.runner.lease)
                await session.commit()
        except Exception:
            log.warning("batch %s: could not hand back %d lines; they are free when their leases expire",
                        self.batch_id, len(held), exc_info=True)

    def cancel(self) -> None:
        """The batch was cancelled: stop dispatching, abort running lines; run() then finalizes."""
        self.cancelled = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        for t in self._lines:
            t.cancel()

    async def _dispatch(self, expires_at: float | None) -> None:
        gate = self.runner.gate
        while not self.engine_failed and not self.cancelled:
            if expires_at is not None and time.time() > expires_at:
                return
            # A line is claimed only once it has a place at the gate: a replica holds no more lines
            # than it runs, and the others claim the rest of the batch meanwhile.
            await gate.acquire(self.state.settings.priority_batch)
            try:
                async with self.state.db.sessions() as session:
                    claimed = await leases.claim_lines(session, self.batch_id, self.runner.lease, 1)
            except BaseException:
                gate.release()
                raise
            if not claimed:
                gate.release()
                return
            line = claimed[0]
            self.held.add(line.line)
            if self.caller.key_id is not None:
                try:
                    gone = await self._owner_gone()
                except BaseException:
                    gate.release()
                    raise
                if gone:  # run() hands the line back and fails the batch
                    gate.release()
                    return
                if not await self._admit(expires_at):  # left without its place at the gate
                    return  # the key was revoked or the window closed while the line waited: run() finalizes
            task = asyncio.create_task(self._line(line), name=f"{self.batch_id}:{line.line}")
            self._lines.add(task)
            task.add_done_callback(self._line_done)

    async def _admit(self, expires_at: float | None) -> bool:
        """Counts the claimed line against its owner's rate limits (gateway/limits/rate_limits.py), as a
        request of its key: a key's batches run no faster than its requests may. While the key's
        window is spent the line waits for the next one, held (its lease renewed) but without its
        place at the gate, so other keys' work runs meanwhile. Entered holding a place at the gate,
        left holding it when True; False when the batch's completion window closed or its key was
        revoked meanwhile."""
        gate, priority = self.runner.gate, self.state.settings.priority_batch
        assert self.caller.key_id is not None
        placed = True
        try:
            while True:
                limit = await rate_limits.admit_job(self.state.db, self.state.settings, self.caller.key_id)
                if limit is None or limit.spent.admitted:
                    return True
                gate.release()
                placed = False
                wait = max(0.01, limit.reset_s)
                if expires_at is not None:
                    if time.time() > expires_at:
                        return False
                    wait = min(wait, expires_at - time.time() + 0.01)
                log.debug("batch %s: key %r is at its rate limit; the next line waits %.2fs", self.batch_id,
                          limit.key_name, wait)
                await asyncio.sleep(wait)
                if await self._owner_gone():  # revoked while the line waited for its window
                    return False
                await gate.acquire(priority)
                placed = True
        except BaseException:
            if placed:
                gate.release()
            raise

    async def _owner_gone(self) -> bool:
        """Whether the batch's key was revoked or deleted, read from the database now (on every
        replica, at every line's claim): a revoked key's lines stop running, and the batch fails."""
        async with self.state.db.sessions() as session:
            self.revoked = await revoked_owner(session, self.caller.owner)
        if self.revoked is not None:
            log.warning("batch %s: %s; its remaining lines are not run and the batch fails", self.batch_id,
                        self.revoked)
        return self.revoked is not None

    def _line_done(self, task: asyncio.Task) -> None:
        # A callback, not a `finally`: a task cancelled before its first step never runs its body.
        self._lines.discard(task)
        self.runner.gate.release()

    async def _line(self, line: BatchLine) -> None:
        run_as("batch")
        try:
            status, body = await batches.execute_line(self.state, line.url, line.body, self.caller)
            # Once the answer exists it is recorded, even if a cancel arrives meanwhile, and before
            # this task ends: the batch is finalized only after every line task has ended.
            record = asyncio.ensure_future(batches.record_result(self.state, self.batch_id, line, status, body,
                                                                 self.caller))
            try:
                await asyncio.shield(record)
            except asyncio.CancelledError:
                await record
                raise
            finally:
                if record.done() and not record.cancelled() and record.exception() is None:
                    self.held.discard(line.line)
        except batches.EngineUnavailable as exc:
            if not self.engine_failed:
                log.error("batch %s: %s", self.batch_id, exc)
            self.engine_failed = True
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s line %d failed outside its endpoint; it runs again once handed back",
                          self.batch_id, line.line)


class JobRunner:
    def __init__(self, state: ServerState):
        self.state = state
        s = state.settings
        self.lease = leases.LeasePolicy(owner=leases.replica_id(), lease_s=s.job_lease_s, scan_s=s.job_scan_s)
        self.gate = JobGate(s.job_concurrency)
        self.webhooks = WebhookPolicy(s)
        self.webhook_sender = WebhookSender(state, self.webhooks)
        self._batches: dict[str, BatchJob] = {}
        self._responses: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._ready = False
        self._main: asyncio.Task | None = None

    def start(self) -> None:
        self._main = asyncio.create_task(self._run(), name="sllm-jobs")

    async def _run(self) -> None:
        self._spawn(self.webhook_sender.run(), "sllm-webhooks")
        while self.state.models.loading:  # jobs wait for the models; they are rows meanwhile
            await asyncio.sleep(0.1)
        self._ready = True
        self._spawn(self._heartbeat(), "sllm-jobs-heartbeat")
        first = True
        while True:
            try:
                await self._scan(first)
                first = False
            except Exception:
                log.exception("the job scan failed; it runs again in %.1fs", self.lease.scan_s)
            await asyncio.sleep(self.lease.scan_s)

    async def _scan(self, first: bool) -> None:
        """Submits what no replica holds: batches not finished (a batch fully held elsewhere costs
        a claim that finds nothing), and free background responses."""
        now = time.time()
        async with self.state.db.sessions() as session:
            batch_ids = (await session.scalars(
                select(Batch.id).where(Batch.status.in_(("validating", "in_progress", "finalizing", "cancelling")))
                .order_by(Batch.created_at))).all()
            response_ids = (await session.scalars(
                select(StoredResponse.id).where(StoredResponse.status.in_(responses.ACTIVE),
                                                StoredResponse.background.is_(True),
                                                leases.free(StoredResponse, now))
                .order_by(StoredResponse.created_at))).all()
        batch_ids = [b for b in batch_ids if b not in self._batches]
        response_ids = [r for r in response_ids if r not in self._responses]
        if first and (batch_ids or response_ids):
            log.info("resuming %d batches and %d background responses", len(batch_ids), len(response_ids))
        for response_id in response_ids:
            self.submit_response(response_id)
        for batch_id in batch_ids:
            self.submit_batch(batch_id)

    async def _heartbeat(self) -> None:
        """Renews the leases of the work under way here; stops work cancelled through another replica."""
        while True:
            await asyncio.sleep(self.lease.renew_s)
            try:
                await self._renew()
            except Exception:
                log.exception("renewing job leases failed; it is tried again in %.1fs", self.lease.renew_s)

    async def _renew(self) -> None:
        async with self.state.db.sessions() as session:
            for batch_id, job in list(self._batches.items()):
                held = set(job.held)
                kept = await leases.renew_lines(session, batch_id, held, self.lease)
                if kept < len(held):
                    log.warning("batch %s: %d of %d lines held here were taken over by another replica",
                                batch_id, len(held) - kept, len(held))
            running = set(self._responses)
            kept_responses = await leases.renew_rows(session, StoredResponse, running, self.lease,
                                                     status="in_progress")
            statuses = dict((await session.execute(
                select(Batch.id, Batch.status).where(Batch.id.in_(list(self._batches))))).all()
            ) if self._batches else {}
            await session.commit()
        for batch_id, status in statuses.items():
            if status == "cancelling" and (job := self._batches.get(batch_id)) is not None and not job.cancelled:
                job.cancel()
        async with self.state.db.sessions() as session:
            # Responses that left `in_progress` elsewhere (cancelled through another replica).
            gone = (await session.scalars(select(StoredResponse.id).where(
                StoredResponse.id.in_(list(running - kept_responses)),
                StoredResponse.status.not_in(responses.ACTIVE)))).all() if running - kept_responses else []
        for response_id in gone:
            self.cancel_response(response_id)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("job task %s failed", task.get_name(), exc_info=task.exception())

    # -- what routes call ----------------------------------------------------------------------------
    def submit_batch(self, batch_id: str) -> None:
        """Runs (or finalizes) a batch; before the engine is ready, the start-up scan will."""
        if not self._ready or batch_id in self._batches:
            return
        job = BatchJob(self, batch_id)
        self._batches[batch_id] = job

        async def run() -> None:
            try:
                await job.run()
            finally:
                self._batches.pop(batch_id, None)

        self._spawn(run(), f"batch:{batch_id}")

    def cancel_batch(self, batch_id: str) -> None:
        job = self._batches.get(batch_id)
        if job is not None:
            job.cancel()
        else:
            self.submit_batch(batch_id)  # not running here: finalize it as cancelled

    def submit_response(self, response_id: str) -> None:
        if not self._ready or response_id in self._responses:
            return

        async def run() -> None:
            run_as("background")
            try:
                await self.gate.acquire(self.state.settings.priority_background)
                try:
                    await responses.run_background(self.state, response_id, self.lease)
                finally:
                    self.gate.release()
                self.webhook_sender.wake.set()
            finally:
                self._responses.pop(response_id, None)

        self._responses[response_id] = self._spawn(run(), f"response:{response_id}")

    def cancel_response(self, response_id: str) -> None:
        task = self._responses.get(response_id)
        if task is not None:
            task.cancel()

    async def stop(self) -> None:
        """Cancels every job task; what was cut short is handed back, for this or another replica."""
        for task in [self._main, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*[t for t in [self._main, *self._tasks] if t is not None], return_exceptions=True)
        await self.gate.close()
        try:  # responses cut short are handed back now rather than when their leases expire
            async with self.state.db.sessions() as session:
                await session.execute(update(StoredResponse).where(
                    StoredResponse.owner == self.lease.owner, StoredResponse.status == "in_progress")
                    .values(owner=None, lease_expires_at=None))
                await session.commit()
        except Exception:
            log.warning("could not hand back the background responses under way; they are free when their "
                        "leases expire", exc_info=True)
