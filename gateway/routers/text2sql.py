"""`/v1/text2sql`: ask a question of a registered database (or run given SQL), manage sources, and
schedule questions on a cron with their runs kept (gateway/serving/text2sql.py, gateway/jobs/schedules.py).

    POST   /v1/text2sql                         {source, question | sql, execute, max_rows, constrained, candidates,
                                                 sample_when}
    POST   /v1/text2sql/sources                 {name, url, description}    GET, DELETE /sources[/{name}]
    POST   /v1/text2sql/schedules               {cron, source, question, webhook_url}
    GET    /v1/text2sql/schedules[/{id}]        DELETE /v1/text2sql/schedules/{id}
    GET    /v1/text2sql/schedules/{id}/runs"""

import uuid

from fastapi import APIRouter, Query, Request
from sqlalchemy import delete, select

from gateway.jobs import schedules as scheduling  # its clock, `now()`, is patched by tests
from gateway.protocol.text2sql import (
    AskRequest,
    AskResponse,
    RunList,
    RunObject,
    ScheduleCreate,
    ScheduleDeleted,
    ScheduleList,
    ScheduleObject,
    SourceCreate,
    SourceDeleted,
    SourceList,
    SourceObject,
)
from gateway.security.tenancy import Caller
from gateway.serving.text2sql import Text2SQL, result_body
from gateway.state import ServerState
from gateway.tables.text2sql import Text2SQLRun, Text2SQLSchedule
from gateway.web.deps import CallerDep, Session, State
from gateway.web.errors import APIError

router = APIRouter(prefix="/v1/text2sql")


def _service(state: ServerState) -> Text2SQL:
    if state.text2sql is None:
        raise APIError(503, "text-to-SQL is starting", code="not_ready", headers={"retry-after": "1"})
    return state.text2sql


@router.post("", response_model=AskResponse)
async def ask(body: AskRequest, request: Request, state: State, caller: CallerDep) -> AskResponse:
    if (body.question is None) == (body.sql is None):
        raise APIError(400, "give either `question` (answered by the model) or `sql` (run as given)",
                       param="question")
    served = state.models.resolve(body.model) if body.sql is None else None
    result = await _service(state).ask(
        served, body.source, question=body.question, sql=body.sql, execute=body.execute, max_rows=body.max_rows,
        constrained=body.constrained, max_tokens=body.max_tokens, timeout_s=body.timeout_s, request=request,
        candidates=body.candidates, sample_when=body.sample_when, caller=caller)
    return result_body(result, served.name if served else None)


# -- sources -------------------------------------------------------------------------------------------


@router.post("/sources", response_model=SourceObject)
async def create_source(body: SourceCreate, state: State, caller: CallerDep) -> SourceObject:
    service = _service(state)
    source = await service.register(body.name, body.url, body.description, db_schema=body.db_schema,
                                    replace=body.replace, caller=caller)
    return await service.describe(source, with_schema=True)  # introspected already: what the model will see


@router.get("/sources", response_model=SourceList)
async def list_sources(state: State, caller: CallerDep) -> SourceList:
    service = _service(state)
    return SourceList(data=[await service.describe(s) for s in await service.sources(caller)])


@router.get("/sources/{name}", response_model=SourceObject)
async def get_source(name: str, state: State, caller: CallerDep) -> SourceObject:
    """The source with its tables and the DDL the model is prompted with."""
    service = _service(state)
    return await service.describe(await service.source(name, param="name", caller=caller), with_schema=True)


@router.delete("/sources/{name}", response_model=SourceDeleted)
async def delete_source(name: str, state: State, caller: CallerDep) -> SourceDeleted:
    await _service(state).unregister(name, caller)
    return SourceDeleted(name=name)


# -- schedules -----------------------------------------------------------------------------------------


def _seconds(t: float | None) -> int | None:
    return None if t is None else int(t)


def _schedule_object(row: Text2SQLSchedule) -> ScheduleObject:
    return ScheduleObject(id=row.id, created_at=int(row.created_at), cron=row.cron, source=row.source,
                          question=row.question, execute=row.execute, max_rows=row.max_rows,
                          constrained=row.constrained, candidates=row.candidates or 1, webhook_url=row.webhook_url,
                          next_run_at=int(row.next_run_at), last_run_at=_seconds(row.last_run_at),
                          enabled=row.disabled_reason is None, disabled_reason=row.disabled_reason)


def _run_object(row: Text2SQLRun) -> RunObject:
    return RunObject(id=row.id, schedule_id=row.schedule_id, scheduled_for=int(row.scheduled_for),
                     started_at=int(row.started_at), finished_at=_seconds(row.finished_at), status=row.status,
                     result=row.result, error=row.error)


async def _load_schedule(session, schedule_id: str, caller: Caller) -> Text2SQLSchedule:
    """The caller's schedule; another key's is answered as one that does not exist."""
    row = await session.get(Text2SQLSchedule, schedule_id)
    if row is None or not caller.sees(row):
        raise APIError(404, f"No schedule found with id '{schedule_id}'.", param="schedule_id", code="not_found")
    return row


@router.post("/schedules", response_model=ScheduleObject)
async def create_schedule(body: ScheduleCreate, state: State, session: Session, caller: CallerDep) -> ScheduleObject:
    service = _service(state)
    if (why := scheduling.check_cron(body.cron)) is not None:
        raise APIError(400, why, param="cron", code="invalid_cron")
    await service.source(body.source, caller=caller)  # 404 for one unknown to the caller, now, not at every run
    if body.webhook_url is not None:
        await _check_webhook(state, body.webhook_url)
    t = scheduling.now()
    row = Text2SQLSchedule(id=f"t2ssched_{uuid.uuid4().hex}", created_at=t, cron=body.cron.strip(),
                           source=body.source, question=body.question, execute=body.execute, max_rows=body.max_rows,
                           constrained=body.constrained, candidates=body.candidates, webhook_url=body.webhook_url,
                           next_run_at=scheduling.next_after(body.cron, t), created_by=caller.owner)
    session.add(row)
    await session.commit()
    service.scheduler.wake()
    return _schedule_object(row)


async def _check_webhook(state: ServerState, url: str) -> None:
    from gateway.jobs.webhooks import WebhookRefused

    if state.jobs is None:
        raise APIError(503, "webhooks are starting", code="not_ready", headers={"retry-after": "1"})
    try:
        await state.jobs.webhooks.resolve(url)
    except WebhookRefused as exc:
        raise APIError(400, f"webhook_url is refused: {exc}", param="webhook_url", code="invalid_webhook_url") from None


@router.get("/schedules", response_model=ScheduleList)
async def list_schedules(session: Session, caller: CallerDep) -> ScheduleList:
    rows = (await session.scalars(select(Text2SQLSchedule).where(*caller.scope(Text2SQLSchedule))
                                  .order_by(Text2SQLSchedule.created_at))).all()
    return ScheduleList(data=[_schedule_object(r) for r in rows])


@router.get("/schedules/{schedule_id}", response_model=ScheduleObject)
async def get_schedule(schedule_id: str, session: Session, caller: CallerDep) -> ScheduleObject:
    return _schedule_object(await _load_schedule(session, schedule_id, caller))


@router.delete("/schedules/{schedule_id}", response_model=ScheduleDeleted)
async def delete_schedule(schedule_id: str, session: Session, caller: CallerDep) -> ScheduleDeleted:
    row = await _load_schedule(session, schedule_id, caller)
    await session.execute(delete(Text2SQLRun).where(Text2SQLRun.schedule_id == schedule_id))
    await session.delete(row)
    await session.commit()
    return ScheduleDeleted(id=schedule_id)


@router.get("/schedules/{schedule_id}/runs", response_model=RunList)
async def list_runs(schedule_id: str, session: Session, caller: CallerDep,
                    limit: int = Query(20, ge=1, le=100)) -> RunList:
    """Newest first."""
    await _load_schedule(session, schedule_id, caller)
    rows = (await session.scalars(select(Text2SQLRun).where(Text2SQLRun.schedule_id == schedule_id)
                                  .order_by(Text2SQLRun.scheduled_for.desc()).limit(limit + 1))).all()
    return RunList(data=[_run_object(r) for r in rows[:limit]], has_more=len(rows) > limit)
