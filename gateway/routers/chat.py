"""`POST /v1/chat/completions`: messages through the model's chat template, `n` samples, logprobs,
tool calls and structured output (engine/chat), streamed as `chat.completion.chunk`s."""

from fastapi import APIRouter, Request

from gateway import proxy
from gateway.deps import State
from gateway.priority import check_client_priority
from gateway.protocol.chat import ChatCompletionRequest, ChatCompletionResponse
from gateway.registry import UpstreamModel
from gateway.serving.chat import run_chat

router = APIRouter(prefix="/v1")


@router.post("/chat/completions", response_model=ChatCompletionResponse)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)  # before any forwarding: upstreams too
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/chat/completions", await proxy.request_body(request), request)
    return await run_chat(body, state, served.ready(), request)


