"""`POST /v1/chat/completions`: messages through the model's chat template, `n` samples, logprobs,
tool calls and structured output (gateway/tools.py), streamed as `chat.completion.chunk`s."""

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response

from engine import AsyncEngine, RequestOutput
from engine.tool_calling import MarkupFilter, ToolCallParser, parse_answer, strip_markup
from gateway import chat_template, proxy
from gateway import tools as tooling
from gateway.deps import State
from gateway.errors import APIError
from gateway.generation import Generation
from gateway.logprobs import chat_logprobs
from gateway.priority import check_client_priority
from gateway.protocol.chat import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    DeltaMessage,
)
from gateway.protocol.common import now, random_id
from gateway.registry import UpstreamModel
from gateway.sampling import sampling_params
from gateway.sse import openai_stream, sse_response
from gateway.state import ServerState
from gateway.usage import usage_of

router = APIRouter(prefix="/v1")


def template_messages(messages: list[ChatMessage]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        msg = {"role": m.role, "content": chat_template.content_text(m.content, f"messages[{i}].content")}
        for key in ("name", "tool_call_id", "tool_calls"):
            if getattr(m, key) is not None:
                msg[key] = getattr(m, key)
        out.append(msg)
    return out


@router.post("/chat/completions", response_model=ChatCompletionResponse)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, state: State):
    check_client_priority(state.settings, body.priority)  # before any forwarding: upstreams too
    served = state.models.resolve(body.model)
    if isinstance(served, UpstreamModel):
        return await proxy.forward(state, served, "/chat/completions", await proxy.request_body(request), request)
    return await run_chat(body, state, served.ready(), request)


async def run_chat(body: ChatCompletionRequest, state: ServerState, engine: AsyncEngine,
                   request: Request | None = None) -> ChatCompletionResponse | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None
    (and `stream` false, so the answer is a ChatCompletionResponse)."""
    model = engine.served_model_name
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs to be true", param="top_logprobs")
    messages = template_messages(body.messages)
    plan = tooling.with_history(tooling.plan_tools(body.tools, body.tool_choice, body.parallel_tool_calls,
                                                   tooling.structured_output(body.response_format, body)),
                                messages)
    prompt = tooling.render(engine.tokenizer, messages, plan, body.add_generation_prompt,
                            **(body.chat_template_kwargs or {}))
    num_top = body.top_logprobs or 0
    params = sampling_params(
        body, n=body.n, max_tokens=body.max_completion_tokens or body.max_tokens,
        logprobs=num_top if body.logprobs else None, temperature=body.temperature, top_p=body.top_p,
        stop=body.stop, seed=body.seed, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, guided=plan.guided,
    )
    gen = Generation(state, engine, request, body.priority)
    await gen.start([prompt], params)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(openai_stream(_stream(gen, body, model, include_usage, plan.parses_calls,
                                                  plan.strips_markup)), gen.close)

    (final,) = await gen.finals(tooling.RepeatWatch(gen.stop_choice) if plan.parses_calls else None)
    choices = []
    for o in final.outputs:
        if plan.parses_calls:
            content, calls, repeated = parse_answer(o.text)
        else:
            content, calls, repeated = (strip_markup(o.text) if plan.strips_markup else o.text), [], False
        choices.append(ChatChoice(
            index=o.index,
            message=AssistantMessage(content=content, tool_calls=[c.to_openai() for c in calls]),
            logprobs=chat_logprobs(o.logprobs or [], num_top) if body.logprobs else None,
            finish_reason=tooling.finish_reason(o.finish_reason, calls, repeated),
            stop_reason=o.stop_reason,
        ))
    return ChatCompletionResponse(model=model, choices=choices, usage=usage_of([final]))


async def _stream(gen: Generation, body: ChatCompletionRequest, model: str, include_usage: bool,
                  parses_calls: bool = False, strips_markup: bool = False) -> AsyncIterator[str]:
    rid, created = random_id("chatcmpl-"), now()

    def chunk(choices: list[ChatChunkChoice]) -> str:
        return ChatCompletionChunk(id=rid, created=created, model=model, choices=choices).model_dump_json()

    # OpenAI opens every choice with a role-only delta before any content.
    for k in range(body.n):
        yield chunk([ChatChunkChoice(index=k, delta=DeltaMessage(role="assistant", content=""))])
    finished: set[int] = set()
    final: RequestOutput | None = None
    # With tools offered, each choice's text goes through a parser: content and `delta.tool_calls`.
    parsers = {k: ToolCallParser() for k in range(body.n)} if parses_calls else {}
    # Without calls to parse but after tool results, our tool markup is filtered out of the text.
    filters = {k: MarkupFilter() for k in range(body.n)} if strips_markup else {}
    async for _, out in gen.outputs():
        for o in out.outputs:
            if o.index in finished:
                continue
            lp = chat_logprobs(o.delta_logprobs, body.top_logprobs or 0) if body.logprobs and o.delta_logprobs else None
            if parses_calls:
                parser = parsers[o.index]
                events = parser.feed(o.delta_text) + (parser.finish() if o.finish_reason else [])
                deltas = tooling.delta_messages(events)
                if lp is not None and not deltas:
                    deltas = [DeltaMessage()]
                for j, delta in enumerate(deltas):
                    yield chunk([ChatChunkChoice(index=o.index, delta=delta, logprobs=lp if j == 0 else None)])
            else:
                text = o.delta_text
                if strips_markup:
                    f = filters[o.index]
                    text = f.feed(text) + (f.finish() if o.finish_reason else "")
                if text or lp is not None:
                    yield chunk([ChatChunkChoice(index=o.index, delta=DeltaMessage(content=text), logprobs=lp)])
            # A repeated call ends the choice where it was written, and its engine sequence there.
            repeated = parses_calls and parsers[o.index].ended_by_repeat
            if o.finish_reason or repeated:
                finished.add(o.index)
                if not o.finish_reason:
                    gen.stop_choice(0, o.index)
                called = parsers[o.index].tool_calls if parses_calls else []
                reason = tooling.finish_reason(o.finish_reason, called, repeated)
                yield chunk([ChatChunkChoice(index=o.index, delta=DeltaMessage(), finish_reason=reason,
                                             stop_reason=o.stop_reason)])
        if out.finished:
            final = out
    if include_usage and final is not None:
        yield ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                  usage=usage_of([final])).model_dump_json()
