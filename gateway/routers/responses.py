"""`POST /v1/responses`, `GET|DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`: the
Responses API over the chat path; `background: true` queues it as a job (gateway/jobs/responses.py).

The conversation so far (the previous response's, then this input) goes through the chat template;
`instructions` are a system message for this turn only, as OpenAI defines them. Stored responses
keep their conversation, so `previous_response_id` continues it in one lookup.

Function tools (`{"type": "function", "name", "parameters"}`) and `text.format` go through
engine/chat like Chat Completions' tools and `response_format`; calls come back as
`function_call` output items, answered by `function_call_output` input items."""

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession
from sse_starlette import ServerSentEvent

from engine import RequestOutput
from engine.chat import (
    ChatRequest,
    ContentDelta,
    PreparedChat,
    RepeatWatch,
    ToolCallStart,
    chat_constraint,
    content_text,
    prepare_chat,
    read_whole,
)
from gateway import proxy
from gateway.deps import Session, State
from gateway.errors import APIError, as_api_error
from gateway.generation import Generation
from gateway.jobs import responses as background
from gateway.jobs.idempotency import IdempotencyHeader
from gateway.priority import check_client_priority
from gateway.protocol.responses import (
    ContentPartEvent,
    DeletedResponse,
    ErrorEvent,
    Event,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    FunctionCallItem,
    IncompleteDetails,
    InputItem,
    OutputItem,
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
from gateway.registry import UpstreamModel
from gateway.sampling import sampling_params
from gateway.sse import sse_response
from gateway.state import ServerState
from gateway.tables.responses import StoredResponse
from gateway.usage import usage_of

router = APIRouter(prefix="/v1")


def _input_messages(items: str | list[InputItem]) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict] = []
    for i, item in enumerate(items):
        if item.type == "function_call":
            if not item.call_id or not item.name:
                raise APIError(400, f"input[{i}]: a function_call item needs call_id and name", param=f"input[{i}]")
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one assistant turn: its text, then its calls
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            continue
        if item.type == "function_call_output":
            if not item.call_id:
                raise APIError(400, f"input[{i}]: a function_call_output item needs call_id",
                               param=f"input[{i}].call_id")
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": content_text(item.output, f"input[{i}].output")})
            continue
        if item.type != "message" or item.role is None:
            raise APIError(400, f"input[{i}]: items of type {item.type!r} are not supported yet",
                           param=f"input[{i}]", code="unsupported_parameter")
        messages.append({"role": item.role, "content": content_text(item.content, f"input[{i}].content")})
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
    conversation = list(stored.conversation)
    # End the read: the session's pooled connection must not stay held while the answer generates
    # (more such requests than the pool's connections, interactive or jobs, would starve the rest).
    await session.commit()
    return conversation


def _finish(resp: ResponseObject, final: RequestOutput, items: list[OutputItem], repeated: bool = False) -> None:
    """`items`: the output split into a message and function calls. `repeated`: a repeated call
    ended the answer, so a `length` finish cut nothing that is returned."""
    o = final.outputs[0]
    truncated = o.finish_reason == "length" and not repeated
    for item in items:
        item.status = "completed"
    # Only a message can be cut: a function call is returned only when its arguments are complete.
    if isinstance(items[-1], OutputMessage):
        items[-1].status = "incomplete" if truncated else "completed"
    resp.status = "incomplete" if truncated else "completed"
    resp.incomplete_details = IncompleteDetails(reason="max_output_tokens") if truncated else None
    resp.output = items
    u = usage_of([final])
    resp.usage = ResponseUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                               total_tokens=u.total_tokens)
    resp.usage.input_tokens_details.cached_tokens = u.prompt_tokens_details.cached_tokens


async def _store(state: ServerState, resp: ResponseObject, conversation: list[dict]) -> None:
    if not resp.store:
        return
    conversation = conversation + [_assistant_turn(resp)]
    async with state.db.sessions() as session:
        if resp.background:  # its row exists since it was queued; unless cancelled meanwhile, it ends here
            await background.finish(session, resp, conversation)
        else:
            session.add(StoredResponse(id=resp.id, model=resp.model, status=resp.status,
                                       previous_response_id=resp.previous_response_id,
                                       conversation=conversation, body=resp.model_dump(mode="json")))
        await session.commit()


def _assistant_turn(resp: ResponseObject) -> dict:
    """The response as a chat message of the stored conversation, its calls included."""
    turn: dict = {"role": "assistant", "content": resp.output_text}
    calls = [{"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
             for item in resp.output if isinstance(item, FunctionCallItem)]
    if calls:
        turn["tool_calls"] = calls
    return turn


def _text_format(body: ResponsesRequest) -> dict | None:
    return body.text.format.model_dump(exclude_none=True) if body.text and body.text.format else None


def chat_request(body: ResponsesRequest, messages: list[dict], avoid_repeated_calls: bool = False) -> ChatRequest:
    """`avoid_repeated_calls`: the server's default, which the request's own field overrides."""
    if body.avoid_repeated_calls is not None:
        avoid_repeated_calls = body.avoid_repeated_calls
    return ChatRequest(messages, body.tools, body.tool_choice, body.parallel_tool_calls, _text_format(body),
                       format_param="text.format", avoid_repeated_calls=avoid_repeated_calls)


def check_request(state: ServerState, body: ResponsesRequest) -> str:
    """What is refused before any work (the served model's name otherwise); background
    submission checks the same before it queues."""
    model = state.models.resolve(body.model)
    if isinstance(model, UpstreamModel):
        return model.name  # the upstream checks the rest
    chat_constraint(chat_request(body, []))  # tools, tool_choice and text.format: a 400 naming the field
    return model.name


def response_object(body: ResponsesRequest, model: str) -> ResponseObject:
    return ResponseObject(
        model=model, instructions=body.instructions, max_output_tokens=body.max_output_tokens,
        previous_response_id=body.previous_response_id, store=body.store, temperature=body.temperature,
        top_p=body.top_p, user=body.user, metadata=body.metadata or {}, background=body.background,
        parallel_tool_calls=body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
        tools=body.tools or [], tool_choice=body.tool_choice if body.tool_choice is not None else "auto",
        text={"format": _text_format(body) or {"type": "text"}},
    )


@router.post("/responses", response_model=ResponseObject)
async def create_response(body: ResponsesRequest, request: Request, state: State, session: Session,
                          idempotency_key: IdempotencyHeader = None):
    check_client_priority(state.settings, body.priority)  # before queueing or forwarding
    if body.background:  # queued as a job: needs no loaded engine yet
        return await background.submit(state, session, body, idempotency_key)
    return await run_response(body, state, session, request)


async def run_response(body: ResponsesRequest, state: ServerState, session: AsyncSession,
                       request: Request | None = None, queued: ResponseObject | None = None
                       ) -> ResponseObject | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None,
    background responses with `queued`, the object returned when they were queued (its id and
    creation time carry over)."""
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await _run_upstream(body, state, served, session, request, queued)
    engine = served.ready()
    model = check_request(state, body)
    conversation = await _previous_conversation(session, body.previous_response_id) + _input_messages(body.input)
    turn = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + conversation
    chat = chat_request(body, turn, state.settings.avoid_repeated_calls)
    prepared = prepare_chat(engine.tokenizer, chat, sampling_params(
        body, n=1, max_tokens=body.max_output_tokens, logprobs=None, temperature=body.temperature,
        top_p=body.top_p))
    resp = response_object(body, model)
    if queued is not None:
        resp.id, resp.created_at, resp.background = queued.id, queued.created_at, True
    gen = Generation(state, engine, request, body.priority)
    await gen.start([prepared.prompt], prepared.params)
    if body.stream:
        return sse_response(_stream(state, gen, resp, conversation, prepared), gen.close)
    (final,) = await gen.finals(RepeatWatch(gen.stop_choice) if prepared.parses_calls else None)
    items, repeated = _output_items(final.outputs[0].text, prepared)
    _finish(resp, final, items, repeated)
    await _store(state, resp, conversation)
    return resp


def _as_input_items(conversation: list[dict]) -> list[dict]:
    """A stored conversation (chat messages) as Responses input items, for a server that never saw it."""
    items: list[dict] = []
    for m in conversation:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m["content"]})
            continue
        if m.get("content") or not m.get("tool_calls"):
            items.append({"role": m["role"], "content": m.get("content") or ""})
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            items.append({"type": "function_call", "call_id": call["id"], "name": fn["name"],
                          "arguments": fn["arguments"]})
    return items


async def _run_upstream(body: ResponsesRequest, state: ServerState, served: UpstreamModel, session: AsyncSession,
                        request: Request | None, queued: ResponseObject | None) -> ResponseObject | Response:
    """Forwarded to the upstream's /v1/responses. A previous response stored here goes as its
    conversation (the upstream never saw its id); answers that are not streamed are stored here too,
    so GET, background polling and later `previous_response_id` work as for embedded models."""
    raw = await proxy.request_body(request) if request is not None else body.model_dump(mode="json", exclude_unset=True)
    raw = {k: v for k, v in raw.items() if k != "background"}
    prior: list[dict] = []
    if body.previous_response_id and await session.get(StoredResponse, body.previous_response_id) is not None:
        prior = await _previous_conversation(session, body.previous_response_id)
        given = raw["input"] if isinstance(raw["input"], list) else [{"role": "user", "content": raw["input"]}]
        raw = {k: v for k, v in raw.items() if k != "previous_response_id"}
        raw["input"] = _as_input_items(prior) + given
    if request is not None and body.stream:
        return await proxy.forward(state, served, "/responses", raw, request)
    answer = await proxy.call(state, served, "/responses", raw)
    resp = ResponseObject.model_validate({**answer, "model": served.name})
    resp.previous_response_id = body.previous_response_id
    if queued is not None:
        resp.id, resp.created_at, resp.background = queued.id, queued.created_at, True
    await _store(state, resp, prior + _input_messages(body.input))
    return resp


def _output_items(text: str, prepared: PreparedChat) -> tuple[list[OutputItem], bool]:
    """A whole output: its text (if any, or when there are no calls) as a message, then one item per
    call; and whether a repeated call ended it."""
    content, calls, repeated = read_whole(text, prepared.parses_calls, prepared.strips_markup)
    items: list[OutputItem] = []
    if content or not calls:
        items.append(OutputMessage(content=[OutputText(text=content or "")]))
    items += [FunctionCallItem(call_id=c.id, name=c.name, arguments=c.arguments) for c in calls]
    return items, repeated


class _StreamedItems:
    """Output items as they stream: a message opened at the first text (or at once, without tools),
    a `function_call` item per call with its arguments as deltas, each closed when the next opens
    or the output ends."""

    def __init__(self) -> None:
        self.items: list[OutputItem] = []
        self._open: OutputItem | None = None
        self._text: list[str] = []

    @property
    def _index(self) -> int:
        return len(self.items) - 1

    def open_message(self) -> list[Event]:
        message = OutputMessage()
        self.items.append(message)
        self._open, self._text = message, []
        return [OutputItemEvent(type="response.output_item.added", output_index=self._index, item=message),
                ContentPartEvent(type="response.content_part.added", item_id=message.id, output_index=self._index,
                                 part=OutputText())]

    def text(self, delta: str) -> list[Event]:
        events = [] if isinstance(self._open, OutputMessage) else self._close("completed") + self.open_message()
        self._text.append(delta)
        assert self._open is not None
        return events + [TextDeltaEvent(item_id=self._open.id, output_index=self._index, delta=delta)]

    def feed(self, ev) -> list[Event]:
        """One parser event (engine/chat/parser.py) to stream events."""
        if isinstance(ev, ContentDelta):
            return self.text(ev.text)
        if isinstance(ev, ToolCallStart):
            events = self._close("completed")
            call = FunctionCallItem(call_id=ev.id, name=ev.name, status="in_progress")
            self.items.append(call)
            self._open = call
            return events + [OutputItemEvent(type="response.output_item.added", output_index=self._index, item=call)]
        call = self._open
        assert isinstance(call, FunctionCallItem)
        call.arguments += ev.delta
        return [FunctionCallArgumentsDeltaEvent(item_id=call.id, output_index=self._index, delta=ev.delta)]

    def finish(self, truncated: bool) -> list[Event]:
        events = [] if self.items else self.open_message()  # an empty answer is still one message
        # A function call is streamed only once complete, so only a message can be cut.
        cut = truncated and isinstance(self._open, OutputMessage)
        return events + self._close("incomplete" if cut else "completed")

    def _close(self, status) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        item.status = status
        done = OutputItemEvent(type="response.output_item.done", output_index=self._index, item=item)
        if isinstance(item, FunctionCallItem):
            return [FunctionCallArgumentsDoneEvent(item_id=item.id, output_index=self._index, name=item.name,
                                                   arguments=item.arguments), done]
        part = OutputText(text="".join(self._text))
        item.content = [part]
        return [TextDoneEvent(item_id=item.id, output_index=self._index, text=part.text),
                ContentPartEvent(type="response.content_part.done", item_id=item.id, output_index=self._index,
                                 part=part), done]


async def _stream(state: ServerState, gen: Generation, resp: ResponseObject, conversation: list[dict],
                  prepared: PreparedChat) -> AsyncIterator[ServerSentEvent]:
    seq = 0

    def event(e: Event) -> ServerSentEvent:
        nonlocal seq
        e.sequence_number = seq
        seq += 1
        return ServerSentEvent(data=e.model_dump_json(), event=e.type)

    items = _StreamedItems()
    parser = prepared.output_parser()
    yield event(ResponseLifecycleEvent(type="response.created", response=resp))
    yield event(ResponseLifecycleEvent(type="response.in_progress", response=resp))
    try:
        if not parser.parses_calls:  # without calls the answer is one message, open from the start
            for e in items.open_message():
                yield event(e)
        final = None
        async for _, out in gen.outputs():
            repeated_before = parser.ended_by_repeat
            for ev in parser.feed(out.outputs[0].delta_text, finished=out.finished):
                for e in items.feed(ev):
                    yield event(e)
            if parser.ended_by_repeat and not repeated_before and not out.finished:
                gen.stop_choice(0, 0)  # the rest would be dropped: end the engine's work here
            final = out
        assert final is not None and final.finished
        repeated = parser.ended_by_repeat
        for e in items.finish(final.outputs[0].finish_reason == "length" and not repeated):
            yield event(e)
        _finish(resp, final, items.items, repeated)
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
