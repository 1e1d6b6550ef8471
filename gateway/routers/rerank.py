"""`POST /v1/rerank`, `/rerank` and `/v2/rerank` (Cohere/Jina shape, as vLLM and llama.cpp serve them) and
vLLM's `POST /score` (also `/v1/score`): pairs scored by an embedded or encoder model
(gateway/serving/pair_scores.py), or forwarded to an upstream model."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.rerank import RerankRequest, RerankResponse
from gateway.protocol.score import ScoreRequest, ScoreResponse
from gateway.registry import UpstreamModel
from gateway.serving import proxy
from gateway.serving.rerank import run_rerank
from gateway.serving.score import run_score
from gateway.web.deps import State

router = APIRouter()


@router.post("/v1/rerank", response_model=RerankResponse)
@router.post("/rerank", response_model=RerankResponse)
@router.post("/v2/rerank", response_model=RerankResponse)
async def rerank(body: RerankRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/rerank", await proxy.request_body(request), request)
    return await run_rerank(body, state, served, request)


@router.post("/score", response_model=ScoreResponse)
@router.post("/v1/score", response_model=ScoreResponse)
async def score(body: ScoreRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/score", await proxy.request_body(request), request)
    return await run_score(body, state, served, request)
