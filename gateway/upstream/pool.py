"""A served model name backed by one or more upstream OpenAI-compatible servers (vLLM, TGI, llama.cpp's
server, another sllm): requests balanced over them, retried on failures of the upstream itself, and
passive health checks that take a failing one out for a while."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx

from gateway.upstream.balance import Balancer
from gateway.upstream.errors import (
    RETRY_STATUSES,
    Failure,
    error_event,
    exhausted,
    midstream,
    status_failure,
    transport_failure,
    upstream_error,
)
from gateway.upstream.sse import relay_events, rename_model
from gateway.upstream.target import TargetState, UpstreamTarget
from gateway.web.errors import APIError

log = logging.getLogger(__name__)

T = TypeVar("T")

# A retry that goes back to a target already tried waits a little first: a server restarting or shedding
# load gets a moment, and a dead one is not hammered. Doubles per attempt.
_RETRY_BACKOFF_S = 0.1


class UpstreamPool:
    """One served model name backed by one or more upstream servers."""

    def __init__(self, name: str, targets: list[UpstreamTarget], *, connect_timeout: float = 5.0,
                 read_timeout: float = 600.0, retries: int = 2, cooldown_s: float = 30.0,
                 max_cooldown_s: float = 300.0):
        assert targets, f"model {name!r}: an upstream pool needs at least one target"
        assert retries >= 0
        self.name = name
        self.retries = retries
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._states = [TargetState(t) for t in targets]
        self._balancer = Balancer(self._states)
        # One client, so connections to each upstream are kept alive and reused across requests; the
        # read timeout bounds each wait for bytes (a stream's gap between events), not a whole answer.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            follow_redirects=False)

    @property
    def targets(self) -> list[UpstreamTarget]:
        return [s.target for s in self._states]

    async def aclose(self) -> None:
        await self._client.aclose()

    def snapshot(self) -> list[dict]:
        """Per target: url (credentials removed), outstanding requests, healthy, and the counters of
        attempts sent there (`requests`), failed there (`failures`) and sent there as retries."""
        now = time.monotonic()
        return [s.snapshot(now) for s in self._states]

    async def post(self, path: str, body: dict) -> dict:
        """Non-streaming JSON POST of `body` to `path` (relative to the target's url), the model renamed
        to the upstream's name on the way out and back to ours on the way in."""
        async def send(state: TargetState) -> dict:
            response = await self._client.post(state.target.endpoint(path), json=self._body(state, body),
                                               headers=self._headers(state))
            answer = self._json(response)
            rename_model(answer, self.name)
            return answer
        return await self._attempt(send)

    async def get(self, path: str) -> dict:
        async def send(state: TargetState) -> dict:
            response = await self._client.get(state.target.endpoint(path), headers=self._headers(state))
            return self._json(response)
        return await self._attempt(send)

    async def open_stream(self, path: str, body: dict) -> "UpstreamStream":
        """Opens a streaming POST and returns once an upstream answered 200, so a failure to open is an
        APIError the caller answers as a normal JSON error. The stream then yields the upstream's SSE
        events as they arrive. The caller must iterate it to the end or `aclose()` it (a client gone
        early): closing drops the upstream connection, which makes the upstream abort its request."""
        async def send(state: TargetState) -> httpx.Response:
            request = self._client.build_request(
                "POST", state.target.endpoint(path), json={**self._body(state, body), "stream": True},
                headers={**self._headers(state), "accept": "text/event-stream"})
            response = await self._client.send(request, stream=True)
            is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
            if response.status_code != 200 or not is_sse:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
                self._check(response)
                raise self._bad_response(response, "not an event stream")
            return response
        state, response = await self._attempt(send, hold=True)
        return UpstreamStream(self, state, response)

    # --- internals ---

    def _body(self, state: TargetState, body: dict) -> dict:
        return {**body, "model": state.target.model or self.name}

    @staticmethod
    def _headers(state: TargetState) -> dict[str, str]:
        key = state.target.api_key
        return {"authorization": f"Bearer {key}"} if key else {}

    def _check(self, response: httpx.Response) -> None:
        if response.status_code in RETRY_STATUSES:
            raise status_failure(response)
        if response.status_code >= 400:
            raise upstream_error(response, self.name)

    def _json(self, response: httpx.Response) -> dict:
        self._check(response)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._bad_response(response, "not a JSON object")
        return answer

    def _bad_response(self, response: httpx.Response, what: str) -> APIError:
        return APIError(502, f"the upstream for model {self.name!r} answered {response.status_code} with a body "
                             f"that is {what}", type="server_error", code="upstream_bad_response")

    async def _attempt(self, send: Callable[[TargetState], Awaitable[T]], hold: bool = False) -> Any:
        """Runs `send` on the balancer's pick, then on others while the upstream itself fails. With
        `hold`, a success returns (state, result) and the request stays outstanding on that target until
        the caller releases it."""
        tried: set[int] = set()
        last: Failure | None = None
        for attempt in range(self.retries + 1):
            i = self._balancer.pick(time.monotonic(), tried)
            if i in tried:
                await asyncio.sleep(_RETRY_BACKOFF_S * 2 ** (attempt - 1))
            tried.add(i)
            state = self._states[i]
            state.requests += 1
            state.retries += attempt > 0
            state.outstanding += 1
            try:
                result = await send(state)
            except httpx.TransportError as exc:
                state.outstanding -= 1
                failure = transport_failure(exc)
                if failure is None:
                    log.error("upstream request for model %s to %s cannot be sent: %s", self.name,
                              state.target.public_url, type(exc).__name__)
                    raise APIError(502, f"the request for model {self.name!r} cannot be sent to its upstream",
                                   type="server_error", code="upstream_unavailable") from None
                last = self._failed(state, failure)
                continue
            except Failure as failure:
                state.outstanding -= 1
                last = self._failed(state, failure)
                continue
            except APIError:
                # The upstream answered (an error it meant, or a body we cannot use): it is alive.
                state.outstanding -= 1
                state.succeeded()
                raise
            except BaseException:  # cancelled: the client went away
                state.outstanding -= 1
                raise
            state.succeeded()
            if hold:
                return state, result
            state.outstanding -= 1
            return result
        assert last is not None
        raise exhausted(self.name, last, self.retries + 1)

    def _failed(self, state: TargetState, failure: Failure) -> Failure:
        out_for = state.failed(time.monotonic(), self.cooldown_s, self.max_cooldown_s)
        log.warning("upstream %s for model %s failed: %s; out of service for %.0f s", state.target.public_url,
                    self.name, failure.reason, out_for)
        return failure


class UpstreamStream(AsyncIterator[bytes]):
    """An open upstream SSE answer, event by event (`data: {...}\\n\\n` bytes, model renamed). A failure
    mid-stream ends it with one `data: {"error": ...}` event; it is never retried, since the client has
    already seen part of an answer."""

    def __init__(self, pool: UpstreamPool, state: TargetState, response: httpx.Response):
        self._pool = pool
        self._state = state
        self._response = response
        self._events = self._relay()
        self._released = False

    def __aiter__(self) -> "UpstreamStream":
        return self

    async def __anext__(self) -> bytes:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()
        await self._release()  # the relay never started when the client left before the first event

    async def _relay(self) -> AsyncIterator[bytes]:
        try:
            async for event in relay_events(self._response.aiter_lines(), self._pool.name):
                yield event
        except httpx.TransportError as exc:
            failure = transport_failure(exc) or Failure(type(exc).__name__)
            self._pool._failed(self._state, failure)
            yield error_event(midstream(self._pool.name, failure))
        finally:
            await self._release()

    async def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._state.outstanding -= 1
        await self._response.aclose()
