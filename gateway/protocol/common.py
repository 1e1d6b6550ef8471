"""Shapes shared by every endpoint: errors, usage, models, sampling extras."""

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def random_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class Request(BaseModel):
    # Clients send fields we do not model (service_tier, metadata, ...): ignore them as vLLM does;
    # fields we do model are type-checked strictly, as OpenAI's API checks them, so a wrong type is a
    # 400: lax pydantic would take "5" as the token id 5 or 0 as `false` (found by the fuzzing test).
    model_config = ConfigDict(extra="ignore", strict=True)


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class StreamOptions(BaseModel):
    include_usage: bool | None = False


class SamplingExtras(Request):
    """vLLM's extra sampling fields, accepted in the body next to the OpenAI ones."""

    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logit_bias: dict[str, float] | None = None
    # vLLM's scheduling priority (lower runs first); accepted only with --allow-client-priority.
    priority: int | None = None


class GuidedExtras(Request):
    """vLLM's structured-output extras, accepted in the body next to `response_format` (at most one
    of them per request): `guided_json` (a JSON schema, or its text), `guided_regex`, `guided_grammar`
    (xgrammar EBNF), `guided_choice` (one of these strings), or the newer `structured_outputs`
    object with the same keys (`json`, `regex`, `grammar`, `choice`, `json_object`)."""

    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_grammar: str | None = None
    guided_choice: list[str] | None = None
    structured_outputs: dict[str, Any] | None = None


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "sllm"
    root: str | None = None
    parent: str | None = None  # a LoRA adapter's base model (vLLM's field); None for base models
    max_model_len: int | None = None


class HealthStatus(BaseModel):
    status: str = "ok"
    model: str  # the default model
    models: list[str] = Field(default_factory=list)  # every model served


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


JSONObject = dict[str, Any]
