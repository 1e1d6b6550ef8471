"""`/v1/chat/completions` request and response shapes (`chat.completion` and its chunks)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.common import (
    GuidedExtras,
    JSONObject,
    Request,
    SamplingExtras,
    StreamOptions,
    UsageInfo,
    now,
    random_id,
)

MAX_N = 16


class ContentPart(Request):
    model_config = ConfigDict(extra="allow")  # image_url, input_audio, file: kept so we can name them
    type: str
    text: str | None = None


class ChatMessage(Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[JSONObject] | None = None
    tool_call_id: str | None = None


class ChatCompletionRequest(SamplingExtras, GuidedExtras):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=MAX_N)
    presence_penalty: float = 0.0
    response_format: JSONObject | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # None: the model card's value (generation_config.json), else 1.0, as vLLM
    temperature: float | None = None
    top_p: float | None = None
    tools: list[JSONObject] | None = None
    tool_choice: str | JSONObject | None = None
    parallel_tool_calls: bool | None = None
    # Ours: steer the answer off repeating a tool call whose result is already in the messages
    # (None: the server's --avoid-repeated-calls).
    avoid_repeated_calls: bool | None = None
    user: str | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    # Reasoning models (engine/chat/reasoning.py): OpenAI's effort ("none" turns thinking off), and ours,
    # the thinking tokens before the end of the thinking is forced (None: the server's --max-thinking-tokens).
    reasoning_effort: str | None = None
    max_thinking_tokens: int | None = Field(None, ge=0)


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


def _unset(v: Any) -> bool:
    return v is None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[JSONObject] = Field(default_factory=list)
    # A reasoning model's thinking, under vLLM's name and the newer one; absent for other models.
    reasoning_content: str | None = Field(None, exclude_if=_unset)
    reasoning: str | None = Field(None, exclude_if=_unset)


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "abort", "tool_calls"] | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: random_id("chatcmpl-"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None


class DeltaFunction(BaseModel):
    name: str | None = Field(None, exclude_if=_unset)
    arguments: str | None = Field(None, exclude_if=_unset)


class DeltaToolCall(BaseModel):
    """One streamed piece of a tool call: `id`, `type` and `function.name` in a call's first delta
    (with the first `arguments` fragment), then further `function.arguments` fragments; `index` on every
    one, and at most one item per index in a chunk."""

    index: int
    id: str | None = Field(None, exclude_if=_unset)
    type: Literal["function"] | None = Field(None, exclude_if=_unset)
    function: DeltaFunction


class DeltaMessage(BaseModel):
    # OpenAI sends only the keys a delta carries: role on the first chunk, then content or tool_calls.
    role: Literal["assistant"] | None = Field(None, exclude_if=_unset)
    content: str | None = Field(None, exclude_if=_unset)
    reasoning_content: str | None = Field(None, exclude_if=_unset)
    reasoning: str | None = Field(None, exclude_if=_unset)
    tool_calls: list[DeltaToolCall] | None = Field(None, exclude_if=_unset)


class ChatChunkChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "abort", "tool_calls"] | None = None
    stop_reason: int | str | None = Field(None, exclude_if=_unset)


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
