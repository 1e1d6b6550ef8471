"""`POST /v1/completions`: one engine request per prompt, `n` samples each (`best_of` keeps the
n with the highest cumulative logprob), optional echo and logprobs, structured output as vLLM takes
it (`response_format`, `guided_json|regex|grammar|choice`, `structured_outputs`), streamed or not."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.completions import CompletionRequest, CompletionResponse
from gateway.serving.routing import route
from gateway.web.deps import State

router = APIRouter(prefix="/v1")


@router.post("/completions", response_model=CompletionResponse)
async def create_completion(body: CompletionRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)  # before any forwarding: upstreams too
    return await route("/completions", body, state, request)


