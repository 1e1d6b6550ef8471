"""The Responses API over the chat path, served by an embedded engine or forwarded to an upstream:
the conversation so far (the previous response's, then this input) goes through the chat layer;
`instructions` are a system message for this turn only, as OpenAI defines them. Function tools and
`text.format` go through engine/chat like Chat Completions' tools and `response_format`; calls come
back as `function_call` output items. Callable without HTTP: batch lines and background responses."""

from fastapi import Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from engine.chat import (
    ChatRequest,
    PreparedChat,
    chat_constraint,
    prepare_chat,
)
from gateway.protocol.responses import (
    FunctionCallItem,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseObject,
    ResponsesRequest,
)
from gateway.registry import UpstreamModel
from gateway.security.tenancy import Caller
from gateway.serving import proxy
from gateway.serving.conversations import as_input_items, input_messages, previous_conversation, store
from gateway.serving.generation import Generation
from gateway.serving.response_stream import finish_response, stream_response
from gateway.serving.sampling import sampling_params
from gateway.state import ServerState
from gateway.tables.responses import StoredResponse
from gateway.web.sse import sse_response


def _text_format(body: ResponsesRequest) -> dict | None:
    return body.text.format.model_dump(exclude_none=True) if body.text and body.text.format else None


def chat_request(body: ResponsesRequest, messages: list[dict], avoid_repeated_calls: bool = False) -> ChatRequest:
    """`avoid_repeated_calls`: the server's default, which the request's own field overrides."""
    if body.avoid_repeated_calls is not None:
        avoid_repeated_calls = body.avoid_repeated_calls
    effort = body.reasoning.get("effort") if body.reasoning else None
    return ChatRequest(messages, body.tools, body.tool_choice, body.parallel_tool_calls, _text_format(body),
                       format_param="text.format", avoid_repeated_calls=avoid_repeated_calls,
                       template_kwargs=body.chat_template_kwargs or {}, reasoning_effort=effort,
                       max_thinking_tokens=body.max_thinking_tokens)


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


async def run_response(body: ResponsesRequest, state: ServerState, session: AsyncSession,
                       request: Request | None = None, queued: ResponseObject | None = None, *, caller: Caller
                       ) -> ResponseObject | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None,
    background responses with `queued`, the object returned when they were queued (its id and
    creation time carry over). `caller`: whose conversation it continues and who owns what it stores."""
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await _run_upstream(body, state, served, session, request, queued, caller)
    engine = served.ready()
    model = check_request(state, body)
    conversation = (await previous_conversation(session, body.previous_response_id, caller)
                    + input_messages(body.input))
    turn = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + conversation
    chat = chat_request(body, turn, state.settings.avoid_repeated_calls)
    prepared = prepare_chat(engine.tokenizer, chat, sampling_params(
        body, n=1, max_tokens=body.max_output_tokens, logprobs=None, temperature=body.temperature,
        top_p=body.top_p, defaults=engine.sampling_defaults), engine.chat_options)
    resp = response_object(body, model)
    if queued is not None:
        resp.id, resp.created_at, resp.background = queued.id, queued.created_at, True
    gen = Generation(state, engine, request, body.priority)
    await gen.start([prepared.prompt], prepared.params)
    if body.stream:
        return sse_response(stream_response(state, gen, resp, conversation, prepared, caller.owner), gen.close)
    (final,) = await gen.finals(prepared.repeat_watch(gen.stop_choice))
    items, repeated = _output_items(final.outputs[0].text, prepared)
    finish_response(resp, final, items, repeated)
    await store(state, resp, conversation, caller.owner)
    return resp


async def _run_upstream(body: ResponsesRequest, state: ServerState, served: UpstreamModel, session: AsyncSession,
                        request: Request | None, queued: ResponseObject | None, caller: Caller
                        ) -> ResponseObject | Response:
    """Forwarded to the upstream's /v1/responses. A previous response stored here goes as its
    conversation (the upstream never saw its id); answers that are not streamed are stored here too,
    so GET, background polling and later `previous_response_id` work as for embedded models. An id
    not stored here (a streamed answer, which the upstream alone kept) is forwarded for an admin only:
    the upstream sees one client, this gateway, so it could be any key's conversation."""
    raw = await proxy.request_body(request) if request is not None else body.model_dump(mode="json", exclude_unset=True)
    raw = {k: v for k, v in raw.items() if k != "background"}
    prior: list[dict] = []
    previous = await session.get(StoredResponse, body.previous_response_id) if body.previous_response_id else None
    if previous is not None or (body.previous_response_id and not caller.admin):
        # Another key's, or one only the upstream knows: refused as unknown here, never forwarded.
        prior = await previous_conversation(session, body.previous_response_id, caller)
        given = raw["input"] if isinstance(raw["input"], list) else [{"role": "user", "content": raw["input"]}]
        raw = {k: v for k, v in raw.items() if k != "previous_response_id"}
        raw["input"] = as_input_items(prior) + given
    if request is not None and body.stream:
        return await proxy.forward(state, served, "/responses", raw, request)
    answer = await proxy.call(state, served, "/responses", raw)
    resp = ResponseObject.model_validate({**answer, "model": served.name})
    resp.previous_response_id = body.previous_response_id
    if queued is not None:
        resp.id, resp.created_at, resp.background = queued.id, queued.created_at, True
    await store(state, resp, prior + input_messages(body.input), caller.owner)
    return resp


def _output_items(text: str, prepared: PreparedChat) -> tuple[list[OutputItem], bool]:
    """A whole output: its thinking (if any) as a reasoning item, its text (if any, or when there are no
    calls) as a message, then one item per call; and whether a repeated call ended it."""
    a = prepared.read(text)
    content, calls, repeated = a.content, a.tool_calls, a.ended_by_repeat
    items: list[OutputItem] = []
    if a.reasoning:
        items.append(ReasoningItem(content=[ReasoningText(text=a.reasoning)]))
    if content or not calls:
        items.append(OutputMessage(content=[OutputText(text=content or "")]))
    items += [FunctionCallItem(call_id=c.id, name=c.name, arguments=c.arguments) for c in calls]
    return items, repeated
