"""`POST /v1/rerank`, `/rerank` and `/v2/rerank` (Cohere/Jina shape, as vLLM and llama.cpp serve them):
an embedded model's pooled states scored against the query (gateway/serving/rerank.py), or forwarded to
an upstream model."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.rerank import RerankRequest, RerankResponse
from gateway.registry import EmbeddedModel, PooledModel, UpstreamModel
from gateway.serving import proxy
from gateway.serving.embeddings import EmbeddingModel
from gateway.serving.rerank import run_rerank
from gateway.web.deps import State
from gateway.web.errors import APIError

router = APIRouter()


@router.post("/v1/rerank", response_model=RerankResponse)
@router.post("/rerank", response_model=RerankResponse)
@router.post("/v2/rerank", response_model=RerankResponse)
async def rerank(body: RerankRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/rerank", await proxy.request_body(request), request)
    if isinstance(served, PooledModel):
        how = EmbeddingModel(served.pooling)
    elif isinstance(served, EmbeddedModel):
        pooling = state.settings.embedding_pooling
        how = EmbeddingModel(pooling if pooling != "none" else "mean")
    else:
        raise APIError(400, f"`{served.name}` is a LoRA adapter; rerank uses base models", param="model",
                       code="unsupported_for_adapter")
    return await run_rerank(body, state, served.ready(), served.name, how, request)
