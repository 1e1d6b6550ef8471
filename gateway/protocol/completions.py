"""`/v1/completions` request and response shapes (`text_completion`)."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.common import (
    GuidedExtras,
    JSONObject,
    NonEmptyStr,
    Penalty,
    SamplingExtras,
    Seed,
    Stop,
    StreamOptions,
    Temperature,
    TokenId,
    TopP,
    UsageInfo,
    now,
    random_id,
)

MAX_N = 16
# What the engine takes as `response_format` (engine/chat checks it, with `json_schema`'s schema).
RESPONSE_FORMAT = {"required": ["type"], "properties": {"type": {"enum": ["text", "json_object", "json_schema"]}}}

TokenIds = Annotated[list[TokenId], Field(min_length=1)]
# A prompt is a text, a list of texts, a list of token ids, or a list of such lists; none may be empty.
Prompt = NonEmptyStr | Annotated[list[NonEmptyStr], Field(min_length=1)] | TokenIds | Annotated[
    list[TokenIds], Field(min_length=1)]

# Valid requests, shown in the OpenAPI document (and sent by the fuzzing test's examples phase): the
# rules across fields (best_of >= n, min_tokens <= max_tokens, no best_of with stream, no echo with
# logprobs, one structured output constraint, the prompt and max_tokens within the model's context)
# are not expressible in JSON Schema.
EXAMPLES = [
    {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0},
    {"prompt": ["SELECT", "The capital of France is"], "max_tokens": 8, "n": 2, "best_of": 3, "seed": 7,
     "logprobs": 2, "stop": ["\n"]},
    {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 4, "echo": True, "min_tokens": 2, "top_p": 0.9, "top_k": 40},
    {"prompt": "Answer yes or no:", "max_tokens": 4, "guided_choice": ["yes", "no"]},
    {"prompt": "A JSON object:", "max_tokens": 24, "response_format": {"type": "json_object"}, "stream": True,
     "stream_options": {"include_usage": True}},
]


class CompletionRequest(SamplingExtras, GuidedExtras):
    model_config = ConfigDict(json_schema_extra={"examples": EXAMPLES})

    model: str | None = None
    prompt: Prompt = Field(description="text, texts, token ids or lists of token ids (each id below the "
                           "model's vocabulary size), within the model's context with max_tokens")
    best_of: int | None = Field(None, ge=1, le=MAX_N, description="at least n; not with stream")
    echo: bool = False
    frequency_penalty: Penalty = 0.0
    logprobs: int | None = Field(None, ge=0, le=20, description="not with echo")
    max_tokens: int | None = Field(16, ge=1)
    n: int = Field(1, ge=1, le=MAX_N)
    presence_penalty: Penalty = 0.0
    seed: Seed | None = None
    stop: Stop | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Fill-in-the-middle is not supported: the handler refuses a non-empty suffix, saying so.
    suffix: str | None = Field(None, json_schema_extra={"maxLength": 0})
    response_format: JSONObject | None = Field(None, json_schema_extra=RESPONSE_FORMAT)
    # None: the model card's value (generation_config.json), else 1.0, as vLLM
    temperature: Temperature | None = None
    top_p: TopP | None = None
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
