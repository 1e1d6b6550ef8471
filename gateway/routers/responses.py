"""`POST /v1/responses`, `GET|DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`: the
Responses API over the chat path; `background: true` queues it as a job (gateway/jobs/responses.py).

The conversation so far (the previous response's, then this input) goes through the chat template;
`instructions` are a system message for this turn only, as OpenAI defines them. Stored responses
keep their conversation, so `previous_response_id` continues it in one lookup."""

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession
from sse_starlette import ServerSentEvent

from engine import AsyncEngine, RequestOutput
from gateway import chat_template
from gateway.deps import Session, State, check_model, get_engine
from gateway.errors import APIError, as_api_error
from gateway.generation import Generation
from gateway.jobs import responses as background
from gateway.jobs.idempotency import IdempotencyHeader
from gateway.protocol.responses import (
    ContentPartEvent,
    DeletedResponse,
    ErrorEvent,
    Event,
    IncompleteDetails,
    InputItem,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    ResponseLifecycleEvent,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    TextDeltaEvent,
    TextDoneEvent,
)
from gateway.sampling import sampling_params
from gateway.sse import sse_response
from gateway.state import ServerState
from gateway.tables.responses import StoredResponse
from gateway.unsupported import reject_tools
from gateway.usage import usage_of

router = APIRouter(prefix="/v1")


def _input_messages(items: str | list[InputItem]) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages = []
    for i, item in enumerate(items):
        if item.type != "message" or item.role is None:
            raise APIError(400, f"input[{i}]: items of type {item.type!r} are not supported yet",
                           param=f"input[{i}]", code="unsupported_parameter")
        messages.append({"role": item.role, "content": chat_template.content_text(item.content, f"input[{i}].content")})
    return messages


async def _previous_conversation(session: AsyncSession, response_id: str | None) -> list[dict]:
    if response_id is None:
        return []
    stored = await session.get(StoredResponse, response_id)
    if stored is None:
        raise APIError(400, f"Previous response with id '{response_id}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    if stored.status not in ("completed", "incomplete"):  # a background response not done (or failed)
        raise APIError(400, f"Previous response with id '{response_id}' is {stored.status}: only a finished "
                       "response can be continued.", param="previous_response_id", code="previous_response_not_ready")
    return list(stored.conversation)


def _finish(resp: ResponseObject, message: OutputMessage, final: RequestOutput) -> None:
    o = final.outputs[0]
    message.content = [OutputText(text=o.text)]
    truncated = o.finish_reason == "length"
    message.status = "incomplete" if truncated else "completed"
    resp.status = "incomplete" if truncated else "completed"
    resp.incomplete_details = IncompleteDetails(reason="max_output_tokens") if truncated else None
    resp.output = [message]
    u = usage_of([final])
    resp.usage = ResponseUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                               total_tokens=u.total_tokens)
    resp.usage.input_tokens_details.cached_tokens = u.prompt_tokens_details.cached_tokens


async def _store(state: ServerState, resp: ResponseObject, conversation: list[dict]) -> None:
    if not resp.store:
        return
    conversation = conversation + [{"role": "assistant", "content": resp.output_text}]
    async with state.db.sessions() as session:
        if resp.background:  # its row exists since it was queued; unless cancelled meanwhile, it ends here
            await background.finish(session, resp, conversation)
        else:
            session.add(StoredResponse(id=resp.id, model=resp.model, status=resp.status,
                                       previous_response_id=resp.previous_response_id,
                                       conversation=conversation, body=resp.model_dump(mode="json")))
        await session.commit()


def check_request(state: ServerState, body: ResponsesRequest) -> str:
    """What is refused before any work (the served model's name otherwise); background
    submission checks the same before it queues."""
    model = check_model(state, body.model)
    reject_tools(body.tools, body.tool_choice, None)
    fmt = body.text.format.type if body.text and body.text.format else "text"
    if fmt != "text":
        raise APIError(400, f"text.format {fmt!r} is not supported by this server yet", param="text.format",
                       code="unsupported_parameter")
    return model


def response_object(body: ResponsesRequest, model: str) -> ResponseObject:
    return ResponseObject(
        model=model, instructions=body.instructions, max_output_tokens=body.max_output_tokens,
        previous_response_id=body.previous_response_id, store=body.store, temperature=body.temperature,
        top_p=body.top_p, user=body.user, metadata=body.metadata or {}, background=body.background,
        parallel_tool_calls=body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
    )


@router.post("/responses", response_model=ResponseObject)
async def create_response(body: ResponsesRequest, request: Request, state: State, session: Session,
                          idempotency_key: IdempotencyHeader = None):
    if body.background:  # queued as a job: needs no loaded engine yet
        return await background.submit(state, session, body, idempotency_key)
    return await run_response(body, state, get_engine(state), session, request)


async def run_response(body: ResponsesRequest, state: ServerState, engine: AsyncEngine, session: AsyncSession,
                       request: Request | None = None, queued: ResponseObject | None = None
                       ) -> ResponseObject | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None,
    background responses with `queued`, the object returned when they were queued (its id and
    creation time carry over)."""
    model = check_request(state, body)
    conversation = await _previous_conversation(session, body.previous_response_id) + _input_messages(body.input)
    turn = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + conversation
    prompt = chat_template.render(engine.tokenizer, turn)
    params = sampling_params(body, n=1, max_tokens=body.max_output_tokens, logprobs=None,
                             temperature=body.temperature, top_p=body.top_p)
    resp = response_object(body, model)
    if queued is not None:
        resp.id, resp.created_at, resp.background = queued.id, queued.created_at, True
    gen = Generation(state, engine, request)
    await gen.start([prompt], params)
    if body.stream:
        return sse_response(_stream(state, gen, resp, conversation), gen.close)
    (final,) = await gen.finals()
    _finish(resp, OutputMessage(), final)
    await _store(state, resp, conversation)
    return resp


async def _stream(state: ServerState, gen: Generation, resp: ResponseObject, conversation: list[dict]
                  ) -> AsyncIterator[ServerSentEvent]:
    seq = 0

    def event(e: Event) -> ServerSentEvent:
        nonlocal seq
        e.sequence_number = seq
        seq += 1
        return ServerSentEvent(data=e.model_dump_json(), event=e.type)

    message = OutputMessage()
    yield event(ResponseLifecycleEvent(type="response.created", response=resp))
    yield event(ResponseLifecycleEvent(type="response.in_progress", response=resp))
    try:
        yield event(OutputItemEvent(type="response.output_item.added", item=message))
        yield event(ContentPartEvent(type="response.content_part.added", item_id=message.id, part=OutputText()))
        final = None
        async for _, out in gen.outputs():
            delta = out.outputs[0].delta_text
            if delta:
                yield event(TextDeltaEvent(item_id=message.id, delta=delta))
            final = out
        assert final is not None and final.finished
        _finish(resp, message, final)
        part = message.content[0]
        yield event(TextDoneEvent(item_id=message.id, text=part.text))
        yield event(ContentPartEvent(type="response.content_part.done", item_id=message.id, part=part))
        yield event(OutputItemEvent(type="response.output_item.done", item=message))
        await _store(state, resp, conversation)
        # Always `response.completed` (a truncated answer says status "incomplete" inside it): the SDKs'
        # stream helpers and LangChain wait for that event to close the stream.
        yield event(ResponseLifecycleEvent(type="response.completed", response=resp))
    except Exception as exc:
        err = as_api_error(exc)
        resp.status = "failed"
        resp.error = {"code": err.code or err.info.type, "message": err.message}
        yield event(ErrorEvent(code=err.code or err.info.type, message=err.message, param=err.param))
        yield event(ResponseLifecycleEvent(type="response.failed", response=resp))


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
