"""Rerank served by an embedded engine without a reranking head: documents ordered by the cosine
similarity of their pooled embedding to the query's (a bi-encoder's score, in [-1, 1]). A cross-encoder
(BERT-family classification head, or a Qwen3-Reranker's yes/no logits) would score pairs jointly and rank
better; none is served yet."""

from fastapi import Request

from engine import AsyncEngine
from engine.pooling import PoolingParams
from gateway.protocol.common import random_id
from gateway.protocol.rerank import RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage
from gateway.serving.embeddings import EmbeddingModel, embed_inputs
from gateway.state import ServerState
from gateway.web.errors import APIError

MAX_DOCUMENTS = 1000  # Cohere's limit per request


def _texts(documents: list) -> list[str]:
    if not documents:
        raise APIError(400, "documents must not be empty", param="documents")
    if len(documents) > MAX_DOCUMENTS:
        raise APIError(400, f"at most {MAX_DOCUMENTS} documents are allowed", param="documents")
    texts = []
    for i, doc in enumerate(documents):
        text = doc.get("text") if isinstance(doc, dict) else doc
        if not isinstance(text, str) or not text:
            raise APIError(400, f"documents[{i}] must be a non-empty string or an object with a non-empty `text`",
                           param="documents")
        texts.append(text)
    return texts


async def run_rerank(body: RerankRequest, state: ServerState, engine: AsyncEngine, model_name: str,
                     how: EmbeddingModel, request: Request | None = None) -> RerankResponse:
    texts = _texts(body.documents)
    if not body.query:
        raise APIError(400, "query must not be empty", param="query")
    if body.top_n is not None and body.top_n < 1:
        raise APIError(400, "top_n must be at least 1", param="top_n")
    pooling = PoolingParams(how.pooling)  # type: ignore[arg-type]
    (query,), query_tokens = await embed_inputs([body.query], pooling, state, engine, request, body.priority, "query")
    docs, doc_tokens = await embed_inputs(list(texts), pooling, state, engine, request, body.priority, "documents")
    scores = [float(query @ d) for d in docs]
    order = sorted(range(len(texts)), key=lambda i: -scores[i])[: body.top_n]
    results = [RerankResult(index=i, relevance_score=scores[i],
                            document=RerankDocument(text=texts[i]) if body.return_documents else None) for i in order]
    return RerankResponse(id=random_id("rerank-"), model=model_name, results=results,
                          usage=RerankUsage(total_tokens=query_tokens + doc_tokens))
