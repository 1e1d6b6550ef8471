"""One upstream server and what a pool knows about it: requests in flight, counters, and the passive
health state (out of service for a cooldown after a failure, doubling while failures repeat)."""

from dataclasses import dataclass, field

import httpx


@dataclass
class UpstreamTarget:
    url: str  # base URL including /v1, e.g. "http://10.0.0.5:8000/v1"
    api_key: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer
    model: str | None = None  # the model's name at the upstream; None = the same name as ours

    def __post_init__(self) -> None:
        try:
            scheme = httpx.URL(self.url).scheme
        except httpx.InvalidURL as exc:
            raise ValueError(f"invalid upstream URL {redact_url(self.url)!r}: {exc}") from None
        if scheme not in ("http", "https"):
            raise ValueError(f"upstream URL {redact_url(self.url)!r} must start with http:// or https://")

    def __repr__(self) -> str:  # the URL may carry credentials too
        return f"UpstreamTarget(url={self.public_url!r}, model={self.model!r})"

    def endpoint(self, path: str) -> str:
        return f"{self.url.rstrip('/')}/{path.lstrip('/')}"

    @property
    def public_url(self) -> str:
        return redact_url(self.url)


def redact_url(url: str) -> str:
    """The URL without user:password or query string, which may carry credentials: safe for logs,
    metrics and error messages."""
    try:
        return str(httpx.URL(url).copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError):
        return "<unparsable URL>"


# Repeated failures double the cooldown up to this many doublings (2**6 = 64 times the base), on top of
# the pool's own cap.
_MAX_DOUBLINGS = 6


@dataclass(eq=False)
class TargetState:
    target: UpstreamTarget
    outstanding: int = 0
    requests: int = 0  # attempts sent here
    failures: int = 0  # attempts that failed with a connection error, a timeout or 502/503/504
    retries: int = 0  # attempts sent here because an earlier attempt of the same request failed
    down_until: float = 0.0  # monotonic time the cooldown ends; 0 = in service
    _streak: int = 0  # failures since the last success, each after a cooldown ended

    def healthy(self, now: float) -> bool:
        return now >= self.down_until

    def failed(self, now: float, cooldown_s: float, max_cooldown_s: float) -> float:
        """Takes the target out; returns for how long. Requests that were already in flight when it
        went out fail too: they do not lengthen the cooldown, only a failure after it does."""
        self.failures += 1
        if not self.healthy(now):
            return self.down_until - now
        self._streak += 1
        cooldown = min(cooldown_s * 2 ** min(self._streak - 1, _MAX_DOUBLINGS), max(cooldown_s, max_cooldown_s))
        self.down_until = now + cooldown
        return cooldown

    def succeeded(self) -> None:
        self._streak = 0
        self.down_until = 0.0

    def snapshot(self, now: float) -> dict:
        return {"url": self.target.public_url, "outstanding": self.outstanding, "healthy": self.healthy(now),
                "requests": self.requests, "failures": self.failures, "retries": self.retries}
