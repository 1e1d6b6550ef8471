"""`POST /v1/embeddings`: OpenAI's embeddings API on an encoder embedding model, an embedded model's
pooled hidden states, or forwarded to an upstream model as the client sent it. With no `model`, the
first encoder embedding model answers (the default all-MiniLM-L6-v2 when served)."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
from gateway.serving.embeddings import serve_embeddings
from gateway.web.deps import State

router = APIRouter(prefix="/v1")


@router.post("/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(body: EmbeddingRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    return await serve_embeddings(body, state, request)
