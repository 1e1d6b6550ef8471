"""Upstream failures in our error shape. An upstream's own OpenAI-shaped error is relayed as it was;
failures of the upstream itself (unreachable, timed out, 502/503/504) are retried by the pool and, when
nothing worked, answered 502 `upstream_unavailable` or 504 `upstream_timeout`. Messages name the model,
never a URL (which may carry credentials)."""

import json

import httpx

from gateway.protocol.common import ErrorResponse
from gateway.web.errors import APIError

RETRY_STATUSES = frozenset({502, 503, 504})


class Failure(Exception):
    """A failure of the upstream itself: another attempt, maybe on another target, may work."""

    def __init__(self, reason: str, timeout: bool = False):
        super().__init__(reason)
        self.reason = reason  # for messages and logs: no URL, no body
        self.timeout = timeout


def transport_failure(exc: httpx.TransportError) -> Failure | None:
    """The retryable failure `exc` is, or None when retrying cannot help (a malformed request)."""
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return None
    if isinstance(exc, httpx.TimeoutException):
        return Failure(f"timed out ({type(exc).__name__})", timeout=True)
    # httpx's messages ("[Errno 111] Connection refused") name no URL, but only the class is certain not to.
    return Failure(f"connection failed ({type(exc).__name__})")


def _status_text(response: httpx.Response) -> str:
    return f"{response.status_code} {response.reason_phrase}".rstrip()


def status_failure(response: httpx.Response) -> Failure:
    return Failure(f"the upstream answered {_status_text(response)}")


def exhausted(model: str, last: Failure, attempts: int) -> APIError:
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    if last.timeout:
        return APIError(504, f"the upstream for model {model!r} timed out ({tries}; last: {last.reason})",
                        type="server_error", code="upstream_timeout")
    return APIError(502, f"no upstream for model {model!r} is available ({tries}; last: {last.reason})",
                    type="server_error", code="upstream_unavailable")


def midstream(model: str, failure: Failure) -> APIError:
    status, code = (504, "upstream_timeout") if failure.timeout else (502, "upstream_unavailable")
    return APIError(status, f"the upstream for model {model!r} failed mid-stream: {failure.reason}",
                    type="server_error", code=code)


def error_event(err: APIError) -> bytes:
    return b"data: " + ErrorResponse(error=err.info).model_dump_json().encode() + b"\n\n"


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def upstream_error(response: httpx.Response, model: str) -> APIError:
    """A 4xx/5xx answer (other than a retried 502-504) as the APIError it describes. The body must have
    been read."""
    status = response.status_code
    if status in (401, 403):
        # The upstream refused the gateway's own key: a configuration fault of ours, not the client's, who
        # must not be told their credentials are wrong.
        return APIError(502, f"the upstream for model {model!r} refused the gateway's credentials ({status})",
                        type="server_error", code="upstream_auth_failed")
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    # OpenAI and vLLM: {"error": {...}}; older vLLM: the fields at the top level; TGI: {"error": "text"}.
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(body, dict) and not isinstance(error, dict) and isinstance(body.get("message"), str):
        error = body
    headers = {"retry-after": response.headers["retry-after"]} if "retry-after" in response.headers else None
    if isinstance(error, dict) and error.get("message"):
        return APIError(status, str(error["message"]), type=_str_or_none(error.get("type")),
                        param=_str_or_none(error.get("param")), code=_str_or_none(error.get("code")),
                        headers=headers)
    if isinstance(error, str) and error:
        return APIError(status, error, type=_str_or_none(body.get("error_type")), headers=headers)
    # A proxy's HTML page or a bare status: not worth relaying, and it may echo request details.
    return APIError(status, f"the upstream for model {model!r} answered {_status_text(response)} without an "
                            "error body we understand", headers=headers)
