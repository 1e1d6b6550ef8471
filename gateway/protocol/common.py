"""Shapes shared by every endpoint: errors, usage, models, sampling extras."""

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue

from engine.sampling_params import SEED_MAX, SEED_MIN


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


class StreamOptions(Request):  # strict, as the body around it: `include_usage: 0` is a 400, not false
    include_usage: bool | None = False


# The engine's ranges (engine/sampling_params.py), stated here too so that the OpenAPI document
# says what the server accepts and a bad value is refused before any work, as a 400 naming the field.
Temperature = Annotated[float, Field(ge=0, le=2)]
TopP = Annotated[float, Field(gt=0, le=1)]
Penalty = Annotated[float, Field(ge=-2, le=2)]
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]  # what torch.Generator takes
TokenId = Annotated[int, Field(ge=0)]  # and below the model's vocabulary size, checked by the engine
NonEmptyStr = Annotated[str, Field(min_length=1)]
Stop = NonEmptyStr | Annotated[list[NonEmptyStr], Field(max_length=16)]


class KeysOnlyMatching:
    """Pydantic documents a dict whose keys have a pattern with `patternProperties`, which leaves other
    keys allowed; validation refuses them, so the document says `propertyNames` instead."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        ((pattern, values),) = schema.pop("patternProperties").items()
        return {**schema, "propertyNames": {"pattern": pattern}, "additionalProperties": values}


# OpenAI sends token ids as JSON object keys, so as strings; values from -100 (ban) to 100 (all but force).
LogitBias = Annotated[dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], Annotated[float, Field(ge=-100, le=100)]],
                      KeysOnlyMatching()]


class SamplingExtras(Request):
    """vLLM's extra sampling fields, accepted in the body next to the OpenAI ones."""

    top_k: Literal[-1] | Annotated[int, Field(ge=1)] | None = Field(None, description="-1 (no limit) or at least 1")
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0, le=2)] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, description="at most max_tokens")
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logit_bias: LogitBias | None = None
    # vLLM's scheduling priority (lower runs first); accepted only with --allow-client-priority.
    priority: int | None = Field(None, description="accepted only when the server runs with --allow-client-priority")


class GuidedExtras(Request):
    """vLLM's structured-output extras, accepted in the body next to `response_format` (at most one
    of them per request): `guided_json` (a JSON schema, or its text), `guided_regex`, `guided_grammar`
    (xgrammar EBNF), `guided_choice` (one of these strings), or the newer `structured_outputs`
    object with the same keys (`json`, `regex`, `grammar`, `choice`, `json_object`)."""

    guided_json: dict[str, Any] | str | None = None
    guided_regex: NonEmptyStr | None = None  # compiled before the request runs
    guided_grammar: NonEmptyStr | None = None
    guided_choice: Annotated[list[NonEmptyStr], Field(min_length=1)] | None = None
    structured_outputs: dict[str, Any] | None = Field(None, json_schema_extra={"propertyNames": {"enum": [
        "json", "regex", "grammar", "choice", "json_object", "disable_fallback", "disable_any_whitespace",
        "disable_additional_properties", "whitespace_pattern", "structural_tag"]}})  # engine/chat/extras.py


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "sllm"
    root: str | None = None
    parent: str | None = None  # a LoRA adapter's base model (vLLM's field); None for base models
    max_model_len: int | None = None
    # Models that embed (engine/matryoshka.py): whether /v1/embeddings' `dimensions` may shorten their vectors,
    # and the sizes they were trained for (None: any); both None for other models and while one loads.
    is_matryoshka: bool | None = None
    matryoshka_dimensions: list[int] | None = None


class HealthStatus(BaseModel):
    status: str = "ok"
    model: str  # the default model
    models: list[str] = Field(default_factory=list)  # every model served
    loading: list[str] = Field(default_factory=list)  # those still loading (the embedding model served beside)


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


JSONObject = dict[str, Any]
