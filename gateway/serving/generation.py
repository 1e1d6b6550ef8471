"""One API request's work in the engine: admission, the engine's input check, one engine request
per prompt, metrics, and abort when the client goes away (cancelling an engine stream aborts it and
frees its KV blocks)."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from fastapi import Request

from engine import AsyncEngine, RequestOutput, SamplingParams
from gateway.limits.priority import fairness_key, priority_of
from gateway.state import ServerState
from gateway.web.access_log import RequestRecord
from gateway.web.errors import ClientDisconnected

T = TypeVar("T")

# Prompts longer than this (characters) are tokenized off the event loop: other requests keep flowing.
LONG_PROMPT_CHARS = 8192


async def _wait_for_disconnect(request: Request) -> None:
    # The body is already read, so the next ASGI message is the disconnect (or nothing, ever).
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request | None, work: Awaitable[T]) -> T:
    """Runs `work`, cancelling it as soon as the client disconnects (a job has no client: it runs on)."""
    if request is None:
        return await work
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


async def _resume(first: asyncio.Future, rest: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
    """The engine stream again, from its first output (already awaited, or still on its way)."""
    out = await first
    yield out
    if not out.finished:
        async for out in rest:
            yield out


class Generation:
    def __init__(self, state: ServerState, engine: AsyncEngine, request: Request | None,
                 client_priority: int | None = None, admit: bool = True):
        """`request` None: a job's request (a batch line, a background response), run without HTTP.
        `client_priority`: the body's `priority`, a 400 unless the server allows it. `admit` False: the
        caller holds the request's admission slot for several generations (text-to-SQL's candidates)."""
        self.state = state
        self.engine = engine
        self.request = request
        self.admit = admit
        self.priority = priority_of(state.settings, request, client_priority)
        self.fairness_key = fairness_key(request)
        self.record: RequestRecord | None = getattr(request.state, "record", None) if request is not None else None
        base = self.record.request_id if self.record else uuid.uuid4().hex
        # Engine ids must be unique even when a client reuses its x-request-id.
        self.engine_id = f"{base}-{uuid.uuid4().hex[:8]}"
        self._gens: list[AsyncIterator[RequestOutput]] = []
        self._firsts: list[asyncio.Future] = []
        self._streams: list[AsyncIterator[RequestOutput]] = []
        self._slot = None

    async def start(self, prompts: list[str | list[int]], params: SamplingParams) -> None:
        """Admits the request (429 past the queue bound) and checks each prompt with the engine's
        input check (400) before anything is queued; the engine then gets the token ids."""
        # Jobs skip admission: the job gate bounds them (gateway/jobs/gate.py); the engine runs them below
        # interactive requests by priority.
        self._slot = self.state.admission.acquire() if self.request is not None and self.admit else None
        try:
            token_prompts = [await self._check(p, params) for p in prompts]
        except BaseException:
            await self.close()
            raise
        self._gens = [self.engine.generate(p, params, f"{self.engine_id}-{i}", self.priority, self.fairness_key)
                      for i, p in enumerate(token_prompts)]
        # Submitted now, in admission order, not when the answer's body is first read: each stream runs
        # up to its first wait (the request is then queued in the engine) before start() returns.
        self._firsts = [asyncio.ensure_future(anext(g)) for g in self._gens]
        await asyncio.sleep(0)
        self._streams = [self._track(_resume(t, g)) for t, g in zip(self._firsts, self._gens, strict=True)]

    async def _check(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        heavy = params.guided or (isinstance(prompt, str) and len(prompt) > LONG_PROMPT_CHARS)
        if heavy:  # tokenizing a long prompt or compiling a new schema takes a while
            return await asyncio.to_thread(self.engine.check_request, prompt, params, self.priority)
        return self.engine.check_request(prompt, params, self.priority)

    async def _track(self, stream: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
        last_token_time = None
        async for out in stream:
            self.state.metrics.observe_output(out, last_token_time, self.engine.served_model_name)
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
        r.spec_proposed += m.spec_proposed
        r.spec_accepted += m.spec_accepted

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
        for t in self._firsts:
            t.cancel()  # a first output still awaited: cancelling it closes (aborts) its engine stream
        await asyncio.gather(*self._firsts, return_exceptions=True)
        for g in self._gens:
            try:
                await g.aclose()
            except RuntimeError:  # still being iterated by a task that is unwinding: it aborts itself
                pass

    def stop_choice(self, prompt_index: int, index: int) -> None:
        """Ends sample `index` of prompt `prompt_index` in the engine now (its blocks freed, its
        usage counted up to here): the caller has all it will return of it."""
        self.engine.stop_sequence(f"{self.engine_id}-{prompt_index}", index)

    async def finals(self, watch: Callable[[int, RequestOutput], None] | None = None) -> list[RequestOutput]:
        """Non-streaming: the last output of each prompt, aborted if the client disconnects.
        `watch(prompt index, output)` sees every output on the way (and may stop a sample)."""

        async def drain() -> list[RequestOutput]:
            last: dict[int, RequestOutput] = {}
            async for i, out in self.outputs():
                if watch is not None:
                    watch(i, out)
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
