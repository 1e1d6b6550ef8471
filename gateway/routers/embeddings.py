"""`POST /v1/embeddings`: OpenAI's embeddings API on an encoder embedding model, an embedded model's
pooled hidden states, or forwarded to an upstream model as the client sent it. With no `model`, the
first encoder embedding model answers (the default all-MiniLM-L6-v2 when served)."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.embeddings import EmbeddingRequest, EmbeddingResponse
from gateway.registry import EmbeddedModel, EncoderModel, PooledModel, UpstreamModel
from gateway.serving import proxy
from gateway.serving.embeddings import EmbeddingModel, run_embeddings
from gateway.web.deps import State
from gateway.web.errors import APIError

router = APIRouter(prefix="/v1")


@router.post("/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(body: EmbeddingRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    served = state.models.resolve(body.model) if body.model else state.models.embedding_default()
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/embeddings", await proxy.request_body(request), request)
    if isinstance(served, EncoderModel):
        if served.task != "embed":
            raise APIError(400, f"`{served.name}` is a cross-encoder: it scores pairs on /v1/rerank and /score",
                           param="model", code="unsupported_for_cross_encoder")
        engine = served.encoder()
        how = EmbeddingModel(engine.spec.pooling, normalize=engine.spec.normalize)
        return await run_embeddings(body, state, engine, served.name, how, request)
    if isinstance(served, PooledModel):
        how = EmbeddingModel(served.pooling)
    elif isinstance(served, EmbeddedModel):  # a chat model's own name: pooled as the server pools (llama.cpp's way)
        pooling = state.settings.embedding_pooling
        how = EmbeddingModel(pooling if pooling != "none" else "mean")
    else:
        raise APIError(400, f"`{served.name}` is a LoRA adapter; embeddings come from base models", param="model",
                       code="unsupported_for_adapter")
    return await run_embeddings(body, state, served.ready(), served.name, how, request)
