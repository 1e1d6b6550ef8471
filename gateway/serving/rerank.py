"""Rerank served by an embedded or encoder model: each document scored against the query as the model
scores pairs (gateway/serving/pair_scores.py: a cross-encoder's or a Qwen3-Reranker's relevance, else the
cosine similarity of pooled embeddings), best first."""

from fastapi import Request

from gateway.protocol.common import random_id
from gateway.protocol.rerank import RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage
from gateway.registry import Served
from gateway.serving.pair_scores import score_pairs
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


async def run_rerank(body: RerankRequest, state: ServerState, served: Served,
                     request: Request | None = None) -> RerankResponse:
    texts = _texts(body.documents)
    if not body.query:
        raise APIError(400, "query must not be empty", param="query")
    if body.top_n is not None and body.top_n < 1:
        raise APIError(400, "top_n must be at least 1", param="top_n")
    scores, tokens = await score_pairs(served, state, [body.query] * len(texts), texts, request, body.priority)
    order = sorted(range(len(texts)), key=lambda i: -scores[i])[: body.top_n]
    results = [RerankResult(index=i, relevance_score=scores[i],
                            document=RerankDocument(text=texts[i]) if body.return_documents else None) for i in order]
    return RerankResponse(id=random_id("rerank-"), model=served.name, results=results,
                          usage=RerankUsage(total_tokens=tokens))
