"""From a question to SQL text: the prompt, the grammar, and a pluggable model call.

The model call is a parameter, not a dependency: anything with the shape
``complete(prompt, guided) -> str`` (or an async one) works. ``guided`` is ``None`` for free
decoding or ``GuidedSpec(Grammar(ebnf))``, the engine's ``SamplingParams.guided``. Factories below wrap
our offline ``LLM``, the gateway's ``AsyncEngine`` and any OpenAI-compatible ``/v1/completions``
server (vLLM takes the grammar as ``guided_grammar``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from integrations.text2sql.dataset import PROMPT_TEMPLATE
from integrations.text2sql.errors import GenerationError, Text2SQLError
from integrations.text2sql.grammar import GrammarOptions
from integrations.text2sql.sources import Source
from integrations.text2sql.value_hints import prompt_ddl, render_hints

if TYPE_CHECKING:  # the engine (torch) loads only when a request is constrained
    pass

Guided = "GuidedSpec | None"  # a Grammar constraint, or None for free decoding
Complete = Callable[[str, Guided], str]
AsyncComplete = Callable[[str, Guided], Awaitable[str]]
CompleteBatch = Callable[[Sequence[tuple[str, Guided]]], list[str]]

DEFAULT_MAX_TOKENS = 192
# Free decoding has no grammar to end it; these end a query in the seed prompt's format (the model
# would otherwise go on with the next "### Question:" or a second statement).
UNCONSTRAINED_STOP = (";", "\n\n", "###")
GRAMMAR_TERMINATORS = GrammarOptions().terminators


def extract_sql(text: str) -> str:
    """The first statement of a model output: cut at ``;`` (outside quotes), a blank line or ``###``.

    Also drops a Markdown code fence around the query, which chat-tuned models like to add."""
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.split("```", 1)[0]
    for marker in ("\n\n", "###"):
        text = text.split(marker, 1)[0]
    quote: str | None = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
        elif ch == ";":
            return text[:i].strip()
    return text.strip()


def render(template: str, ddl: str, question: str) -> str:
    """Fills a prompt template with ``{ddl}``, ``{question}`` and an empty ``{query}``."""
    return template.format(ddl=ddl, question=question.strip(), query="")


@dataclass
class Generation:
    sql: str  # the extracted statement, ready for validation
    raw: str  # what the model returned (the retry's output when there was one)
    prompt: str
    constrained: bool
    generation_ms: float  # every model call for this question, retry included
    terminators: tuple[str, ...] = GRAMMAR_TERMINATORS
    retried: bool = False  # the full grammar ran out of tokens; this is the compact grammar's output

    @property
    def truncated(self) -> bool:
        """A constrained output that did not reach the grammar's end (``;`` or newline) was cut by
        ``max_tokens``: its text may still parse, but it is not the query the model meant."""
        return self.constrained and not self.raw.endswith(self.terminators)


class SQLGenerator:
    """Builds prompts and grammars for a source and calls the model.

    ``template`` is the seed chapter's prompt by default; any ``str.format`` template with ``{ddl}``
    and ``{question}`` (and optionally ``{query}``) works.

    A small model sometimes loops inside what the grammar allows (the same column ten times, an
    alias that never ends) until ``max_tokens`` cuts it. With ``retry_truncated`` such a question is
    asked once more under :meth:`GrammarOptions.compact`, whose sentences are all short, so
    constrained decoding still ends in a complete SELECT.

    With ``value_hints`` the DDL is followed by the stored values the question names
    (:mod:`.value_hints`), for an adapter trained on such prompts.
    """

    def __init__(
        self,
        complete: Complete | None = None,
        acomplete: AsyncComplete | None = None,
        *,
        complete_batch: CompleteBatch | None = None,
        template: str = PROMPT_TEMPLATE,
        grammar_options: GrammarOptions | None = None,
        retry_truncated: bool = True,
        retry_options: GrammarOptions | None = None,
        value_hints: bool = False,
    ):
        if complete is None and acomplete is None and complete_batch is None:
            raise ValueError("SQLGenerator needs a complete, acomplete or complete_batch callable")
        if "{ddl}" not in template or "{question}" not in template:
            raise ValueError("the prompt template must contain {ddl} and {question}")
        self.complete = complete
        self.acomplete = acomplete
        self.complete_batch = complete_batch
        self.template = template
        self.grammar_options = grammar_options
        self.retry_truncated = retry_truncated
        self.value_hints = value_hints
        terminators = (grammar_options or GrammarOptions()).terminators
        self.retry_options = retry_options or GrammarOptions.compact(
            terminators=terminators, dialect=grammar_options.dialect if grammar_options else None
        )

    def prompt(self, source: Source, question: str) -> str:
        hints = render_hints(source.values().match(question)) if self.value_hints else ""
        return render(self.template, prompt_ddl(source.ddl(), hints), question)

    def guided(self, source: Source, constrained: bool = True, *, retry: bool = False) -> Guided:
        if not constrained:
            return None
        from engine.guided_spec import Grammar, GuidedSpec

        return GuidedSpec(Grammar(source.grammar(self.retry_options if retry else self.grammar_options)))

    def _make(self, raw: object, prompt: str, constrained: bool, ms: float, retried: bool = False) -> Generation:
        if not isinstance(raw, str):
            raise GenerationError(f"the model call returned {type(raw).__name__}, not text")
        terminators = (self.grammar_options or GrammarOptions()).terminators
        return Generation(extract_sql(raw), raw, prompt, constrained, ms, terminators, retried)

    def _needs_retry(self, gen: Generation) -> bool:
        return self.retry_truncated and gen.truncated

    # -- one question ------------------------------------------------------------------------------
    def _call(self, prompt: str, guided: Guided) -> str:
        try:
            if self.complete is not None:
                return self.complete(prompt, guided)
            if self.complete_batch is not None:
                return self.complete_batch([(prompt, guided)])[0]
            return asyncio.run(self.acomplete(prompt, guided))  # type: ignore[misc, arg-type]
        except Exception as exc:
            raise _generation_error(exc) from exc

    async def _acall(self, prompt: str, guided: Guided) -> str:
        try:
            if self.acomplete is not None:
                return await self.acomplete(prompt, guided)
            if self.complete is not None:
                return await asyncio.to_thread(self.complete, prompt, guided)
            return (await asyncio.to_thread(self.complete_batch, [(prompt, guided)]))[0]  # type: ignore[arg-type]
        except Exception as exc:
            raise _generation_error(exc) from exc

    def generate(self, source: Source, question: str, *, constrained: bool = True) -> Generation:
        prompt = self.prompt(source, question)
        start = time.perf_counter()
        gen = self._make(self._call(prompt, self.guided(source, constrained)), prompt, constrained, 0.0)
        if self._needs_retry(gen):
            raw = self._call(prompt, self.guided(source, constrained, retry=True))
            gen = self._make(raw, prompt, constrained, 0.0, retried=True)
        gen.generation_ms = (time.perf_counter() - start) * 1000
        return gen

    async def agenerate(self, source: Source, question: str, *, constrained: bool = True) -> Generation:
        # Introspection and grammar building may hit the database: keep them off the event loop.
        prompt, guided = await asyncio.to_thread(lambda: (self.prompt(source, question),
                                                          self.guided(source, constrained)))
        start = time.perf_counter()
        gen = self._make(await self._acall(prompt, guided), prompt, constrained, 0.0)
        if self._needs_retry(gen):
            retry = await asyncio.to_thread(self.guided, source, constrained, retry=True)
            gen = self._make(await self._acall(prompt, retry), prompt, constrained, 0.0, retried=True)
        gen.generation_ms = (time.perf_counter() - start) * 1000
        return gen

    # -- many questions ----------------------------------------------------------------------------
    def generate_many(self, requests: Sequence[tuple[Source, str]], *, constrained: bool = True) -> list[Generation]:
        """Many questions in one model call when a batch callable exists (continuous batching makes
        that far faster than one by one); ``generation_ms`` is then the batch's wall time (plus the
        retry batch's for the questions that needed one)."""
        if self.complete_batch is None:
            return [self.generate(s, q, constrained=constrained) for s, q in requests]
        prompts = [self.prompt(s, q) for s, q in requests]
        start = time.perf_counter()
        raws = self._batch([(p, self.guided(s, constrained)) for p, (s, _) in zip(prompts, requests, strict=True)])
        gens = [self._make(raw, p, constrained, 0.0) for raw, p in zip(raws, prompts, strict=True)]
        first_ms = (time.perf_counter() - start) * 1000
        for g in gens:
            g.generation_ms = first_ms
        redo = [i for i, g in enumerate(gens) if self._needs_retry(g)]
        if redo:
            start = time.perf_counter()
            raws = self._batch([(prompts[i], self.guided(requests[i][0], constrained, retry=True)) for i in redo])
            retry_ms = (time.perf_counter() - start) * 1000
            for i, raw in zip(redo, raws, strict=True):
                gens[i] = self._make(raw, prompts[i], constrained, first_ms + retry_ms, retried=True)
        return gens

    def _batch(self, requests: list[tuple[str, Guided]]) -> list[str]:
        try:
            return self.complete_batch(requests)  # type: ignore[misc]
        except Exception as exc:
            raise _generation_error(exc) from exc


def _generation_error(exc: Exception) -> Exception:
    if isinstance(exc, Text2SQLError):
        return exc
    return GenerationError(f"the model call failed: {type(exc).__name__}: {exc}")


# -- model-call factories ------------------------------------------------------------------------

def sampling_params(guided: Guided, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                    seed: int | None = None):
    """The engine's SamplingParams for one text-to-SQL call (free decoding gets stop strings)."""
    from engine import SamplingParams

    stop = [] if guided else list(UNCONSTRAINED_STOP)
    return SamplingParams(temperature=temperature, max_tokens=max_tokens, guided=guided, stop=stop, seed=seed)


def llm_complete(llm: Any, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                 lora: str | None = None) -> Complete:
    """A :data:`Complete` over the offline ``engine.LLM`` (through LoRA adapter ``lora`` when named)."""

    def complete(prompt: str, guided: Guided) -> str:
        params = sampling_params(guided, max_tokens, temperature)
        return llm.generate([prompt], params, use_tqdm=False, lora_request=lora)[0].outputs[0].text

    return complete


def llm_complete_batch(llm: Any, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0,
                       lora: str | None = None, seed: int | None = None) -> CompleteBatch:
    """A :data:`CompleteBatch`: every prompt goes to ``LLM.generate`` at once.

    With ``seed``, request n of a call samples with seed ``seed + n``: the same batch draws the same
    candidates in every run (an evaluation of sampled candidates repeats), and no two requests of a
    batch share their draws."""

    def complete_batch(requests: Sequence[tuple[str, Guided]]) -> list[str]:
        prompts = [p for p, _ in requests]
        params = [sampling_params(g, max_tokens, temperature, None if seed is None else seed + n)
                  for n, (_, g) in enumerate(requests)]
        return [out.outputs[0].text for out in llm.generate(prompts, params, use_tqdm=False, lora_request=lora)]

    return complete_batch


def async_engine_complete(engine: Any, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0) -> AsyncComplete:
    """An :data:`AsyncComplete` over ``engine.AsyncEngine`` (the gateway's embedded engine)."""

    async def acomplete(prompt: str, guided: Guided) -> str:
        out = await engine.generate_full(prompt, sampling_params(guided, max_tokens, temperature))
        return out.outputs[0].text

    return acomplete


def openai_body(model: str, prompt: str, guided: Guided, max_tokens: int, grammar_field: str,
                temperature: float = 0.0) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
    if guided:
        # vLLM < 0.10 reads "guided_grammar"; newer vLLM reads {"structured_outputs": {"grammar": ...}}.
        ebnf = guided.constraint.ebnf  # type: ignore[union-attr] - ours are always a Grammar
        head, _, tail = grammar_field.partition(".")
        body[head] = {tail: ebnf} if tail else ebnf
    else:
        body["stop"] = list(UNCONSTRAINED_STOP)
    return body


def openai_complete(base_url: str, model: str, api_key: str = "EMPTY", *, max_tokens: int = DEFAULT_MAX_TOKENS,
                    grammar_field: str = "guided_grammar", timeout_s: float = 120.0) -> Complete:
    """A :data:`Complete` over an OpenAI-compatible ``/v1/completions`` (vLLM, another sllm)."""
    import httpx

    url = base_url.rstrip("/") + "/completions"
    headers = {"Authorization": f"Bearer {api_key}"}

    def complete(prompt: str, guided: Guided) -> str:
        body = openai_body(model, prompt, guided, max_tokens, grammar_field)
        resp = httpx.post(url, json=body, headers=headers, timeout=timeout_s)
        resp.raise_for_status()
        return resp.json()["choices"][0]["text"]

    return complete


def openai_acomplete(base_url: str, model: str, api_key: str = "EMPTY", *, max_tokens: int = DEFAULT_MAX_TOKENS,
                     grammar_field: str = "guided_grammar", timeout_s: float = 120.0) -> AsyncComplete:
    """The async twin of :func:`openai_complete`."""
    import httpx

    url = base_url.rstrip("/") + "/completions"
    headers = {"Authorization": f"Bearer {api_key}"}

    async def acomplete(prompt: str, guided: Guided) -> str:
        body = openai_body(model, prompt, guided, max_tokens, grammar_field)
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            resp = await client.post(url, json=body, headers=headers)
        resp.raise_for_status()
        return resp.json()["choices"][0]["text"]

    return acomplete
