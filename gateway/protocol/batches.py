"""`/v1/batches` shapes: the create request, the Batch object, and the JSONL lines going in and out."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.protocol.common import JSONObject, Request

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
COMPLETION_WINDOWS = {"24h": 24 * 3600}

BatchStatus = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                      "cancelled"]
# A batch in one of these states is done: nothing runs, nothing changes any more.
TERMINAL_STATUSES = ("failed", "completed", "expired", "cancelled")


def check_metadata(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """OpenAI's metadata rule: at most 16 pairs, keys up to 64 characters, values up to 512."""
    if metadata is None:
        return None
    if len(metadata) > 16:
        raise ValueError("metadata holds at most 16 key-value pairs")
    for key, value in metadata.items():
        if len(key) > 64:
            raise ValueError(f"metadata key {key[:20]!r}... is longer than 64 characters")
        if len(value) > 512:
            raise ValueError(f"metadata[{key!r}] is longer than 512 characters")
    return metadata


class BatchCreateRequest(Request):
    input_file_id: str
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    output_expires_after: JSONObject | None = None  # accepted; our output files do not expire

    _metadata = field_validator("metadata")(check_metadata)


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
