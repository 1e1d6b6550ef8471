"""One log line per request: id, route, status, tokens and timings. Routes fill in the tokens."""

import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("sllm.access")


@dataclass
class RequestRecord:
    request_id: str
    method: str
    path: str
    start: float = field(default_factory=time.perf_counter)
    status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    ttft: float | None = None
    queue_time: float | None = None
    spec_proposed: int = 0
    spec_accepted: int = 0
    upstream: str | None = None  # the model's name when the request was forwarded to its upstream
    logged: bool = False

    def emit(self) -> None:
        if self.logged:
            return
        self.logged = True
        parts = [f"{self.request_id} {self.method} {self.path} {self.status or '-'}"]
        if self.upstream:
            parts.append(f"upstream={self.upstream}")
        if self.prompt_tokens is not None:
            parts.append(f"prompt_tokens={self.prompt_tokens} completion_tokens={self.completion_tokens} "
                         f"cached_tokens={self.cached_tokens or 0}")
        if self.queue_time is not None:
            parts.append(f"queue={self.queue_time * 1000:.1f}ms")
        if self.ttft is not None:
            parts.append(f"ttft={self.ttft * 1000:.1f}ms")
        if self.spec_proposed:
            parts.append(f"spec_acceptance={self.spec_accepted / self.spec_proposed:.2f}")
        parts.append(f"total={(time.perf_counter() - self.start) * 1000:.1f}ms")
        log.info(" ".join(parts))
