"""`POST /v1/responses`, `GET|DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`: the
Responses API (gateway/serving/responses.py); `background: true` queues it as a job
(gateway/jobs/responses.py)."""

from fastapi import APIRouter, Request
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.jobs import responses as background
from gateway.jobs.idempotency import IdempotencyHeader
from gateway.limits.priority import check_client_priority
from gateway.protocol.responses import (
    DeletedResponse,
    ResponseObject,
    ResponsesRequest,
)
from gateway.security.tenancy import Caller
from gateway.serving.responses import run_response
from gateway.tables.responses import StoredResponse
from gateway.web.deps import CallerDep, Session, State
from gateway.web.errors import APIError

router = APIRouter(prefix="/v1")


@router.post("/responses", response_model=ResponseObject)
async def create_response(body: ResponsesRequest, request: Request, state: State, session: Session,
                          caller: CallerDep, idempotency_key: IdempotencyHeader = None):
    check_client_priority(state.settings, body.priority)  # before queueing or forwarding
    if body.background:  # queued as a job: needs no loaded engine yet
        return await background.submit(state, session, body, idempotency_key, caller)
    return await run_response(body, state, session, request, caller=caller)


async def _load(session: AsyncSession, response_id: str, caller: Caller) -> StoredResponse:
    """The caller's response; another key's is answered as one that does not exist."""
    stored = await session.get(StoredResponse, response_id)
    if stored is None or not caller.sees(stored):
        raise APIError(404, f"No response found with id '{response_id}'.", param="response_id", code="not_found")
    return stored


@router.get("/responses/{response_id}", response_model=ResponseObject)
async def get_response(response_id: str, session: Session, caller: CallerDep) -> ResponseObject:
    return ResponseObject.model_validate((await _load(session, response_id, caller)).body)


@router.delete("/responses/{response_id}", response_model=DeletedResponse)
async def delete_response(response_id: str, session: Session, caller: CallerDep) -> DeletedResponse:
    await session.delete(await _load(session, response_id, caller))
    await session.commit()
    return DeletedResponse(id=response_id)


@router.post("/responses/{response_id}/cancel", response_model=ResponseObject)
async def cancel_response(response_id: str, state: State, session: Session, caller: CallerDep) -> ResponseObject:
    return await background.cancel(state, session, response_id, caller)
