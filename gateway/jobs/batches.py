"""Batches: validating an input file line by line, creating the batch, running one line through the
same function as its synchronous endpoint, recording its result exactly once, and finalizing the
output and error files in OpenAI's JSONL shapes.

Lines may name any of the four endpoints (OpenAI requires every line to match the batch's
`endpoint`; we accept mixed chat, completion, response and embedding lines in one file, and record the
batch's `endpoint` as given). An embedding line's model may be left out, as on /v1/embeddings (the
default embedding model answers); its usage counts input tokens only."""

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Text, cast, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db import json_in_pieces
from gateway.jobs import webhooks
from gateway.jobs.idempotency import commit_or_replay, remember, replay, request_hash
from gateway.limits import rate_limits
from gateway.protocol.batches import (
    BATCH_ENDPOINTS,
    COMPLETION_WINDOWS,
    TERMINAL_STATUSES,
    BatchCreateRequest,
    BatchError,
    BatchErrors,
    BatchInputLine,
    BatchLineError,
    BatchLineResponse,
    BatchObject,
    BatchOutputLine,
    BatchRequestCounts,
    BatchUsage,
    InputTokensDetails,
)
from gateway.protocol.chat import ChatCompletionRequest
from gateway.protocol.common import ErrorResponse
from gateway.protocol.completions import CompletionRequest
from gateway.protocol.embeddings import EmbeddingRequest
from gateway.protocol.responses import ResponsesRequest
from gateway.security.tenancy import ADMIN_CALLER, Caller
from gateway.state import ServerState
from gateway.tables.batches import Batch, BatchLine, BatchResult
from gateway.tables.files import StoredFile, add_file, new_file_id, read_content
from gateway.web.errors import APIError, as_api_error

log = logging.getLogger(__name__)

REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
    "/v1/embeddings": EmbeddingRequest,
}
MAX_REPORTED_ERRORS = 100
_CANCELLABLE = ("validating", "in_progress")


def batch_object(row: Batch) -> BatchObject:
    def ts(v: float | None) -> int | None:
        return int(v) if v is not None else None

    return BatchObject(
        id=row.id, endpoint=row.endpoint, model=row.model, input_file_id=row.input_file_id,
        completion_window=row.completion_window, status=row.status,
        errors=BatchErrors(data=[BatchError(**e) for e in row.errors]) if row.errors else None,
        output_file_id=row.output_file_id, error_file_id=row.error_file_id, created_at=int(row.created_at),
        in_progress_at=ts(row.in_progress_at), expires_at=ts(row.expires_at), finalizing_at=ts(row.finalizing_at),
        completed_at=ts(row.completed_at), failed_at=ts(row.failed_at), expired_at=ts(row.expired_at),
        cancelling_at=ts(row.cancelling_at), cancelled_at=ts(row.cancelled_at),
        request_counts=BatchRequestCounts(total=row.total, completed=row.completed, failed=row.failed),
        usage=BatchUsage(input_tokens=row.input_tokens, output_tokens=row.output_tokens,
                         total_tokens=row.input_tokens + row.output_tokens,
                         input_tokens_details=InputTokensDetails(cached_tokens=row.cached_tokens)),
        metadata=row.metadata_,
    )


async def load_batch(session: AsyncSession, batch_id: str, caller: Caller = ADMIN_CALLER) -> Batch:
    """The caller's batch (any batch for the job runner, which acts as the admin)."""
    row = await session.get(Batch, batch_id)
    if row is None or not caller.sees(row):
        raise APIError(404, f"No batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")
    return row


# -- validation --------------------------------------------------------------------------------------
def _pydantic_problem(exc: ValidationError, prefix: str) -> tuple[str, str]:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    param = f"{prefix}.{loc}" if loc else prefix
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    return f"{param}: {first.get('msg')}{more}", param


def parse_input(data: bytes, served_models: list[str], max_lines: int) -> tuple[list[dict[str, Any]], list[BatchError]]:
    """The lines of an input file as rows for `batch_lines`, and every problem found, each with
    its 1-based line number. Any problem fails the whole batch: nothing of it runs."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [BatchError(code="invalid_file_encoding", message=f"the input file is not UTF-8: {exc}")]
    rows: list[dict[str, Any]] = []
    errors: list[BatchError] = []
    seen: dict[str, int] = {}

    def problem(n: int, code: str, message: str, param: str | None = None) -> None:
        errors.append(BatchError(code=code, message=f"line {n}: {message}", param=param, line=n))

    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(rows) >= max_lines:
            errors.append(BatchError(code="too_many_lines", line=n,
                                     message=f"the input file has more than this server's {max_lines} lines"))
            break
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            problem(n, "invalid_json_line", f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            problem(n, "invalid_json_line", "a line must be a JSON object")
            continue
        try:
            item = BatchInputLine.model_validate(obj)
        except ValidationError as exc:
            message, param = _pydantic_problem(exc, "line")
            problem(n, "invalid_request", message.removeprefix("line."), param.removeprefix("line."))
            continue
        if item.method.upper() != "POST":
            problem(n, "invalid_method", f"method must be POST, not {item.method!r}", "method")
        if item.url not in REQUEST_MODELS:
            problem(n, "invalid_url", f"url {item.url!r} is not an endpoint batches run (one of "
                    f"{', '.join(BATCH_ENDPOINTS)})", "url")
            continue
        if item.custom_id in seen:
            problem(n, "duplicate_custom_id", f"custom_id {item.custom_id!r} is already used on line "
                    f"{seen[item.custom_id]}", "custom_id")
        seen.setdefault(item.custom_id, n)
        try:
            body = REQUEST_MODELS[item.url].model_validate(item.body)
        except ValidationError as exc:
            message, param = _pydantic_problem(exc, "body")
            problem(n, "invalid_body", message, param)
            continue
        if getattr(body, "stream", False):
            problem(n, "unsupported_parameter", "stream is not supported in a batch", "body.stream")
        if getattr(body, "background", False):
            problem(n, "unsupported_parameter", "background is not supported in a batch", "body.background")
        model = getattr(body, "model", None)
        if model and model not in served_models:
            problem(n, "model_not_found", f"model {model!r} is not served here (this server serves "
                    f"{', '.join(map(repr, served_models))})", "body.model")
        rows.append({"line": n, "custom_id": item.custom_id, "url": item.url, "body": item.body})
    if not rows and not errors:
        errors.append(BatchError(code="empty_file", message="the input file has no requests"))
    return rows, errors


# -- creation ----------------------------------------------------------------------------------------
async def create_batch(state: ServerState, session: AsyncSession, req: BatchCreateRequest,
                       idempotency_key: str | None, caller: Caller) -> BatchObject:
    # endpoint and completion_window are closed sets in the request model (a 400 before this runs)
    assert state.jobs is not None
    webhook_url = await state.jobs.webhooks.validate(req.metadata)
    digest = request_hash(req.model_dump_json())
    route = f"batches:{caller.owner}"  # one key's Idempotency-Key never replays another key's batch
    if (earlier := await replay(session, route, idempotency_key, digest)) is not None:
        return batch_object(await load_batch(session, earlier, caller))
    source = await session.get(StoredFile, req.input_file_id)
    if source is None or not caller.sees(source):  # another key's file is one that does not exist
        raise APIError(400, f"input_file_id: no such File object: {req.input_file_id}", param="input_file_id",
                       code="file_not_found")
    if source.purpose != "batch":
        raise APIError(400, f"input_file_id: file {source.id} has purpose {source.purpose!r}, not 'batch'",
                       param="input_file_id", code="invalid_file")
    data = await read_content(session, source.id) or b""
    rows, errors = await asyncio.to_thread(parse_input, data, list(state.models.models), state.settings.max_batch_lines)
    if any(e.code == "too_many_lines" for e in errors):  # a limit of the server, not a problem of one line
        raise APIError(400, f"input_file_id: the file has more than this server's {state.settings.max_batch_lines} "
                       "requests a batch may hold (--max-batch-lines); split it", param="input_file_id",
                       code="too_many_lines")

    now = time.time()
    batch = Batch(id=f"batch_{uuid.uuid4().hex}", created_at=now, endpoint=req.endpoint, input_file_id=source.id,
                  completion_window=req.completion_window, metadata_=req.metadata, model=state.model_name,
                  expires_at=now + COMPLETION_WINDOWS[req.completion_window], created_by=caller.owner)
    if errors:
        # Nothing of a failed file is kept but the batch itself, saying why, line by line.
        if len(errors) > MAX_REPORTED_ERRORS:
            hidden = len(errors) - MAX_REPORTED_ERRORS
            errors = errors[:MAX_REPORTED_ERRORS] + [BatchError(code="too_many_errors",
                                                                message=f"... and {hidden} more problems")]
        batch.status, batch.failed_at = "failed", now
        batch.errors = [e.model_dump() for e in errors]
        session.add(batch)
        webhooks.enqueue(session, webhook_url, "batch.failed", batch.id)
    else:
        batch.status, batch.in_progress_at, batch.total = "in_progress", now, len(rows)
        session.add(batch)
        await session.flush()
        await session.execute(insert(BatchLine), [{"batch_id": batch.id, **r} for r in rows])
    remember(session, route, idempotency_key, digest, batch.id)
    if (earlier := await commit_or_replay(session, route, idempotency_key, digest)) is not None:
        return batch_object(await load_batch(session, earlier, caller))
    if errors:
        state.jobs.webhook_sender.wake.set()
    else:
        log.info("batch %s: %d requests queued", batch.id, len(rows))
        state.jobs.submit_batch(batch.id)
    return batch_object(batch)


async def cancel_batch(state: ServerState, session: AsyncSession, batch_id: str, caller: Caller) -> BatchObject:
    await load_batch(session, batch_id, caller)  # another key's batch: a 404 before anything changes
    now = time.time()
    result = await session.execute(update(Batch).where(Batch.id == batch_id, Batch.status.in_(_CANCELLABLE))
                                   .values(status="cancelling", cancelling_at=now))
    await session.commit()
    batch = await load_batch(session, batch_id)
    await session.refresh(batch)
    if result.rowcount == 0 and batch.status not in ("cancelling", "cancelled"):
        raise APIError(409, f"batch {batch_id} cannot be cancelled: it is already {batch.status}", param="batch_id",
                       code="batch_not_cancellable")
    if result.rowcount:
        assert state.jobs is not None
        state.jobs.cancel_batch(batch_id)
    return batch_object(batch)


# -- running -----------------------------------------------------------------------------------------
class EngineUnavailable(Exception):
    """The engine is loading, stopped or dead: the line is not recorded and runs after a restart."""


def _usage(url: str, body: dict[str, Any]) -> tuple[int, int, int]:
    """(input, cached, output) tokens of one answer."""
    usage = body.get("usage") or {}
    if url == "/v1/responses":
        return (usage.get("input_tokens", 0), (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
                usage.get("output_tokens", 0))
    return (usage.get("prompt_tokens", 0), (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            usage.get("completion_tokens", 0))


def _dump(answer: BaseModel) -> dict[str, Any]:
    """answer.model_dump(mode="json"), for a worker thread: a long list of models (an embedding line's
    1,024 vectors) is dumped item by item, as one call over it holds the GIL, and so the event loop, for
    tens of ms (60 at 2,048 x 384 floats; 11 item by item). Only where the field is declared as a list of
    exactly the items' class, so each item dumps as its parent would dump it."""
    fields = type(answer).model_fields
    split: dict[str, list[BaseModel]] = {}
    for name, value in answer:
        if isinstance(value, list) and len(value) > 16 and name in fields:
            kind = type(value[0])
            if (issubclass(kind, BaseModel) and fields[name].annotation == list[kind]
                    and all(type(item) is kind for item in value)):
                split[name] = value
    body = answer.model_dump(mode="json", exclude=set(split))
    if not split:
        return body
    ordered: dict[str, Any] = {}
    for name, _ in answer:
        if name in split:
            ordered[name] = [item.model_dump(mode="json") for item in split[name]]
        elif name in body:
            ordered[name] = body[name]
    ordered.update((k, v) for k, v in body.items() if k not in ordered)
    return ordered


async def execute_line(state: ServerState, url: str, body: dict[str, Any],
                       caller: Caller = ADMIN_CALLER) -> tuple[int, dict[str, Any]]:
    """Runs one line through its endpoint's own function as the batch's owner (whose responses a
    `previous_response_id` may continue, and who owns the responses it stores); (HTTP status, body) as
    the endpoint would have answered it."""
    from gateway.serving.embeddings import serve_embeddings
    from gateway.serving.responses import run_response
    from gateway.serving.routing import route

    try:
        try:
            request = REQUEST_MODELS[url].model_validate(body)
        except ValidationError as exc:
            raise APIError(400, _pydantic_problem(exc, "body")[0]) from None
        if url == "/v1/responses":
            async with state.db.sessions() as session:
                answer = await run_response(request, state, session, caller=caller)
        elif url == "/v1/embeddings":  # stores nothing: the caller owns only the batch and its files
            answer = await serve_embeddings(request, state, raw=body)
        else:
            answer = await route(url.removeprefix("/v1"), request, state, raw=body)
        if isinstance(answer, dict):  # an upstream's, as it gave it
            return 200, answer
        assert isinstance(answer, BaseModel), "a batch line cannot stream"
        return 200, await asyncio.to_thread(_dump, answer)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        err = as_api_error(exc)
        if err.status == 503 and err.code in ("model_not_ready", "engine_dead"):  # ours, not an upstream's
            raise EngineUnavailable(err.message) from exc
        return err.status, ErrorResponse(error=err.info).model_dump()


async def record_result(state: ServerState, batch_id: str, line: BatchLine, status: int,
                        body: dict[str, Any], caller: Caller = ADMIN_CALLER) -> bool:
    """Stores one line's result and the batch's counters in one transaction; False when the line
    already had one (the unique (batch_id, line) constraint), in which case nothing changes. A
    database key's batch spends its tokens as its requests do (its limit's minute, its usage)."""
    ok = status == 200
    input_tokens, cached, output_tokens = _usage(line.url, body) if ok else (0, 0, 0)
    # Written as JSON here, off the loop: an embedding line's body is megabytes of floats, which the
    # column would otherwise write on the loop as the statement runs.
    text = await asyncio.to_thread(json_in_pieces, body)
    async with state.db.sessions() as session:
        session.add(BatchResult(id=f"batch_req_{uuid.uuid4().hex}", batch_id=batch_id, line=line.line,
                                custom_id=line.custom_id, status_code=status, request_id=f"req_{uuid.uuid4().hex}",
                                body=text, created_at=time.time()))
        counts = {"completed": Batch.completed + 1} if ok else {"failed": Batch.failed + 1}
        try:
            await session.execute(update(Batch).where(Batch.id == batch_id).values(
                **counts, input_tokens=Batch.input_tokens + input_tokens, cached_tokens=Batch.cached_tokens + cached,
                output_tokens=Batch.output_tokens + output_tokens))
            await session.commit()
        except IntegrityError:
            await session.rollback()
            log.warning("batch %s line %d already has a result; the new one is dropped", batch_id, line.line)
            return False
    if caller.key_id is not None and ok:
        await rate_limits.charge_tokens(state.db, caller.key_id, input_tokens, output_tokens,
                                        f"batch {batch_id} line {line.line}")
    return True


# -- finalizing --------------------------------------------------------------------------------------
async def _unrecorded(session: AsyncSession, batch_id: str, held_by_others_than: str | None = None,
                      now: float = 0.0) -> bool:
    """Whether a line has no result yet; with `held_by_others_than`, only lines another replica
    holds a live lease on count."""
    recorded = select(BatchResult.line).where(BatchResult.batch_id == batch_id)
    query = select(BatchLine.line).where(BatchLine.batch_id == batch_id, BatchLine.line.not_in(recorded))
    if held_by_others_than is not None:
        query = query.where(BatchLine.owner != held_by_others_than, BatchLine.lease_expires_at >= now)
    return (await session.scalar(query.limit(1))) is not None


_EMPTY_BODY_END = '{}},"error":null}'  # how a result line with an empty body ends (BatchOutputLine's JSON)


def _result_line(r: Any) -> str:
    """A result's output line, its body spliced in as stored: parsing and dumping again megabytes of an
    embedding line's floats would hold the GIL (and so the event loop) for the whole call. A body with
    NaN or Infinity (json.dumps wrote them before json_in_pieces) is read and dumped, which writes null."""
    if "NaN" in r.body or "Infinity" in r.body:
        return BatchOutputLine(id=r.id, custom_id=r.custom_id, response=BatchLineResponse(
            status_code=r.status_code, request_id=r.request_id, body=json.loads(r.body))).model_dump_json()
    head = BatchOutputLine(id=r.id, custom_id=r.custom_id, response=BatchLineResponse(
        status_code=r.status_code, request_id=r.request_id, body={})).model_dump_json()
    assert head.endswith(_EMPTY_BODY_END), head
    return head[:-len(_EMPTY_BODY_END)] + r.body + _EMPTY_BODY_END[2:]


def _output_files(lines: list[Any], results: dict[int, Any], missing: list[tuple[int, str]],
                  reason: tuple[str, str] | None) -> tuple[bytes, bytes, int, int]:
    """(output file, error file, their line counts), in line order; for a worker thread, a line a call."""
    out, err = [], []
    for n, _ in lines:
        r = results.get(n)
        if r is not None:
            (out if r.status_code == 200 else err).append(_result_line(r) + "\n")
    for _, custom_id in missing:
        assert reason is not None
        err.append(BatchOutputLine(id=f"batch_req_{uuid.uuid4().hex}", custom_id=custom_id,
                                   error=BatchLineError(code=reason[0], message=reason[1])).model_dump_json() + "\n")
    return "".join(out).encode(), "".join(err).encode(), len(out), len(err)


async def finalize(state: ServerState, batch_id: str, owner: str | None = None,
                   failure: BatchError | None = None) -> str | None:
    """Writes the output and error files and the final status: `cancelled` after a cancel,
    `failed` with `failure` (the key that queued it was revoked: see BatchJob), `expired` when the
    window closed with lines left, `completed` when every line has a result. Returns the final
    status, or None when the batch is not ready: lines left in an open window, or lines that another
    replica (not `owner`) holds a live lease on, which it finalizes itself (a failure does not wait
    for them: its lines' results, if they come, are counted but in no file).

    All in one transaction that starts by locking the batch's row, so of replicas finalizing at
    once one writes the files and the others find the batch finished."""
    async with state.db.sessions() as session:
        now = time.time()
        batch = await load_batch(session, batch_id)
        if batch.status in TERMINAL_STATUSES:
            return batch.status
        window_open = batch.expires_at is None or now <= batch.expires_at
        if failure is None and batch.status != "cancelling" and window_open and await _unrecorded(session, batch_id):
            return None  # the common case, seen without taking the lock
        locked = await session.execute(update(Batch).where(Batch.id == batch_id,
                                                           Batch.status.not_in(TERMINAL_STATUSES))
                                       .values(finalizing_at=now).execution_options(synchronize_session=False))
        await session.refresh(batch)
        if not locked.rowcount or batch.status in TERMINAL_STATUSES:
            await session.rollback()
            return batch.status
        if failure is None and await _unrecorded(session, batch_id, held_by_others_than=owner or "", now=now):
            await session.rollback()
            return None
        # Each body as the text stored, not parsed: output_files splices it into its line off the loop.
        results = {r.line: r for r in (await session.execute(
            select(BatchResult.line, BatchResult.id, BatchResult.custom_id, BatchResult.status_code,
                   BatchResult.request_id, cast(BatchResult.body, Text).label("body"))
            .where(BatchResult.batch_id == batch_id))).all()}
        lines = (await session.execute(select(BatchLine.line, BatchLine.custom_id)
                                       .where(BatchLine.batch_id == batch_id).order_by(BatchLine.line))).all()
        missing = [(n, c) for n, c in lines if n not in results]
        if batch.status == "cancelling":
            final, reason = "cancelled", ("batch_cancelled", "This request was not run: the batch was cancelled.")
        elif failure is not None:
            final, reason = "failed", (failure.code, f"This request was not run: {failure.message}.")
            batch.errors = [failure.model_dump()]
        elif missing and not window_open:
            final, reason = "expired", ("batch_expired",
                                        "This request could not be executed before the completion window expired.")
        elif missing:
            await session.rollback()
            return None
        else:
            final, reason = "completed", None

        out, err, n_out, n_err = await asyncio.to_thread(_output_files, lines, results, missing, reason)
        if out:
            name = f"{batch_id}_output.jsonl"
            batch.output_file_id = (await add_file(session, new_file_id(), name, "batch_output", out,
                                                   created_by=batch.created_by)).id
        if err:
            name = f"{batch_id}_error.jsonl"
            batch.error_file_id = (await add_file(session, new_file_id(), name, "batch_output", err,
                                                  created_by=batch.created_by)).id
        batch.status, batch.finalizing_at = final, now
        setattr(batch, f"{final}_at", time.time())
        webhooks.enqueue(session, (batch.metadata_ or {}).get(webhooks.WEBHOOK_URL_KEY), f"batch.{final}", batch_id)
        await session.commit()
    log.info("batch %s %s: %d succeeded, %d failed, %d not run", batch_id, final, n_out, n_err - len(missing),
             len(missing))
    return final
