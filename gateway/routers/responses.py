"""`POST /v1/responses`, `GET|DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`: the
Responses API (gateway/serving/responses.py); `background: true` queues it as a job
(gateway/jobs/responses.py)."""

from fastapi import APIRouter, Request
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.deps import Session, State
from gateway.errors import APIError
from gateway.jobs import responses as background
from gateway.jobs.idempotency import IdempotencyHeader
from gateway.priority import check_client_priority
from gateway.protocol.responses import (
    DeletedResponse,
    ResponseObject,
    ResponsesRequest,
)
from gateway.serving.responses import run_response
from gateway.tables.responses import StoredResponse

router = APIRouter(prefix="/v1")


@router.post("/responses", response_model=ResponseObject)
async def create_response(body: ResponsesRequest, request: Request, state: State, session: Session,
                          idempotency_key: IdempotencyHeader = None):
    check_client_priority(state.settings, body.priority)  # before queueing or forwarding
    if body.background:  # queued as a job: needs no loaded engine yet
        return await background.submit(state, session, body, idempotency_key)
    return await run_response(body, state, session, request)


async def _load(session: AsyncSession, response_id: str) -> StoredResponse:
    stored = await session.get(StoredResponse, response_id)
    if stored is None:
        raise APIError(404, f"No response found with id '{response_id}'.", param="response_id", code="not_found")
    return stored


@router.get("/responses/{response_id}", response_model=ResponseObject)
async def get_response(response_id: str, session: Session) -> ResponseObject:
    return ResponseObject.model_validate((await _load(session, response_id)).body)


@router.delete("/responses/{response_id}", response_model=DeletedResponse)
async def delete_response(response_id: str, session: Session) -> DeletedResponse:
    await session.delete(await _load(session, response_id))
    await session.commit()
    return DeletedResponse(id=response_id)


@router.post("/responses/{response_id}/cancel", response_model=ResponseObject)
async def cancel_response(response_id: str, state: State, session: Session) -> ResponseObject:
    return await background.cancel(state, session, response_id)
