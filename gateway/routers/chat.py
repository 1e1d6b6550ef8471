"""`POST /v1/chat/completions`: messages through the model's chat template, `n` samples, logprobs,
tool calls and structured output (engine/chat), streamed as `chat.completion.chunk`s."""

from fastapi import APIRouter, Request

from gateway.limits.priority import check_client_priority
from gateway.protocol.chat import ChatCompletionRequest, ChatCompletionResponse
from gateway.serving.routing import route
from gateway.web.deps import State

router = APIRouter(prefix="/v1")


@router.post("/chat/completions", response_model=ChatCompletionResponse)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)  # before any forwarding: upstreams too
    return await route("/chat/completions", body, state, request)


