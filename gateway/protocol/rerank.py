"""`/v1/rerank` (also `/rerank`, `/v2/rerank`) request and response shapes, as Cohere and Jina have them
and vLLM and llama.cpp serve them."""

from typing import Any

from pydantic import BaseModel, Field

from gateway.protocol.common import Request


class RerankRequest(Request):
    query: str
    documents: list[str | dict[str, Any]]  # strings, or objects with a "text" field (Jina, Cohere v1)
    model: str | None = None
    top_n: int | None = None
    return_documents: bool = True
    priority: int | None = None  # ours, as on the other endpoints


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = Field(None, exclude_if=lambda v: v is None)


class RerankUsage(BaseModel):
    total_tokens: int


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
