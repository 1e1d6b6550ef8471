"""What the engine hands back per request, shaped like vLLM's RequestOutput."""

from dataclasses import dataclass, field


@dataclass
class Logprob:
    token_id: int
    logprob: float
    token: str


@dataclass
class TokenLogprobs:
    """The sampled token's log-probability and the top alternatives at that position."""

    chosen: Logprob
    top: list[Logprob]


@dataclass
class CompletionOutput:
    index: int
    text: str  # all text so far
    token_ids: list[int]
    delta_text: str = ""  # text new since the previous output of this request
    delta_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] | None = None
    delta_logprobs: list[TokenLogprobs] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None  # the stop string or token id that ended it

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    spec_proposed: int = 0  # speculative draft tokens proposed for this request
    spec_accepted: int = 0  # of those, accepted by the target model
    priority: int = 0  # the request's scheduling priority (lower runs first)

    @property
    def spec_acceptance_rate(self) -> float | None:
        return self.spec_accepted / self.spec_proposed if self.spec_proposed else None

    @property
    def queue_time(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def tpot(self) -> float | None:
        if self.first_token_time is None or self.last_token_time is None or self.output_tokens < 2:
            return None
        return (self.last_token_time - self.first_token_time) / (self.output_tokens - 1)

    @property
    def e2e(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics

    @property
    def num_output_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)


@dataclass(frozen=True)
class EngineStats:
    """The engine's state after a step, published whole: readers on other threads (the gateway's
    metrics) see one consistent snapshot and never the scheduler's lists while they change."""

    num_running: int = 0  # sequences in the running batch
    num_waiting: int = 0
    num_requests_running: int = 0
    num_requests_waiting: int = 0  # requests none of whose sequences runs
    kv_usage: float = 0.0
    num_free_blocks: int = 0
    num_blocks: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0
    num_preemptions: int = 0
    preemptions_by_priority: dict[int, int] = field(default_factory=dict)  # a copy, never changed
    spec: dict[str, float] | None = None  # None unless speculative decoding is configured
    prompt_tokens: int = 0
    generation_tokens: int = 0
    steps: int = 0
