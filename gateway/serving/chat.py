"""Chat Completions served by an embedded engine: the request through the chat layer (engine/chat),
`n` samples, logprobs, tool calls and structured output, streamed as `chat.completion.chunk`s.
Callable without HTTP: batch lines run through `run_chat` with `request` None."""

from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine import AsyncEngine, RequestOutput
from engine.chat import (
    EXTRA_FIELDS,
    ChatRequest,
    ContentDelta,
    PreparedChat,
    ReasoningDelta,
    StreamEvent,
    ToolCallArguments,
    ToolCallStart,
    finish_reason,
    prepare_chat,
)
from gateway.limits.usage import usage_of
from gateway.protocol.chat import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    DeltaFunction,
    DeltaMessage,
    DeltaToolCall,
)
from gateway.protocol.common import now, random_id
from gateway.serving.generation import Generation
from gateway.serving.logprobs import chat_logprobs
from gateway.serving.sampling import sampling_params
from gateway.state import ServerState
from gateway.web.errors import APIError
from gateway.web.sse import openai_stream, sse_response


async def run_chat(body: ChatCompletionRequest, state: ServerState, engine: AsyncEngine,
                   request: Request | None = None) -> ChatCompletionResponse | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None
    (and `stream` false, so the answer is a ChatCompletionResponse)."""
    model = engine.served_model_name
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs to be true", param="top_logprobs")
    num_top = body.top_logprobs or 0
    chat = ChatRequest(
        body.messages, body.tools, body.tool_choice, body.parallel_tool_calls, body.response_format,
        guided_extras=body.model_dump(include=set(EXTRA_FIELDS)),
        add_generation_prompt=body.add_generation_prompt, template_kwargs=body.chat_template_kwargs or {},
        avoid_repeated_calls=state.settings.avoid_repeated_calls if body.avoid_repeated_calls is None
        else body.avoid_repeated_calls,
        reasoning_effort=body.reasoning_effort, max_thinking_tokens=body.max_thinking_tokens,
    )
    prepared = prepare_chat(engine.tokenizer, chat, sampling_params(
        body, n=body.n, max_tokens=body.max_completion_tokens or body.max_tokens,
        logprobs=num_top if body.logprobs else None, temperature=body.temperature, top_p=body.top_p,
        stop=body.stop, seed=body.seed, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, defaults=engine.sampling_defaults,
    ), engine.chat_options)
    gen = Generation(state, engine, request, body.priority)
    await gen.start([prepared.prompt], prepared.params)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(openai_stream(_stream(gen, body, model, include_usage, prepared)), gen.close)

    (final,) = await gen.finals(prepared.repeat_watch(gen.stop_choice))
    choices = []
    for o in final.outputs:
        a = prepared.read(o.text)
        choices.append(ChatChoice(
            index=o.index,
            message=AssistantMessage(content=a.content, tool_calls=[c.to_openai() for c in a.tool_calls],
                                     reasoning_content=a.reasoning, reasoning=a.reasoning),
            logprobs=chat_logprobs(o.logprobs or [], num_top) if body.logprobs else None,
            finish_reason=finish_reason(o.finish_reason, a.tool_calls, a.ended_by_repeat),
            stop_reason=o.stop_reason,
        ))
    return ChatCompletionResponse(model=model, choices=choices, usage=usage_of([final]))


async def _stream(gen: Generation, body: ChatCompletionRequest, model: str, include_usage: bool,
                  prepared: PreparedChat) -> AsyncIterator[str]:
    rid, created = random_id("chatcmpl-"), now()

    def chunk(choices: list[ChatChunkChoice]) -> str:
        return ChatCompletionChunk(id=rid, created=created, model=model, choices=choices).model_dump_json()

    # OpenAI opens every choice with a role-only delta before any content.
    for k in range(body.n):
        yield chunk([ChatChunkChoice(index=k, delta=DeltaMessage(role="assistant", content=""))])
    finished: set[int] = set()
    final: RequestOutput | None = None
    parsers = {k: prepared.output_parser() for k in range(body.n)}
    async for _, out in gen.outputs():
        for o in out.outputs:
            if o.index in finished:
                continue
            lp = chat_logprobs(o.delta_logprobs, body.top_logprobs or 0) if body.logprobs and o.delta_logprobs else None
            parser = parsers[o.index]
            events = parser.feed(o.delta_text, finished=bool(o.finish_reason))
            deltas = delta_messages(events)
            if lp is not None and not deltas:
                deltas = [DeltaMessage() if parser.parses_calls else DeltaMessage(content="")]
            for j, delta in enumerate(deltas):
                yield chunk([ChatChunkChoice(index=o.index, delta=delta, logprobs=lp if j == 0 else None)])
            # A repeated call ends the choice where it was written, and its engine sequence there.
            if o.finish_reason or parser.ended_by_repeat:
                finished.add(o.index)
                if not o.finish_reason:
                    gen.stop_choice(0, o.index)
                yield chunk([ChatChunkChoice(index=o.index, delta=DeltaMessage(),
                                             finish_reason=parser.finish_reason(o.finish_reason),
                                             stop_reason=o.stop_reason)])
        if out.finished:
            final = out
    if include_usage and final is not None:
        yield ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                  usage=usage_of([final])).model_dump_json()


def delta_messages(events: list[StreamEvent]) -> list[DeltaMessage]:
    """Parser events as chunk deltas, in order: a run of content is one delta, a run of tool-call
    pieces another (their `delta.tool_calls` items each carry `index`). A delta holds at most one item
    per call index, as OpenAI sends them: the parser gives a call out whole (start, then arguments), and
    the openai SDK's stream helper reads two items of one index in a chunk as two calls."""
    out: list[DeltaMessage] = []
    for ev in events:
        if isinstance(ev, ContentDelta):
            if out and out[-1].content is not None:
                out[-1].content += ev.text
            else:
                out.append(DeltaMessage(content=ev.text))
            continue
        if isinstance(ev, ReasoningDelta):  # thinking, under vLLM's name and the newer one
            if out and out[-1].reasoning_content is not None:
                out[-1].reasoning_content += ev.text
                out[-1].reasoning = out[-1].reasoning_content
            else:
                out.append(DeltaMessage(reasoning_content=ev.text, reasoning=ev.text))
            continue
        if isinstance(ev, ToolCallStart):
            item = DeltaToolCall(index=ev.index, id=ev.id, type="function",
                                 function=DeltaFunction(name=ev.name, arguments=""))
        else:
            assert isinstance(ev, ToolCallArguments)
            last = out[-1].tool_calls[-1] if out and out[-1].tool_calls else None
            if last is not None and last.index == ev.index:  # the call's id, name and arguments in one item
                last.function.arguments = (last.function.arguments or "") + ev.delta
                continue
            item = DeltaToolCall(index=ev.index, function=DeltaFunction(arguments=ev.delta))
        if out and out[-1].tool_calls is not None:
            out[-1].tool_calls.append(item)
        else:
            out.append(DeltaMessage(tool_calls=[item]))
    return out
