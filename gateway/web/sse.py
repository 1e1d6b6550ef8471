"""Server-sent events: OpenAI's `data: {...}` framing, `[DONE]`, and errors as a final data event
(after which the stream ends without `[DONE]`)."""

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.protocol.common import ErrorResponse
from gateway.web.errors import as_api_error

log = logging.getLogger(__name__)


def error_event(exc: BaseException) -> str:
    return ErrorResponse(error=as_api_error(exc).info).model_dump_json()


async def openai_stream(events: AsyncIterator[str], done: bool = True) -> AsyncIterator[ServerSentEvent]:
    """Wraps JSON payloads as SSE; an exception mid-stream becomes one `{"error": ...}` event and ends
    the stream (a client cannot get a status code once the 200 has been sent)."""
    try:
        async for payload in events:
            yield ServerSentEvent(data=payload)
    except Exception as exc:
        log.warning("stream failed: %s", exc)
        yield ServerSentEvent(data=error_event(exc))
        return
    if done:
        yield ServerSentEvent(data="[DONE]")


class _OnClose:
    """Runs `on_close` however the response ends. A body generator's own cleanup never runs if it was
    never started (a client gone before the headers went out), so the work behind it (an engine
    request, an upstream stream) is closed here as well."""

    _on_close: Callable[[], Awaitable[None]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            await self._on_close()


class _ClosingEventSourceResponse(_OnClose, EventSourceResponse):
    def __init__(self, *args, on_close: Callable[[], Awaitable[None]], **kwargs):
        super().__init__(*args, **kwargs)
        self._on_close = on_close


class ClosingStreamingResponse(_OnClose, StreamingResponse):
    """Bytes passed through as they come (an upstream's SSE), with `on_close`."""

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]):
        super().__init__(chunks, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._on_close = on_close


def sse_response(events: AsyncIterator[ServerSentEvent], on_close: Callable[[], Awaitable[None]]
                 ) -> EventSourceResponse:
    # sep "\n" gives OpenAI's exact framing; pings keep idle proxies from closing long queues.
    return _ClosingEventSourceResponse(events, sep="\n", ping=15, headers={"cache-control": "no-cache"},
                                       on_close=on_close)
