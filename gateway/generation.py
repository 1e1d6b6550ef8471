"""One API request's work in the engine: admission, one engine request per prompt, the first
output awaited before answering (so bad input is a 400, not a broken stream), metrics, and abort
when the client goes away (cancelling an engine stream aborts it and frees its KV blocks)."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from fastapi import Request

from engine import AsyncEngine, RequestOutput, SamplingParams
from gateway.access_log import RequestRecord
from gateway.errors import ClientDisconnected
from gateway.state import ServerState

T = TypeVar("T")


async def _wait_for_disconnect(request: Request) -> None:
    # The body is already read, so the next ASGI message is the disconnect (or nothing, ever).
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Runs `work`, cancelling it as soon as the client disconnects."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()


def _first_error(group: BaseExceptionGroup) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]


async def _prepend(first: RequestOutput, rest: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
    yield first
    if not first.finished:
        async for out in rest:
            yield out


class Generation:
    def __init__(self, state: ServerState, engine: AsyncEngine, request: Request):
        self.state = state
        self.engine = engine
        self.request = request
        self.record: RequestRecord | None = getattr(request.state, "record", None)
        base = self.record.request_id if self.record else uuid.uuid4().hex
        # Engine ids must be unique even when a client reuses its x-request-id.
        self.engine_id = f"{base}-{uuid.uuid4().hex[:8]}"
        self._gens: list[AsyncIterator[RequestOutput]] = []
        self._streams: list[AsyncIterator[RequestOutput]] = []
        self._slot = None

    async def start(self, prompts: list[str | list[int]], params: SamplingParams) -> None:
        """Admits the request (429 past the queue bound) and waits for every prompt's first output."""
        self._slot = self.state.admission.acquire()
        try:
            self._streams = await unless_disconnected(self.request, self._open(prompts, params))
        except BaseException:
            self._slot.release()
            raise

    async def _open(self, prompts: list[str | list[int]], params: SamplingParams
                    ) -> list[AsyncIterator[RequestOutput]]:
        gens = [self.engine.generate(p, params, f"{self.engine_id}-{i}") for i, p in enumerate(prompts)]
        self._gens = gens
        try:
            # A failing prompt cancels its siblings; each cancelled engine stream aborts itself.
            async with asyncio.TaskGroup() as tg:
                firsts = [tg.create_task(anext(g)) for g in gens]
        except BaseExceptionGroup as group:
            raise _first_error(group) from None
        return [self._track(_prepend(t.result(), g)) for t, g in zip(firsts, gens, strict=True)]

    async def _track(self, stream: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
        last_token_time = None
        async for out in stream:
            self.state.metrics.observe_output(out, last_token_time)
            last_token_time = out.metrics.last_token_time
            if out.finished:
                self._log_usage(out)
            yield out

    def _log_usage(self, out: RequestOutput) -> None:
        r = self.record
        if r is None:
            return
        m = out.metrics
        r.prompt_tokens = (r.prompt_tokens or 0) + len(out.prompt_token_ids)
        r.completion_tokens = (r.completion_tokens or 0) + out.num_output_tokens
        r.cached_tokens = (r.cached_tokens or 0) + m.cached_tokens
        r.ttft = r.ttft if r.ttft is not None else m.ttft
        r.queue_time = r.queue_time if r.queue_time is not None else m.queue_time

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Every prompt's outputs as (prompt index, output), interleaved as they come."""
        try:
            if len(self._streams) == 1:
                async for out in self._streams[0]:
                    yield 0, out
                return
            async for item in _merge(self._streams):
                yield item
        finally:
            if self._slot is not None:
                self._slot.release()

    async def close(self) -> None:
        """Releases everything even if the answer was never read (a client gone before the first
        byte of a stream): the admission slot, and each engine request, which closing aborts."""
        if self._slot is not None:
            self._slot.release()
        for g in self._gens:
            try:
                await g.aclose()
            except RuntimeError:  # still being iterated by a task that is unwinding: it aborts itself
                pass

    async def finals(self) -> list[RequestOutput]:
        """Non-streaming: the last output of each prompt, aborted if the client disconnects."""

        async def drain() -> list[RequestOutput]:
            last: dict[int, RequestOutput] = {}
            async for i, out in self.outputs():
                last[i] = out
            return [last[i] for i in range(len(self._streams))]

        try:
            return await unless_disconnected(self.request, drain())
        finally:
            await self.close()


async def _merge(streams: list[AsyncIterator[RequestOutput]]) -> AsyncIterator[tuple[int, RequestOutput]]:
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(i: int, stream: AsyncIterator[RequestOutput]) -> None:
        try:
            async for out in stream:
                await queue.put((i, out))
            await queue.put((i, done))
        except Exception as exc:
            await queue.put((i, exc))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            i, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
