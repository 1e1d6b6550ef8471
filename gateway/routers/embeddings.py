"""`POST /v1/embeddings`: OpenAI's embeddings API on an encoder embedding model, an embedded model's
pooled hidden states, or forwarded to an upstream model as the client sent it. With no `model`, the
first encoder embedding model answers (the default all-MiniLM-L6-v2 when served)."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
from gateway.registry import UpstreamModel
from gateway.serving import proxy
from gateway.serving.embeddings import embedding_source, run_embeddings
from gateway.web.deps import State

router = APIRouter(prefix="/v1")


@router.post("/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(body: EmbeddingRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    served = state.models.resolve(body.model) if body.model else state.models.embedding_default()
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/embeddings", await proxy.request_body(request), request)
    engine, how = embedding_source(served, state)
    return await run_embeddings(body, state, engine, served.name, how, request)
