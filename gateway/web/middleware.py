"""Pure ASGI middleware (not BaseHTTPMiddleware, which would hide client disconnects from routes):
request ids in and out, the request body size limit (413), the per-request log line, and for a
database API key its rate limit headers and usage (gateway/limits/rate_limits.py)."""

import json
import re
import uuid

from fastapi import HTTPException
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.limits import rate_limits
from gateway.protocol.common import ErrorInfo, ErrorResponse
from gateway.web.access_log import RequestRecord

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"the request body is larger than the limit of {limit} bytes")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_limits: dict[str, int] | None = None):
        """`body_limits`: a larger limit for some paths (file uploads), by exact path."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_limits = body_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id", "")
        # A client-chosen id goes into logs and headers: only accept a plain token.
        request_id = given if _SAFE_ID.match(given) else uuid.uuid4().hex
        record = RequestRecord(request_id, scope["method"], scope["path"])
        scope.setdefault("state", {})["record"] = record

        limit = self.body_limits.get(scope["path"], self.max_body_bytes)
        length = headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            await self._reject_413(send, request_id, record, limit)
            return

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)  # FastAPI passes HTTPException through
            return message

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                out = MutableHeaders(scope=message)
                out["x-request-id"] = request_id
                for name, value in rate_limits.response_headers(scope).items():
                    out[name] = value
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                record.emit()

        try:
            await self.app(scope, limited_receive, send_with_id)
        finally:
            record.emit()
            key_id = scope["state"].get("api_key_id")
            if key_id is not None:
                await rate_limits.record_usage(scope["app"].state.sllm.db, key_id, record)

    async def _reject_413(self, send: Send, request_id: str, record: RequestRecord, limit: int) -> None:
        exc = _too_large(limit)
        body = ErrorResponse(error=ErrorInfo(message=exc.detail, type="invalid_request_error")).model_dump()
        payload = json.dumps(body).encode()
        record.status = 413
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"x-request-id", request_id.encode()),
            (b"connection", b"close"),  # the unread body stays on the socket: do not reuse it
        ]})
        await send({"type": "http.response.body", "body": payload})
        record.emit()
