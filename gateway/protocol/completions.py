"""`/v1/completions` request and response shapes (`text_completion`)."""

from typing import Literal

from pydantic import BaseModel, Field

from gateway.protocol.common import (
    GuidedExtras,
    JSONObject,
    SamplingExtras,
    StreamOptions,
    UsageInfo,
    now,
    random_id,
)

MAX_N = 16


class CompletionRequest(SamplingExtras, GuidedExtras):
    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: int | None = Field(None, ge=1, le=MAX_N)
    echo: bool = False
    frequency_penalty: float = 0.0
    logprobs: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(16, ge=1)
    n: int = Field(1, ge=1, le=MAX_N)
    presence_penalty: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    response_format: JSONObject | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    user: str | None = None


class CompletionLogprobs(BaseModel):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "abort"] | None = None
    stop_reason: int | str | None = None


class CompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: random_id("cmpl-"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
