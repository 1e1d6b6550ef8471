"""`/v1/batches`: create from an uploaded JSONL file, list, retrieve, cancel. The work itself is
done by the job runner (gateway/jobs/)."""

from typing import Annotated

from fastapi import APIRouter, Query

from gateway.jobs.batches import batch_object, cancel_batch, create_batch, load_batch
from gateway.jobs.idempotency import IdempotencyHeader
from gateway.protocol.batches import BatchCreateRequest, BatchList, BatchObject
from gateway.tables.batches import Batch
from gateway.web.deps import CallerDep, Session, State
from gateway.web.pagination import page

router = APIRouter(prefix="/v1")


@router.post("/batches", response_model=BatchObject)
async def create(body: BatchCreateRequest, state: State, session: Session, caller: CallerDep,
                 idempotency_key: IdempotencyHeader = None) -> BatchObject:
    return await create_batch(state, session, body, idempotency_key, caller)


@router.get("/batches", response_model=BatchList)
async def list_batches(session: Session, caller: CallerDep, limit: Annotated[int, Query(ge=1, le=100)] = 20,
                       after: str | None = None) -> BatchList:
    rows, has_more = await page(session, Batch, *caller.scope(Batch), limit=limit, after=after)
    data = [batch_object(r) for r in rows]
    return BatchList(data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None,
                     has_more=has_more)


@router.get("/batches/{batch_id}", response_model=BatchObject)
async def retrieve(batch_id: str, session: Session, caller: CallerDep) -> BatchObject:
    return batch_object(await load_batch(session, batch_id, caller))


@router.post("/batches/{batch_id}/cancel", response_model=BatchObject)
async def cancel(batch_id: str, state: State, session: Session, caller: CallerDep) -> BatchObject:
    return await cancel_batch(state, session, batch_id, caller)
