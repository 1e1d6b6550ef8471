"""How many job requests (batch lines, background responses, schedule runs) are in the engine at once.

Interactive requests no longer need protecting here: the engine runs them first by priority, and
preempts job sequences when they need the slots or KV blocks (engine/scheduler.py). What the engine
cannot do is bound how much job work it is handed: a 50,000-line batch would otherwise become
50,000 engine requests, each holding a task, its prompt's tokens and a place in a queue the scheduler
scans at every step, and a cancelled batch would have that many to abort. So a job takes a place
here before its request is sent, at most `job_concurrency` at once (enough to fill the batch slots
interactive work leaves free), and waiters are served by job priority (the engine priority their
kind maps to), then in arrival order, so a background response waits behind fewer batch lines."""

import asyncio
import heapq
import itertools


class JobGate:
    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.in_engine = 0
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()

    async def acquire(self, priority: int) -> None:
        """Waits for a place; `priority` as the engine's: lower first."""
        if self.in_engine < self.concurrency and not self._waiters:
            self.in_engine += 1
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted just as the waiter gave up: hand the place on
            else:
                self._waiters = [w for w in self._waiters if w[2] is not fut]
                heapq.heapify(self._waiters)
            raise

    def release(self) -> None:
        self.in_engine -= 1
        assert self.in_engine >= 0
        while self._waiters and self.in_engine < self.concurrency:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():  # skip waiters cancelled meanwhile
                self.in_engine += 1
                fut.set_result(None)

    async def close(self) -> None:
        for _, _, fut in self._waiters:
            fut.cancel()
        self._waiters = []
