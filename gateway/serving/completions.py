"""Completions served by an embedded engine: one engine request per prompt, `n` samples each
(`best_of` keeps the n with the highest cumulative logprob), optional echo and logprobs, structured
output as vLLM takes it, streamed or not. Callable without HTTP (batch lines)."""

from collections.abc import AsyncIterator

from fastapi import Request, Response

from engine import AsyncEngine, CompletionOutput, RequestOutput
from engine.chat import EXTRA_FIELDS, structured_output
from gateway.limits.usage import usage_of
from gateway.protocol.common import now, random_id
from gateway.protocol.completions import CompletionChoice, CompletionRequest, CompletionResponse
from gateway.serving.generation import Generation
from gateway.serving.logprobs import completion_logprobs
from gateway.serving.sampling import sampling_params
from gateway.state import ServerState
from gateway.web.errors import APIError
from gateway.web.sse import openai_stream, sse_response


def _prompts(prompt: str | list) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt must not be empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return list(prompt)


def _check(body: CompletionRequest) -> int:
    """Refuses what we do not do, clearly; returns best_of."""
    if body.suffix:
        raise APIError(400, "suffix (fill-in-the-middle) is not supported by this server", param="suffix")
    best_of = body.best_of or body.n
    if best_of < body.n:
        raise APIError(400, f"best_of ({best_of}) must be at least n ({body.n})", param="best_of")
    if body.stream and best_of != body.n:
        raise APIError(400, "best_of other than n cannot be streamed", param="best_of")
    if body.echo and body.logprobs is not None:
        raise APIError(400, "echo together with logprobs needs prompt logprobs, which are not supported",
                       param="echo")
    return best_of


def _cumulative_logprob(o: CompletionOutput) -> float:
    return sum(lp.chosen.logprob for lp in o.logprobs or [])


async def run_completion(body: CompletionRequest, state: ServerState, engine: AsyncEngine,
                         request: Request | None = None) -> CompletionResponse | Response:
    """The endpoint itself, callable without HTTP: batch lines run through it with `request` None
    (and `stream` false, so the answer is a CompletionResponse)."""
    model = engine.served_model_name
    best_of = _check(body)
    prompts = _prompts(body.prompt)
    # best_of ranks samples by cumulative logprob, so it needs the chosen tokens' logprobs.
    logprobs = body.logprobs if body.logprobs is not None else (0 if best_of > body.n else None)
    params = sampling_params(
        body, n=best_of, max_tokens=body.max_tokens, logprobs=logprobs, temperature=body.temperature,
        top_p=body.top_p, stop=body.stop, seed=body.seed, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        guided=structured_output(body.response_format, body.model_dump(include=set(EXTRA_FIELDS))),
        defaults=engine.sampling_defaults,
    )
    gen = Generation(state, engine, request, body.priority)
    await gen.start(prompts, params)
    echo = [_prompt_text(engine, p) for p in prompts] if body.echo else None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(openai_stream(_stream(gen, body, model, echo, include_usage)), gen.close)

    finals = await gen.finals()
    choices = []
    for i, final in enumerate(finals):
        outs = final.outputs
        if best_of > body.n:
            outs = sorted(outs, key=_cumulative_logprob, reverse=True)[: body.n]
        for k, o in enumerate(outs):
            prefix = echo[i] if echo else ""
            lp = completion_logprobs(o.logprobs, body.logprobs, len(prefix)) if body.logprobs is not None else None
            choices.append(CompletionChoice(index=i * body.n + k, text=prefix + o.text, logprobs=lp,
                                            finish_reason=o.finish_reason, stop_reason=o.stop_reason))
    return CompletionResponse(model=model, choices=choices, usage=usage_of(finals))


def _prompt_text(engine, prompt: str | list[int]) -> str:
    return prompt if isinstance(prompt, str) else engine.tokenizer.decode(prompt)


async def _stream(gen: Generation, body: CompletionRequest, model: str, echo: list[str] | None,
                  include_usage: bool) -> AsyncIterator[str]:
    rid, created = random_id("cmpl-"), now()
    offsets: dict[int, int] = {}
    finished: set[int] = set()
    finals: dict[int, RequestOutput] = {}
    async for i, out in gen.outputs():
        for o in out.outputs:
            index = i * body.n + o.index
            if index in finished:
                continue
            text = o.delta_text
            if echo and index not in offsets:
                text = echo[i] + text
            lp = None
            if body.logprobs is not None and o.delta_logprobs:
                lp = completion_logprobs(o.delta_logprobs, body.logprobs, offsets.get(index, 0))
            if not text and not o.finish_reason and lp is None:
                continue
            offsets[index] = offsets.get(index, 0) + len(text)
            if o.finish_reason:
                finished.add(index)
            chunk = CompletionResponse(id=rid, created=created, model=model, choices=[CompletionChoice(
                index=index, text=text, logprobs=lp, finish_reason=o.finish_reason, stop_reason=o.stop_reason)])
            yield chunk.model_dump_json()
        if out.finished:
            finals[i] = out
    if include_usage:
        usage = usage_of(list(finals.values()))
        yield CompletionResponse(id=rid, created=created, model=model, choices=[], usage=usage).model_dump_json()
