"""`POST /v1/chat/completions`: messages through the model's chat template, `n` samples, logprobs,
streamed as `chat.completion.chunk`s."""

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response

from engine import AsyncEngine, RequestOutput
from gateway import chat_template
from gateway.deps import Engine, State, check_model
from gateway.errors import APIError
from gateway.generation import Generation
from gateway.logprobs import chat_logprobs
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
from gateway.sampling import sampling_params
from gateway.sse import openai_stream, sse_response
from gateway.state import ServerState
from gateway.unsupported import reject_tools
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
async def create_chat_completion(body: ChatCompletionRequest, request: Request, state: State, engine: Engine):
    return await run_chat(body, state, engine, request)


async def run_chat(body: ChatCompletionRequest, state: ServerState, engine: AsyncEngine,
                   request: Request | None = None) -> ChatCompletionResponse | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None
    (and `stream` false, so the answer is a ChatCompletionResponse)."""
    model = check_model(state, body.model)
    reject_tools(body.tools, body.tool_choice, body.response_format)
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs to be true", param="top_logprobs")
    prompt = chat_template.render(engine.tokenizer, template_messages(body.messages), body.add_generation_prompt,
                                  **(body.chat_template_kwargs or {}))
    num_top = body.top_logprobs or 0
    params = sampling_params(
        body, n=body.n, max_tokens=body.max_completion_tokens or body.max_tokens,
        logprobs=num_top if body.logprobs else None, temperature=body.temperature, top_p=body.top_p,
        stop=body.stop, seed=body.seed, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
    )
    gen = Generation(state, engine, request)
    await gen.start([prompt], params)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(openai_stream(_stream(gen, body, model, include_usage)), gen.close)

    (final,) = await gen.finals()
    choices = [
        ChatChoice(
            index=o.index,
            message=AssistantMessage(content=o.text),
            logprobs=chat_logprobs(o.logprobs or [], num_top) if body.logprobs else None,
            finish_reason=o.finish_reason,
            stop_reason=o.stop_reason,
        )
        for o in final.outputs
    ]
    return ChatCompletionResponse(model=model, choices=choices, usage=usage_of([final]))


async def _stream(gen: Generation, body: ChatCompletionRequest, model: str, include_usage: bool
                  ) -> AsyncIterator[str]:
    rid, created = random_id("chatcmpl-"), now()

    def chunk(choices: list[ChatChunkChoice]) -> str:
        return ChatCompletionChunk(id=rid, created=created, model=model, choices=choices).model_dump_json()

    # OpenAI opens every choice with a role-only delta before any content.
    for k in range(body.n):
        yield chunk([ChatChunkChoice(index=k, delta=DeltaMessage(role="assistant", content=""))])
    finished: set[int] = set()
    final: RequestOutput | None = None
    async for _, out in gen.outputs():
        for o in out.outputs:
            if o.index in finished:
                continue
            lp = chat_logprobs(o.delta_logprobs, body.top_logprobs or 0) if body.logprobs and o.delta_logprobs else None
            if o.delta_text or lp is not None:
                yield chunk([ChatChunkChoice(index=o.index, delta=DeltaMessage(content=o.delta_text), logprobs=lp)])
            if o.finish_reason:
                finished.add(o.index)
                yield chunk([ChatChunkChoice(index=o.index, delta=DeltaMessage(), finish_reason=o.finish_reason,
                                             stop_reason=o.stop_reason)])
        if out.finished:
            final = out
    if include_usage and final is not None:
        yield ChatCompletionChunk(id=rid, created=created, model=model, choices=[],
                                  usage=usage_of([final])).model_dump_json()
