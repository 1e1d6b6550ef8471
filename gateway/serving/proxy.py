"""Requests for an upstream model: forwarded as the client sent them (its vLLM or provider extras
included), the answer returned as the upstream gave it, streams passed through event by event.

A client that goes away closes the stream, which closes the upstream response, so the upstream
aborts its request too. Upstream failures come back in our error shape (gateway/upstream/)."""

import time
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from gateway.registry import UpstreamModel
from gateway.state import ServerState
from gateway.web.sse import ClosingStreamingResponse


async def request_body(request: Request) -> dict[str, Any]:
    """The body as the client sent it (FastAPI has parsed and validated it already)."""
    return await request.json()


async def forward(state: ServerState, model: UpstreamModel, path: str, body: dict[str, Any],
                  request: Request | None = None) -> Response:
    """`path`: relative to the upstream's /v1, e.g. "/chat/completions"."""
    record = getattr(request.state, "record", None) if request is not None else None
    if record is not None:
        record.upstream = model.name
    started = time.monotonic()
    if not body.get("stream"):
        answer = await call(state, model, path, body)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if record is not None and isinstance(usage, dict):  # the log line, and the key's rate limit and usage
            record.prompt_tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
            record.completion_tokens = usage.get("completion_tokens", usage.get("output_tokens"))
        return JSONResponse(answer)
    chunks = await model.pool.open_stream(path, body)
    state.metrics.observe_upstream(model.name, "ttfb", time.monotonic() - started)

    async def close() -> None:
        await chunks.aclose()
        state.metrics.observe_upstream(model.name, "e2e", time.monotonic() - started)

    return ClosingStreamingResponse(chunks, close)


async def call(state: ServerState, model: UpstreamModel, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One non-streaming call (HTTP requests, batch lines, background responses, text-to-SQL)."""
    started = time.monotonic()
    if body.get("stream"):  # a job line asking for a stream gets the whole answer, as embedded models do
        body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    try:
        return await model.pool.post(path, body)
    finally:
        state.metrics.observe_upstream(model.name, "e2e", time.monotonic() - started)
