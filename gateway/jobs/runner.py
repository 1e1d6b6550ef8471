"""The job runner inside the server: runs batches and background responses through the engine, at
their kinds' priorities (gateway/priority.py), a bounded number at once (JobGate), and resumes
whatever was queued or running when the server last stopped, however it stopped.

Each batch is a task that walks its unrecorded lines in file order, takes a place at the gate for
each, and runs it as a task of its own; a line's result is recorded in its own transaction, so a
restart re-runs only lines without a result. A line cut short (cancel, shutdown, engine failure)
records nothing. One runner per database: two servers on one database would run the same lines
twice (each result would still be recorded once)."""

import asyncio
import logging
import time

from sqlalchemy import select

from gateway.jobs import batches, responses
from gateway.jobs.gate import JobGate
from gateway.jobs.webhooks import WebhookPolicy, WebhookSender
from gateway.priority import run_as
from gateway.state import ServerState
from gateway.tables.batches import Batch, BatchLine
from gateway.tables.responses import StoredResponse

log = logging.getLogger(__name__)

_PAGE = 256


class BatchJob:
    def __init__(self, runner: "JobRunner", batch_id: str):
        self.runner = runner
        self.state = runner.state
        self.batch_id = batch_id
        self.cancelled = False
        self.engine_failed = False
        self._lines: set[asyncio.Task] = set()
        self._dispatcher: asyncio.Task | None = None

    async def run(self) -> None:
        async with self.state.db.sessions() as session:
            batch = await session.get(Batch, self.batch_id)
        if batch is None or batch.status in ("failed", "completed", "expired", "cancelled"):
            return
        self.cancelled = self.cancelled or batch.status == "cancelling"
        try:
            if batch.status in ("in_progress", "validating") and not self.cancelled:
                self._dispatcher = asyncio.create_task(self._dispatch(batch.expires_at))
                await asyncio.wait([self._dispatcher])
            while self._lines:
                await asyncio.wait(set(self._lines))
            if self.engine_failed:
                log.warning("batch %s paused: the engine is unavailable; it resumes at the next start", self.batch_id)
                return
            await batches.finalize(self.state, self.batch_id)
            self.runner.webhook_sender.wake.set()  # its webhook, if any, goes now rather than at the next poll
        finally:
            if self._dispatcher is not None:
                self._dispatcher.cancel()
            for t in self._lines:
                t.cancel()
            await asyncio.gather(*self._lines, *([self._dispatcher] if self._dispatcher else []),
                                 return_exceptions=True)

    def cancel(self) -> None:
        """The batch was cancelled: stop dispatching, abort running lines; run() then finalizes."""
        self.cancelled = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        for t in self._lines:
            t.cancel()

    async def _dispatch(self, expires_at: float | None) -> None:
        after = 0
        gate = self.runner.gate
        while not self.engine_failed:
            page = await batches.pending_lines(self.state, self.batch_id, after, _PAGE)
            if not page:
                return
            for line in page:
                after = line.line
                if self.engine_failed or (expires_at is not None and time.time() > expires_at):
                    return
                await gate.acquire(self.state.settings.priority_batch)
                task = asyncio.create_task(self._line(line), name=f"{self.batch_id}:{line.line}")
                self._lines.add(task)
                task.add_done_callback(self._line_done)

    def _line_done(self, task: asyncio.Task) -> None:
        # A callback, not a `finally`: a task cancelled before its first step never runs its body.
        self._lines.discard(task)
        self.runner.gate.release()

    async def _line(self, line: BatchLine) -> None:
        run_as("batch")
        try:
            status, body = await batches.execute_line(self.state, line.url, line.body)
            # Once the answer exists it is recorded, even if a cancel arrives meanwhile, and before
            # this task ends: the batch is finalized only after every line task has ended.
            record = asyncio.ensure_future(batches.record_result(self.state, self.batch_id, line, status, body))
            try:
                await asyncio.shield(record)
            except asyncio.CancelledError:
                await record
                raise
        except batches.EngineUnavailable as exc:
            if not self.engine_failed:
                log.error("batch %s: %s", self.batch_id, exc)
            self.engine_failed = True
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s line %d failed outside its endpoint; it runs again at the next start",
                          self.batch_id, line.line)


class JobRunner:
    def __init__(self, state: ServerState):
        self.state = state
        s = state.settings
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
        await self._resume()

    async def _resume(self) -> None:
        async with self.state.db.sessions() as session:
            batch_ids = (await session.scalars(
                select(Batch.id).where(Batch.status.in_(("validating", "in_progress", "finalizing", "cancelling")))
                .order_by(Batch.created_at))).all()
            response_ids = (await session.scalars(
                select(StoredResponse.id).where(StoredResponse.status.in_(("queued", "in_progress")),
                                                StoredResponse.background.is_(True))
                .order_by(StoredResponse.created_at))).all()
        if batch_ids or response_ids:
            log.info("resuming %d batches and %d background responses", len(batch_ids), len(response_ids))
        for response_id in response_ids:
            self.submit_response(response_id)
        for batch_id in batch_ids:
            self.submit_batch(batch_id)

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
                    await responses.run_background(self.state, response_id)
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
        """Cancels every job task; what was cut short runs again at the next start."""
        for task in [self._main, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*[t for t in [self._main, *self._tasks] if t is not None], return_exceptions=True)
        await self.gate.close()
