"""Admission for job work, below interactive requests.

The engine schedules every request alike, so priority lives here: a job's request (a batch line, a
background response) enters the engine only through this gate, which holds at most
`job_concurrency` of them there at once, and only `job_concurrency_busy` while any interactive
request is in flight (or was within `job_quiet_s`, so a conversation's next turn finds the engine
still quiet). A job request also waits while anything waits in the engine's queue, so an interactive
request never queues behind more than one job prompt to prefill (the engine's queue is FIFO), and
while the KV cache is nearly full, so it never makes an interactive request queue for blocks.
Waiters are served by priority (background responses before batch lines), then in arrival order."""

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

# Above this share of KV blocks in use, no new job request starts.
KV_HIGH_WATER = 0.9

PRIORITY_RESPONSE = 0
PRIORITY_BATCH = 1


class JobGate:
    def __init__(self, interactive_in_flight: Callable[[], int], engine_stats: Callable[[], dict[str, Any] | None],
                 concurrency: int, concurrency_busy: int, quiet_s: float, poll_s: float = 0.01):
        self._interactive = interactive_in_flight
        self._stats = engine_stats
        self.concurrency = concurrency
        self.concurrency_busy = min(concurrency_busy, concurrency)
        self.quiet_s = quiet_s
        self.poll_s = poll_s
        self.in_engine = 0
        self._last_interactive = -float("inf")
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()
        self._changed = asyncio.Event()
        self._pump: asyncio.Task | None = None

    def limit(self) -> int:
        """How many job requests may be in the engine right now."""
        now = time.monotonic()
        if self._interactive() > 0:
            self._last_interactive = now
        if now - self._last_interactive < self.quiet_s:
            return self.concurrency_busy
        return self.concurrency

    def _engine_has_room(self) -> bool:
        try:
            stats = self._stats()
        except RuntimeError:  # read while the engine's thread changed its queues: look again next poll
            return False
        if stats is None:
            return True
        return stats.get("num_waiting", 0) == 0 and stats.get("kv_usage", 0.0) < KV_HIGH_WATER

    async def acquire(self, priority: int = PRIORITY_BATCH) -> None:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), fut))
        self._ensure_pump()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted just as the waiter gave up: hand the place back
            else:
                self._waiters = [w for w in self._waiters if w[2] is not fut]
                heapq.heapify(self._waiters)
            raise

    def release(self) -> None:
        self.in_engine -= 1
        assert self.in_engine >= 0
        self._changed.set()

    def _ensure_pump(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run_pump(), name="sllm-job-gate")
        self._changed.set()

    async def _run_pump(self) -> None:
        """Grants places while there are waiters; re-checks the interactive load every poll_s."""
        while self._waiters:
            while self._waiters and self._waiters[0][2].done():  # cancelled waiters
                heapq.heappop(self._waiters)
            if self._waiters and self.in_engine < self.limit() and self._engine_has_room():
                _, _, fut = heapq.heappop(self._waiters)
                self.in_engine += 1
                fut.set_result(None)
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=self.poll_s)
            except TimeoutError:
                pass

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
