"""`/v1/embeddings` request and response shapes, as OpenAI's API has them."""

from typing import Literal

from pydantic import BaseModel, Field

from gateway.protocol.common import Request

# OpenAI's limit on inputs per request (n8n sends up to 512 a batch).
MAX_INPUTS = 2048


class EmbeddingRequest(Request):
    # A string, a list of strings, one input as token ids, or a list of such inputs.
    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    priority: int | None = None  # ours, as on the other endpoints (--allow-client-priority)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: the little-endian float32 bytes, as OpenAI sends them


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage = Field(default_factory=lambda: EmbeddingUsage(prompt_tokens=0, total_tokens=0))
