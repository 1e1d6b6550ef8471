"""FastAPI dependencies: server state, DB sessions, API keys and their rate limits; and the model a
request names."""

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from engine import AsyncEngine
from gateway.limits import rate_limits
from gateway.security.tenancy import ADMIN_CALLER, Caller
from gateway.state import ServerState
from gateway.tables.api_keys import ApiKey, find_active_key, hash_key
from gateway.web.errors import APIError


def get_state(request: Request) -> ServerState:
    return request.app.state.sllm


State = Annotated[ServerState, Depends(get_state)]


def get_engine(state: ServerState, model: str | None = None) -> AsyncEngine:
    """The embedded engine serving `model` (the default model when None); 404 for a name not served,
    400 for an upstream model, 503 while it loads."""
    return state.models.embedded_engine(model)


async def db_session(state: State) -> AsyncIterator[AsyncSession]:
    async for session in state.db.session():
        yield session


Session = Annotated[AsyncSession, Depends(db_session)]


def _unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"www-authenticate": "Bearer"})


async def require_api_key(request: Request, state: State) -> None:
    request.state.caller = ADMIN_CALLER  # no keys, or a key given to the server: the operator
    if not state.auth_enabled:
        return
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if (scheme.lower() != "bearer" or not key.strip()) and request.headers.get("x-api-key"):
        scheme, key = "bearer", request.headers["x-api-key"]  # Anthropic's header (its SDKs, n8n's credential)
    if scheme.lower() != "bearer" or not key.strip():
        raise _unauthorized("Missing API key: send it as `Authorization: Bearer <key>`.")
    key = key.strip()
    digest = hash_key(key)
    # Compare digests, not keys, in constant time: no timing leak, and no key kept in clear.
    if any(hmac.compare_digest(digest, hash_key(k)) for k in state.settings.api_keys):
        return
    found: ApiKey | None = None
    if state.db_has_keys:
        async for session in state.db.session():
            found = await find_active_key(session, key)
    if found is None:
        raise _unauthorized("Incorrect API key provided.")
    # The middleware reads these back: the key's usage once the request ends, the limit's headers.
    request.state.api_key_id = found.id
    request.state.caller = Caller.for_key(found.id)
    limit = await rate_limits.check(state.db, state.settings, found)
    if limit is not None:
        request.state.rate_limit = limit
        if not limit.spent.admitted:
            request.state.api_key_id = None  # a refused request is not usage
            raise limit.error()


async def get_caller(request: Request, _: Annotated[None, Depends(require_api_key)]) -> Caller:
    """Who is asking (gateway/security/tenancy.py); the key is checked once per request, whoever asks first."""
    return request.state.caller


CallerDep = Annotated[Caller, Depends(get_caller)]


async def require_admin_key(request: Request, state: State) -> None:
    """Server administration (loading LoRA adapters): with keys on, only a key given to the server
    itself (--api-key / SLLM_API_KEY) may; keys created in the database are users' keys (403)."""
    if not state.auth_enabled:
        return
    await require_api_key(request, state)
    key = request.headers.get("authorization", "").partition(" ")[2].strip()
    digest = hash_key(key)
    if not any(hmac.compare_digest(digest, hash_key(k)) for k in state.settings.api_keys):
        raise APIError(403, "This endpoint needs an admin key (one given to the server with --api-key).",
                       code="insufficient_permissions")
