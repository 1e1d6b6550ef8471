"""Tool calling and structured output at the HTTP edge: request fields to a prompt and an engine
constraint, model text back to OpenAI's `tool_calls`.

The model side (the Hermes-style prompt, the xgrammar constraints, the streaming parser) lives in
`engine/tool_calling.py`, shared with the in-process LangChain model; this module only decides
which constraint a request gets and shapes what comes back for the wire:

- `tools` + `tool_choice` (`none | auto | required | named`) + `parallel_tool_calls`: the tool
  constraint (`guided_for_tools`); `none` offers no tools and parses nothing.
- `response_format` (`json_object | json_schema`), the Responses API's `text.format`, or one of
  vLLM's extras (`guided_json`, `guided_regex`, `guided_grammar`, `guided_choice`,
  `structured_outputs`): the output constraint. At most one of them per request.
- Both: with `tool_choice` `required` or a named function the calls win (the format is for the
  final answer, a later turn); with `auto` the output is either tool calls or the formatted
  answer, never free text (LangChain's agents send both and expect exactly that).

Bad input raises `engine.InvalidRequestError(message, param)`, which the error handlers answer as
a 400 naming the parameter."""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine import InvalidRequestError, RequestOutput
from engine.tool_calling import (
    JSON_REPLY_NOTE,
    ContentDelta,
    FunctionTool,
    StreamEvent,
    ToolCall,
    ToolCallArguments,
    ToolCallParser,
    ToolCallStart,
    ToolChoiceMode,
    compact_json_ebnf,
    guided_for_response_format,
    guided_for_tools,
    json_guided,
    normalize_tool_choice,
    normalize_tools,
    render_chat,
    wants_json_note,
    with_system_note,
)
from gateway import chat_template
from gateway.protocol.chat import DeltaFunction, DeltaMessage, DeltaToolCall
from gateway.protocol.common import GuidedExtras

__all__ = ["ToolPlan", "plan_tools", "render", "structured_output", "delta_messages", "finish_reason", "RepeatWatch"]


@dataclass(frozen=True)
class ToolPlan:
    """What a request asked for, checked: the tools offered, the choice, and the engine constraint."""

    tools: list[FunctionTool]
    choice: ToolChoiceMode | FunctionTool
    guided: dict[str, Any] | None
    raw_tools: list[Any] | None = None
    raw_choice: Any = None
    strips_markup: bool = False  # free text after tool results, no calls parsed: MarkupFilter

    @property
    def parses_calls(self) -> bool:
        """Whether the output is split into content and tool calls."""
        return bool(self.tools) and self.choice != "none"


def plan_tools(tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None,
               output: dict[str, Any] | None) -> ToolPlan:
    """`output` is the structured-output constraint (`structured_output`), or None."""
    fns = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, fns)
    parallel = True if parallel_tool_calls is None else parallel_tool_calls
    if not fns or choice == "none":
        return ToolPlan(fns, choice, output, tools, tool_choice)
    if output is None or choice != "auto":
        return ToolPlan(fns, choice, guided_for_tools(tools, tool_choice, parallel), tools, tool_choice)
    calls = guided_for_tools(tools, "required", parallel)
    assert calls is not None
    either = {"type": "or", "elements": [calls["structural_tag"]["format"], _as_format(output)]}
    return ToolPlan(fns, choice, {"structural_tag": {"type": "structural_tag", "format": either}}, tools, tool_choice)


def with_history(plan: ToolPlan, messages: list[dict[str, Any]]) -> ToolPlan:
    """Notes whether the answer's text must be filtered of our tool markup (MarkupFilter): with tool
    results in the history and no call parser (which removes it itself) to run."""
    return replace(plan, strips_markup=not plan.parses_calls and _uses_tool_history(messages))


def _as_format(guided: dict[str, Any]) -> dict[str, Any]:
    """An engine constraint (`SamplingParams.guided`) as an xgrammar structural-tag element (JSON
    compact, as the engine writes it alone)."""
    if "json_schema" in guided:
        return {"type": "grammar", "grammar": compact_json_ebnf(json.dumps(guided["json_schema"]))}
    if guided.get("json_object"):
        return {"type": "grammar", "grammar": compact_json_ebnf('{"type": "object"}', False)}
    if "regex" in guided:
        return {"type": "regex", "pattern": guided["regex"]}
    if "grammar" in guided:
        return {"type": "grammar", "grammar": guided["grammar"]}
    raise InvalidRequestError("this output constraint cannot be combined with tools", "tools")


# -- structured output ---------------------------------------------------------------------------


def _schema_guided(value: Any, param: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"{param} is not valid JSON: {exc}", param) from None
    try:
        guided = guided_for_response_format({"type": "json_schema", "schema": value}, param)
    except InvalidRequestError as exc:  # name the field the client sent, not our wrapping
        message = exc.message.replace(f"{param}.schema", param)
        raise InvalidRequestError(message, param) from None
    assert guided is not None
    return guided


def _check_compiles(kind: str, value: Any, param: str) -> None:
    """Regexes and grammars are compiled here, so a bad one is a 400 naming the field, not a
    failure inside the engine."""
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{param} must be a non-empty string", param)
    import xgrammar as xgr

    try:
        if kind == "regex":
            xgr.Grammar.from_regex(value)
        else:
            xgr.Grammar.from_ebnf(value)
    except Exception as exc:
        raise InvalidRequestError(f"{param} is not a valid {'regular expression' if kind == 'regex' else 'EBNF grammar'}"
                                  f": {exc}", param) from None


def _choice_guided(choices: Any, param: str) -> dict[str, Any]:
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise InvalidRequestError(f"{param} must be a non-empty list of non-empty strings", param)
    # JSON string escapes are EBNF string escapes too.
    return {"grammar": "root ::= " + " | ".join(json.dumps(c) for c in choices)}


def _extra_guided(key: str, value: Any, param: str) -> dict[str, Any] | None:
    if key not in ("json", "regex", "grammar", "choice", "json_object"):  # a typo, even with a null value
        raise InvalidRequestError(f"{param}: unknown structured output kind {key!r} "
                                  "(expected json, regex, grammar, choice or json_object)", param)
    if value is None:
        return None
    if key == "json":
        return _schema_guided(value, param)
    if key in ("regex", "grammar"):
        _check_compiles(key, value, param)
        return {key: value}
    if key == "choice":
        return _choice_guided(value, param)
    return json_guided() if value else None  # json_object


def structured_output(response_format: Any, extras: GuidedExtras | None = None,
                      format_param: str = "response_format") -> dict[str, Any] | None:
    """The output constraint of a request (None: free text), from `response_format` (or `text.format`)
    or one of vLLM's extras; more than one is a 400."""
    found: list[tuple[str, dict[str, Any]]] = []
    guided = guided_for_response_format(response_format, format_param)
    if guided is not None:
        found.append((format_param, guided))
    if extras is not None:
        for key in ("json", "regex", "grammar", "choice"):
            param = f"guided_{key}"
            guided = _extra_guided(key, getattr(extras, param), param)
            if guided is not None:
                found.append((param, guided))
        so = extras.structured_outputs
        if so is not None:
            if not isinstance(so, Mapping):
                raise InvalidRequestError("structured_outputs must be an object", "structured_outputs")
            for key, value in so.items():
                if key in ("disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                           "whitespace_pattern", "structural_tag"):
                    continue  # vLLM's backend knobs; our backend is fixed
                guided = _extra_guided(key, value, f"structured_outputs.{key}")
                if guided is not None:
                    found.append((f"structured_outputs.{key}", guided))
    if len(found) > 1:
        names = ", ".join(p for p, _ in found)
        raise InvalidRequestError(f"only one structured output constraint may be given, got {names}", found[1][0])
    return found[0][1] if found else None


# -- the prompt ----------------------------------------------------------------------------------


def _uses_tool_history(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def render(tokenizer, messages: list[dict[str, Any]], plan: ToolPlan, add_generation_prompt: bool = True,
           **template_kwargs: Any) -> str:
    """The prompt: the model's chat template as before for plain conversations, the tool-aware
    rendering (tools offered, past calls and results in the history) otherwise. A reply constrained
    to any JSON object (`json_object`) is announced in the system message (JSON_REPLY_NOTE)."""
    if wants_json_note(plan.guided):
        messages = with_system_note(messages, JSON_REPLY_NOTE)
    if not plan.tools and not _uses_tool_history(messages):
        return chat_template.render(tokenizer, messages, add_generation_prompt, **template_kwargs)
    return render_chat(tokenizer, messages, plan.raw_tools, plan.raw_choice,
                       add_generation_prompt=add_generation_prompt, **template_kwargs)


# -- output --------------------------------------------------------------------------------------


class RepeatWatch:
    """Reads each sample's text as it is generated, for a non-streamed answer: when a repeated call
    ends a sample's answer (the parser drops it and all after it), the sample is stopped in the
    engine there instead of running on to max_tokens for text that is thrown away."""

    def __init__(self, stop: Callable[[int, int], None]):
        self._stop = stop  # (prompt index, sample index): Generation.stop_choice
        self._parsers: dict[tuple[int, int], ToolCallParser] = {}

    def __call__(self, prompt_index: int, out: RequestOutput) -> None:
        for o in out.outputs:
            parser = self._parsers.setdefault((prompt_index, o.index), ToolCallParser())
            if parser.ended_by_repeat:
                continue
            parser.feed(o.delta_text)
            if parser.ended_by_repeat and o.finish_reason is None:
                self._stop(prompt_index, o.index)


def finish_reason(reason: str | None, calls: list[ToolCall], ended_by_repeat: bool = False) -> str | None:
    """OpenAI's `tool_calls` when the model stopped after calling, or when a repeated call ended the
    answer (the parser dropped it and all after it, so nothing was cut); a cut-off (`length`) stays,
    even where the only thing cut was a call the parser withheld."""
    if calls and (reason == "stop" or ended_by_repeat):
        return "tool_calls"
    return reason


def delta_messages(events: list[StreamEvent]) -> list[DeltaMessage]:
    """Parser events as chunk deltas, in order: a run of content is one delta, a run of tool-call
    pieces another (their `delta.tool_calls` items each carry `index`)."""
    out: list[DeltaMessage] = []
    for ev in events:
        if isinstance(ev, ContentDelta):
            if out and out[-1].content is not None:
                out[-1].content += ev.text
            else:
                out.append(DeltaMessage(content=ev.text))
            continue
        if isinstance(ev, ToolCallStart):
            item = DeltaToolCall(index=ev.index, id=ev.id, type="function",
                                 function=DeltaFunction(name=ev.name, arguments=""))
        else:
            assert isinstance(ev, ToolCallArguments)
            last = out[-1].tool_calls[-1] if out and out[-1].tool_calls else None
            if last is not None and last.index == ev.index and last.id is None:  # one fragment per call per chunk
                last.function.arguments = (last.function.arguments or "") + ev.delta
                continue
            item = DeltaToolCall(index=ev.index, function=DeltaFunction(arguments=ev.delta))
        if out and out[-1].tool_calls is not None:
            out[-1].tool_calls.append(item)
        else:
            out.append(DeltaMessage(tool_calls=[item]))
    return out
