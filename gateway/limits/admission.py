"""Backpressure: a bounded number of requests in flight; past it, 429 with retry-after."""

from gateway.web.errors import APIError


class Slot:
    def __init__(self, admission: "Admission"):
        self._admission = admission
        self._held = True

    def release(self) -> None:
        if self._held:  # idempotent: both the stream's end and an error path may release it
            self._held = False
            self._admission.in_flight -= 1


class Admission:
    """Counts requests between admission and their last byte. Everything runs on the event loop,
    so a plain counter is race-free."""

    def __init__(self, limit: int, retry_after_s: int = 1):
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0

    def acquire(self) -> Slot:
        if self.in_flight >= self.limit:
            raise APIError(
                429,
                f"the server is at capacity ({self.limit} requests in flight); retry shortly",
                code="rate_limit_exceeded",
                headers={"retry-after": str(self.retry_after_s)},
            )
        self.in_flight += 1
        return Slot(self)
