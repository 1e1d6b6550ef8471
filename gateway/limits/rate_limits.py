"""Rate limits per API key, as OpenAI applies them: requests and tokens per minute, counted in
the database so every replica on it sees the same counts (gateway/tables/rate_limits.py). A
request is refused (429, `rate_limit_exceeded`, `retry-after`) once its key made its requests
this minute or spent its tokens; a finished request's tokens (prompt + completion) count in the
minute it finishes, as its answer's usage says them. Responses carry OpenAI's `x-ratelimit-*`
headers. Keys given to the server itself (--api-key) are the operator's: not limited, not counted.
Work a key queued runs as that key: each line of its batches is one of its requests, admitted here
before it runs (and deferred to the next window, not failed, while the key is at its limit), and
its batch lines and background responses spend its tokens and usage as its requests do."""

import logging
import math
import time
from dataclasses import dataclass

from starlette.types import Scope

from gateway.db import Database
from gateway.settings import Settings
from gateway.tables.api_keys import ApiKey
from gateway.tables.rate_limits import Spent, admit, charge
from gateway.web.access_log import RequestRecord
from gateway.web.errors import APIError

log = logging.getLogger(__name__)

WINDOW_S = 60


def _window(now: float) -> int:
    return int(now // WINDOW_S) * WINDOW_S


def _duration(seconds: float) -> str:
    """OpenAI's reset format: `20ms`, `1s`, `1m0s`."""
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


@dataclass(frozen=True)
class RateLimit:
    key_name: str
    rpm: int | None
    tpm: int | None
    spent: Spent
    now: float

    @property
    def reset_s(self) -> float:
        return self.spent.window + WINDOW_S - self.now

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for kind, limit, used in (("requests", self.rpm, self.spent.requests), ("tokens", self.tpm, self.spent.tokens)):
            if limit is not None:
                out[f"x-ratelimit-limit-{kind}"] = str(limit)
                out[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
                out[f"x-ratelimit-reset-{kind}"] = _duration(self.reset_s)
        return out

    def error(self) -> APIError:
        if self.rpm is not None and self.spent.requests >= self.rpm:
            kind, what, limit, used = "requests", "requests per min (RPM)", self.rpm, self.spent.requests
        else:
            kind, what, limit, used = "tokens", "tokens per min (TPM)", self.tpm, self.spent.tokens
        return APIError(
            429, f"Rate limit reached for API key {self.key_name!r} on {what}: Limit {limit}, Used {used}. "
                 f"Please try again in {_duration(self.reset_s)}.",
            type=kind, code="rate_limit_exceeded",
            headers={"retry-after": str(max(1, math.ceil(self.reset_s))), **self.headers()})


async def check(db: Database, settings: Settings, key: ApiKey) -> RateLimit | None:
    """Counts a request of `key` against its limits (None where it has none); the caller refuses it
    with `.error()` unless `.spent.admitted`."""
    rpm = key.rpm if key.rpm is not None else settings.rate_limit_rpm
    tpm = key.tpm if key.tpm is not None else settings.rate_limit_tpm
    if rpm is None and tpm is None:
        return None
    now = time.time()
    async with db.sessions() as session:
        spent = await admit(session, key.id, _window(now), rpm, tpm)
    return RateLimit(key.name, rpm, tpm, spent, now)


async def admit_job(db: Database, settings: Settings, key_id: int) -> RateLimit | None:
    """Counts a job's request (a line of a batch) of database key `key_id` as one of its HTTP requests;
    None where the key has no limit, or no longer exists. A refused one (not `.spent.admitted`) is
    not failed: the job waits `.reset_s` for the key's next window, as OpenAI's batch queue waits."""
    async with db.sessions() as session:
        key = await session.get(ApiKey, key_id)
    return await check(db, settings, key) if key is not None else None


async def record_usage(db: Database, key_id: int, record: RequestRecord) -> None:
    """A finished request of a database key: its tokens against the limit, and its usage."""
    await charge_tokens(db, key_id, record.prompt_tokens or 0, record.completion_tokens or 0, record.request_id)


async def charge_tokens(db: Database, key_id: int, prompt_tokens: int, completion_tokens: int, what: str) -> None:
    """Tokens a database key spent (a request, or a line of its batch) against its limit and in its usage."""
    now = time.time()
    try:
        async with db.sessions() as session:
            await charge(session, key_id, _window(now), int(now // 3600) * 3600, prompt_tokens, completion_tokens)
    except Exception:  # accounting must not fail work that was done
        log.exception("could not record the usage of %s", what)


def response_headers(scope: Scope) -> dict[str, str]:
    limit: RateLimit | None = scope.get("state", {}).get("rate_limit")
    return limit.headers() if limit is not None else {}
