"""`/v1/responses` shapes: the request, the Response object, and its streaming events."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.chat import ContentPart
from gateway.protocol.common import JSONObject, Request, SamplingExtras, now, random_id


class InputItem(Request):
    """A message item (`type` may be left out), a `function_call` the model made earlier (`call_id`,
    `name`, `arguments`) or a `function_call_output` answering one (`call_id`, `output`)."""

    model_config = ConfigDict(extra="allow")
    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[ContentPart] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None


class TextFormat(Request):
    model_config = ConfigDict(extra="allow")
    type: str = "text"


class TextConfig(Request):
    format: TextFormat | None = None


class ResponsesRequest(SamplingExtras):
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    tools: list[JSONObject] | None = None
    tool_choice: str | JSONObject | None = None
    parallel_tool_calls: bool | None = None
    avoid_repeated_calls: bool | None = None  # ours, as in Chat Completions
    text: TextConfig | None = None
    reasoning: JSONObject | None = None  # {"effort": ...}: as Chat Completions' reasoning_effort
    metadata: dict[str, str] | None = None
    # vLLM's and ours, as on /v1/chat/completions.
    chat_template_kwargs: dict[str, Any] | None = None
    max_thinking_tokens: int | None = Field(None, ge=0)
    truncation: str | None = None
    user: str | None = None
    background: bool = False
    include: list[str] | None = None


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str = ""
    annotations: list[JSONObject] = Field(default_factory=list)
    logprobs: list[JSONObject] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str = Field(default_factory=lambda: random_id("msg_"))
    status: Literal["in_progress", "completed", "incomplete"] = "in_progress"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=list)


class FunctionCallItem(BaseModel):
    """An output item: the model calls a function; the client answers with a `function_call_output`
    input item carrying the same `call_id`."""

    type: Literal["function_call"] = "function_call"
    id: str = Field(default_factory=lambda: random_id("fc_"))
    call_id: str
    name: str
    arguments: str = ""
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str = ""


class ReasoningItem(BaseModel):
    """An output item: a reasoning model's thinking, before its answer."""

    type: Literal["reasoning"] = "reasoning"
    id: str = Field(default_factory=lambda: random_id("rs_"))
    summary: list[JSONObject] = Field(default_factory=list)
    content: list[ReasoningText] = Field(default_factory=list)
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


OutputItem = Annotated[ReasoningItem | OutputMessage | FunctionCallItem, Field(discriminator="type")]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


class ResponseObject(BaseModel):
    id: str = Field(default_factory=lambda: random_id("resp_"))
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=now)
    status: ResponseStatus = "in_progress"
    background: bool = False
    error: JSONObject | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: JSONObject = Field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float | None = None
    text: JSONObject = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | JSONObject = "auto"
    tools: list[JSONObject] = Field(default_factory=list)
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @property
    def output_text(self) -> str:
        return "".join(c.text for m in self.output if isinstance(m, OutputMessage) for c in m.content)


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


# -- streaming events, in the order they are sent ---------------------------------------------------
class Event(BaseModel):
    type: str
    sequence_number: int = 0


class ResponseLifecycleEvent(Event):
    """response.created / in_progress / completed / incomplete / failed."""

    response: ResponseObject


class OutputItemEvent(Event):
    """response.output_item.added / done."""

    output_index: int = 0
    item: OutputItem


class ContentPartEvent(Event):
    """response.content_part.added / done."""

    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: OutputText


class TextDeltaEvent(Event):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int = 0
    content_index: int = 0
    delta: str
    logprobs: list[JSONObject] = Field(default_factory=list)


class TextDoneEvent(Event):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int = 0
    content_index: int = 0
    text: str
    logprobs: list[JSONObject] = Field(default_factory=list)


class FunctionCallArgumentsDeltaEvent(Event):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    item_id: str
    output_index: int = 0
    delta: str


class FunctionCallArgumentsDoneEvent(Event):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int = 0
    name: str
    arguments: str


class ErrorEvent(Event):
    type: Literal["error"] = "error"
    code: str | None = None
    message: str
    param: str | None = None
