"""`/v1/batches` shapes: the create request, the Batch object, and the JSONL lines going in and out."""

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from gateway.protocol.common import JSONObject, Request

BatchEndpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"]
BATCH_ENDPOINTS: tuple[str, ...] = get_args(BatchEndpoint)
CompletionWindow = Literal["24h"]
COMPLETION_WINDOWS = {"24h": 24 * 3600}

BatchStatus = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                      "cancelled"]
# A batch in one of these states is done: nothing runs, nothing changes any more.
TERMINAL_STATUSES = ("failed", "completed", "expired", "cancelled")

# OpenAI's metadata rule: at most 16 pairs, keys up to 64 characters, values up to 512.
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]


class BatchCreateRequest(Request):
    # No example: a valid one names a file uploaded to this very server, which no document can give
    # (the fuzzing test binds input_file_id to a file it uploads first).
    input_file_id: str = Field(description="a file uploaded with purpose 'batch' (POST /v1/files); its lines are "
                               "checked when the batch is created")
    endpoint: BatchEndpoint = Field(description="recorded on the batch; lines may name any of these")
    completion_window: CompletionWindow = "24h"
    metadata: Metadata | None = Field(None, description="`webhook_url` names a URL notified when the batch "
                                      "ends (a server with webhooks enabled, the host on its allow-list)")
    output_expires_after: JSONObject | None = None  # accepted; our output files do not expire


class BatchRequestCounts(BaseModel):
    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    model: str | None = None
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts
    usage: BatchUsage = Field(default_factory=BatchUsage)
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


# -- the JSONL files --------------------------------------------------------------------------------
class BatchInputLine(BaseModel):
    """One line of an input file. Unknown keys are refused: a typo must not pass silently."""

    model_config = ConfigDict(extra="forbid")
    custom_id: str = Field(min_length=1, max_length=512)
    method: str
    url: str
    body: JSONObject


class BatchLineResponse(BaseModel):
    status_code: int
    request_id: str
    body: dict[str, Any]


class BatchLineError(BaseModel):
    code: str
    message: str


class BatchOutputLine(BaseModel):
    """One line of an output or error file, as OpenAI writes them: a request that ran has
    `response` (its status and body, an error body when it failed); one that never ran (cancelled,
    expired) has `error`."""

    id: str
    custom_id: str
    response: BatchLineResponse | None = None
    error: BatchLineError | None = None
