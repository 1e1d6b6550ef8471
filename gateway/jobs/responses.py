"""Background responses (`POST /v1/responses` with `background: true`): the response is a stored
row from the start, `queued`, returned at once; the job runner claims it (`in_progress`), runs it
through the endpoint's own function, and stores the answer unless it was cancelled meanwhile.
`GET /v1/responses/{id}` polls it; `POST /v1/responses/{id}/cancel` cancels it."""

import logging
import time

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.jobs.idempotency import commit_or_replay, remember, replay, request_hash
from gateway.jobs.leases import LeasePolicy, free
from gateway.limits import rate_limits
from gateway.protocol.responses import ResponseObject, ResponsesRequest
from gateway.security.tenancy import REVOKED_CODE, Caller, revoked_owner
from gateway.serving.conversations import ACTIVE, finish, previous_conversation
from gateway.serving.responses import check_request, response_object, run_response
from gateway.state import ServerState
from gateway.tables.responses import StoredResponse
from gateway.web.errors import APIError, as_api_error

log = logging.getLogger(__name__)

async def submit(state: ServerState, session: AsyncSession, body: ResponsesRequest,
                 idempotency_key: str | None, caller: Caller) -> ResponseObject:
    """Checks what can be checked now (model, parameters, previous response, webhook), then
    queues the response; the same request runs later through `run_response`."""
    model = check_request(state, body)
    if body.stream:
        raise APIError(400, "background responses cannot be streamed by this server; poll GET /v1/responses/{id}",
                       param="stream", code="unsupported_parameter")
    if not body.store:
        raise APIError(400, "background responses must be stored: store cannot be false with background",
                       param="store")
    await previous_conversation(session, body.previous_response_id, caller)  # the caller's, and finished
    assert state.jobs is not None
    await state.jobs.webhooks.validate(body.metadata)
    digest = request_hash(body.model_dump_json())
    route = f"responses:{caller.owner}"  # one key's Idempotency-Key never replays another key's response
    if (earlier := await replay(session, route, idempotency_key, digest)) is not None:
        if (row := await session.get(StoredResponse, earlier)) is not None:
            return ResponseObject.model_validate(row.body)
    resp = response_object(body, model)
    resp.status, resp.background = "queued", True
    session.add(StoredResponse(id=resp.id, model=model, status="queued", previous_response_id=body.previous_response_id,
                               conversation=[], body=resp.model_dump(mode="json"), background=True,
                               request=body.model_dump(mode="json"), created_by=caller.owner))
    remember(session, route, idempotency_key, digest, resp.id)
    if (earlier := await commit_or_replay(session, route, idempotency_key, digest)) is not None:
        row = await session.get(StoredResponse, earlier)
        assert row is not None
        return ResponseObject.model_validate(row.body)
    state.jobs.submit_response(resp.id)
    return resp


async def claim(session: AsyncSession, response_id: str, body: dict, lease: LeasePolicy) -> bool:
    """Takes a queued response, or one whose lease expired, for this replica (`in_progress`, with
    `body`); commits. False when it is finished, cancelled, or another replica holds it."""
    now = time.time()
    claimed = await session.execute(update(StoredResponse).where(
        StoredResponse.id == response_id, StoredResponse.status.in_(ACTIVE), free(StoredResponse, now)).values(
        status="in_progress", body=body, owner=lease.owner, lease_expires_at=now + lease.lease_s))
    await session.commit()
    return bool(claimed.rowcount)


async def run_background(state: ServerState, response_id: str, lease: LeasePolicy) -> None:
    """Claims and runs one queued response, or one whose replica stopped renewing its lease (it
    died, or this is a restart): that one runs again from the start."""

    async with state.db.sessions() as session:
        row = await session.get(StoredResponse, response_id)
        if row is None or row.status not in ACTIVE or row.request is None:
            return
        queued = ResponseObject.model_validate(row.body)
        queued.status = "in_progress"
        if not await claim(session, response_id, queued.model_dump(mode="json"), lease):
            return
        if (revoked := await revoked_owner(session, row.created_by)) is not None:
            # Checked once claimed, from the database, so whichever replica claims it: a revoked
            # key's response never runs, and says why where its poller looks.
            log.warning("background response %s not run: %s", response_id, revoked)
            queued.status = "failed"
            queued.error = {"code": REVOKED_CODE, "message": f"This response was not run: {revoked}."}
            await finish(session, queued, None)
            await session.commit()
            return
        try:
            body = ResponsesRequest.model_validate(row.request)
            caller = Caller.for_owner(row.created_by)
            answer = await run_response(body, state, session, queued=queued, caller=caller)
            usage = getattr(answer, "usage", None)
            if caller.key_id is not None and usage is not None:  # its key's tokens, as the request's would be
                await rate_limits.charge_tokens(state.db, caller.key_id, usage.input_tokens, usage.output_tokens,
                                                f"background response {response_id}")
        except Exception as exc:  # not CancelledError: a cancelled run leaves the row to its canceller
            err = as_api_error(exc)
            if err.status == 503:
                log.error("background response %s paused: %s; it runs again once its lease expires, here or on "
                          "another replica", response_id, err.message)
                return
            queued.status = "failed"
            queued.error = {"code": err.code or err.info.type, "message": err.message}
            await finish(session, queued, None)
            await session.commit()


async def cancel(state: ServerState, session: AsyncSession, response_id: str, caller: Caller) -> ResponseObject:
    row = await session.get(StoredResponse, response_id)
    if row is None or not caller.sees(row):
        raise APIError(404, f"No response found with id '{response_id}'.", param="response_id", code="not_found")
    if not row.background:
        raise APIError(400, "Only responses created with background=true can be cancelled.", param="response_id")
    if row.status in ACTIVE:
        resp = ResponseObject.model_validate(row.body)
        resp.status = "cancelled"
        cancelled = await finish(session, resp, None)
        await session.commit()
        if cancelled:
            assert state.jobs is not None
            state.jobs.cancel_response(response_id)  # aborts its engine request, if it runs
            state.jobs.webhook_sender.wake.set()
            return resp
        await session.refresh(row)
    if row.status == "cancelled":  # cancelling twice answers the same
        return ResponseObject.model_validate(row.body)
    raise APIError(409, f"response {response_id} cannot be cancelled: it is already {row.status}",
                   param="response_id", code="response_not_cancellable")
