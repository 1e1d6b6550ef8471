"""Where a Chat Completions or Completions request goes: forwarded as the client sent it to an upstream
model (gateway/serving/proxy.py), or run on the embedded engine. Written once for the routers and batch lines;
the Responses API keeps its own branch (gateway/serving/responses.py), since it stores the
conversation around the upstream's answer."""

from typing import Any

from fastapi import Request, Response
from pydantic import BaseModel

from gateway.protocol.chat import ChatCompletionRequest
from gateway.protocol.completions import CompletionRequest
from gateway.registry import UpstreamModel
from gateway.serving import proxy
from gateway.serving.chat import run_chat
from gateway.serving.completions import run_completion
from gateway.state import ServerState

ENDPOINTS = {"/chat/completions": run_chat, "/completions": run_completion}


async def route(path: str, body: ChatCompletionRequest | CompletionRequest, state: ServerState,
                request: Request | None = None, raw: dict[str, Any] | None = None
                ) -> BaseModel | Response | dict[str, Any]:
    """`path`: a key of ENDPOINTS, relative to /v1. Over HTTP (`request` given) an upstream's answer is
    relayed as a response, streams included; without HTTP (batch lines, `raw` the line's body) it comes
    back as the upstream's JSON, the embedded engine's as the endpoint's response model."""
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        if request is None:
            assert raw is not None, "a call without HTTP passes the body to forward"
            return await proxy.call(state, served, path, raw)
        return await proxy.forward(state, served, path, raw if raw is not None else await proxy.request_body(request),
                                   request)
    return await ENDPOINTS[path](body, state, served.ready(), request)
