"""`POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API (its SDKs, Claude-style
agents, n8n's Anthropic credential) on an embedded model. Every error here, authentication's included,
answers in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`); keys come as
`x-api-key` or Bearer; `anthropic-version` is accepted and not checked."""

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from gateway.protocol.messages import CountTokensRequest, MessageResponse, MessagesRequest, error_body
from gateway.registry import UpstreamModel
from gateway.serving.messages import count_tokens, run_messages
from gateway.web.deps import State
from gateway.web.errors import APIError, ClientDisconnected, _validation_message, as_api_error


class AnthropicErrors(APIRoute):
    """Errors raised anywhere in the route (dependencies, body validation, the handler) as Anthropic's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except ClientDisconnected:
                raise
            except RequestValidationError as exc:
                return JSONResponse(error_body(400, _validation_message(exc)[0]), status_code=400)
            except HTTPException as exc:  # a body that is not JSON, say
                return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code)
            except Exception as exc:
                err = as_api_error(exc)
                return JSONResponse(error_body(err.status, err.message), status_code=err.status, headers=err.headers)

        return route


router = APIRouter(prefix="/v1", route_class=AnthropicErrors)


def _engine(state, name: str):
    served = state.models.resolve(name)
    if isinstance(served, UpstreamModel):
        raise APIError(400, f"`{served.name}` is served by an upstream server; /v1/messages needs an embedded model")
    return served


@router.post("/messages", response_model=MessageResponse)
async def create_message(body: MessagesRequest, request: Request, state: State):
    served = _engine(state, body.model)
    return await run_messages(body, state, served.ready(), body.model, request)


@router.post("/messages/count_tokens")
async def count_message_tokens(body: CountTokensRequest, state: State) -> dict[str, int]:
    return {"input_tokens": count_tokens(body, _engine(state, body.model).ready())}
