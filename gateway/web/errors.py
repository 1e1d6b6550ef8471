"""Every failure leaves as `{"error": {"message", "type", "param", "code"}}` with OpenAI's status codes."""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine import EngineDeadError, InvalidRequestError, NotFoundError
from gateway.protocol.common import ErrorInfo, ErrorResponse

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type  # None: derived from the status; set when relaying another server's error
        self.param = param
        self.code = code
        self.headers = headers

    @property
    def info(self) -> ErrorInfo:
        return ErrorInfo(message=self.message, type=self.type or _TYPES.get(self.status, "invalid_request_error"),
                         param=self.param, code=self.code)


class ClientDisconnected(Exception):
    """The client went away before its answer was ready; the engine request is already aborted."""


def as_api_error(exc: BaseException) -> APIError:
    """Maps engine and unexpected failures onto the API's error taxonomy."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, NotFoundError):
        return APIError(404, exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, InvalidRequestError):
        return APIError(400, exc.message, param=exc.param, code=exc.code)
    if isinstance(exc, EngineDeadError):
        message = str(exc) if "stopped" in str(exc) else f"the engine has stopped: {exc}"
        return APIError(503, message, code="engine_dead")
    log.error("internal error", exc_info=exc)
    return APIError(500, "internal server error", code="internal_error")


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(ErrorResponse(error=err.info).model_dump(), status_code=err.status, headers=err.headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('msg')}", None
    param = ".".join(loc) or None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{param or 'body'}: {first.get('msg')}{more}", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return error_response(APIError(400, message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        return error_response(APIError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)))

    @app.exception_handler(ClientDisconnected)
    async def _gone(_: Request, __: ClientDisconnected):
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    async def _mapped(_: Request, exc: Exception):
        return error_response(as_api_error(exc))

    for cls in (APIError, InvalidRequestError, EngineDeadError, Exception):
        app.add_exception_handler(cls, _mapped)
