"""Guided-decoding specs (`SamplingParams.guided`) for tool calls and OpenAI's `response_format`.

Small models (SmolLM2-135M) rarely write a call correctly on their own, so the tool spec is an
xgrammar structural tag: once a call is opened, the tool name must be one of the offered ones and
the arguments must match that tool's JSON schema, so every call parses."""

import json
from collections.abc import Mapping
from typing import Any

from engine.chat.gemma4_grammar import gemma4_tag
from engine.chat.json_ebnf import compact_json_ebnf
from engine.chat.tool_formats import HERMES, ToolFormat
from engine.chat.tools import (
    NAME_RE,
    FunctionTool,
    as_dict,
    check_json_schema,
    normalize_tool_choice,
    normalize_tools,
    offered_tools,
)
from engine.errors import InvalidRequestError
from engine.guided_spec import (
    Grammar,
    GuidedSpec,
    JsonObject,
    JsonSchema,
    Regex,
    StructuralTag,
    ToolCalls,
)
from engine.json_budget import CallFormat


def json_guided(schema: dict[str, Any] | None = None) -> GuidedSpec:
    """`SamplingParams.guided` for compact JSON matching `schema`, or any JSON object without one."""
    if schema is None:
        return GuidedSpec(JsonObject(any_whitespace=False))
    return GuidedSpec(JsonSchema(schema, any_whitespace=False))


def _tool_tag(tool: FunctionTool, index: int, fmt: ToolFormat, tokens: bool = False) -> dict[str, Any]:
    """One tool's call. `tokens`: the format's marks are written as the single special tokens the model
    was trained on (Mistral's `[TOOL_CALLS]name[ARGS]`), never spelled out of ordinary tokens."""
    param = f"tools[{index}].function.parameters"
    try:
        if fmt.xml:  # Qwen3-Coder's `<parameter=k>\nv\n</parameter>`: xgrammar's own style for it
            import xgrammar as xgr

            xgr.Grammar.from_json_schema(json.dumps(tool.parameters))  # refused features raise here
            # One blank at most between the marks, as the template writes them: a small model left free
            # there writes whitespace until max_tokens. String values are not limited by it.
            content = {"type": "json_schema", "json_schema": tool.parameters, "style": "qwen_xml",
                       "max_whitespace_cnt": 1}
        else:  # key order kept: the grammar follows it
            content = {"type": "grammar", "grammar": compact_json_ebnf(json.dumps(tool.parameters))}
    except Exception as exc:  # xgrammar refuses schema features it cannot turn into a grammar
        raise InvalidRequestError(f"{param}: the parameters schema of {tool.name!r} is not supported: {exc}",
                                  param) from exc
    if tokens:
        content = {"type": "sequence", "elements": [{"type": "const_string", "value": tool.name},
                                                     {"type": "token", "token": fmt.args_mark}, content]}
        return {"type": "tag", "begin": {"type": "token", "token": fmt.trigger}, "content": content, "end": fmt.end}
    return {"type": "tag", "begin": fmt.begin(tool.name), "content": content, "end": fmt.end}


def _gemma4_tag(tool: FunctionTool, index: int, special: frozenset[str], forced: bool) -> dict[str, Any]:
    try:
        return gemma4_tag(tool, special, forced)
    except Exception as exc:  # xgrammar refuses schema features it cannot turn into a grammar
        param = f"tools[{index}].function.parameters"
        raise InvalidRequestError(f"{param}: the parameters schema of {tool.name!r} is not supported: {exc}",
                                  param) from exc


def guided_for_tools(tools: list[Any] | None, tool_choice: Any = "auto", parallel_tool_calls: bool = True,
                     fmt: ToolFormat = HERMES, special: frozenset[str] = frozenset()) -> GuidedSpec | None:
    """`SamplingParams.guided` for a tool request in the model's tool format (engine/chat/tool_formats.py),
    or None when nothing is constrained.

    auto: free text, but an opened call (its format's trigger) must be a valid call to an offered tool.
    required: one or more valid calls and nothing else (the output starts with a call).
    named: exactly one call to that function.
    `parallel_tool_calls=False` allows at most one call (generation stops after it).
    `special`: the format's marks that are single special tokens of the model's tokenizer; where a call is
    required and all its marks are, the grammar writes those tokens (under auto the trigger is read as text,
    which the special token's text matches too)."""
    fns = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, fns)
    shown = offered_tools(fns, choice)
    if not shown:
        return None
    one = not parallel_tool_calls or isinstance(choice, FunctionTool)
    if fmt.pythonic:
        return _pythonic_guided(shown, choice, one)
    if fmt.gemma:
        tags = [_gemma4_tag(t, fns.index(t), special, choice != "auto") for t in shown]
    else:
        tokens = choice != "auto" and bool(fmt.args_mark) and {fmt.trigger, fmt.args_mark} <= special
        tags = [_tool_tag(t, fns.index(t), fmt, tokens) for t in shown]
    # What budget-aware closing (engine/json_budget.py) needs to finish a call the budget would cut (JSON only).
    formats = tuple(CallFormat(fmt.begin(t.name), t.parameters, fmt.end) for t in shown)
    closing = None if fmt.xml or fmt.gemma else ToolCalls(formats, fmt.trigger, choice != "auto")
    if choice == "auto":
        auto: dict[str, Any] = {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags,
                                "at_least_one": False, "stop_after_first": one}
        return GuidedSpec(StructuralTag({"type": "structural_tag", "format": auto}, closing))
    call = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    newline = {"type": "const_string", "value": fmt.separator}
    if one:
        shape = call
    elif not fmt.separator:  # calls back to back (Gemma 4's)
        shape = {"type": "plus", "content": call}
    else:
        # call ("\n" call)* "\n"?  -- not tags_with_separator: there a newline after a call commits
        # to another call, and a small model that writes the newline out of habit gets trapped
        # into repeating calls until max_tokens. Here it can still end after the newline.
        more = {"type": "star", "content": {"type": "sequence", "elements": [newline, call]}}
        shape = {"type": "sequence", "elements": [call, more, {"type": "optional", "content": newline}]}
    return GuidedSpec(StructuralTag({"type": "structural_tag", "format": shape}, closing))


def _pythonic_guided(shown: list[FunctionTool], choice: Any, one: bool) -> GuidedSpec:
    """One list of calls (engine/chat/pythonic.py); under auto each `[` opens one, so free text has none.
    No budget closing: it closes JSON only."""
    from engine.chat.pythonic_grammar import pythonic_tag

    try:
        tag = pythonic_tag(shown, one)
    except Exception as exc:  # xgrammar refuses schema features it cannot turn into a grammar
        raise InvalidRequestError(f"a tool's parameters schema is not supported: {exc}", "tools") from exc
    if choice == "auto":
        auto = {"type": "triggered_tags", "triggers": ["["], "tags": [tag], "at_least_one": False,
                "stop_after_first": one}
        return GuidedSpec(StructuralTag({"type": "structural_tag", "format": auto}))
    return GuidedSpec(StructuralTag({"type": "structural_tag", "format": tag}))


def guided_for_response_format(response_format: Any, param: str = "response_format") -> GuidedSpec | None:
    """`SamplingParams.guided` for OpenAI's `response_format` (`text | json_object | json_schema` with
    `{"json_schema": {"name", "schema", "strict"}}`) or the Responses API's `text.format`
    (`{"type": "json_schema", "name", "schema", "strict"}`; pass `param="text.format"`)."""
    rf = as_dict(response_format)
    if rf is None:
        return None
    if not isinstance(rf, Mapping):
        raise InvalidRequestError(f"{param} must be an object", param)
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_guided()
    if kind != "json_schema":
        raise InvalidRequestError(f"{param}.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                                  f"{param}.type")
    nested = "json_schema" in rf
    spec = rf.get("json_schema") if nested else rf
    where = f"{param}.json_schema" if nested else param
    if not isinstance(spec, Mapping):
        raise InvalidRequestError(f"{where} must be an object with a `schema`", where)
    name = spec.get("name")
    if name is not None and (not isinstance(name, str) or not NAME_RE.match(name)):
        raise InvalidRequestError(f"{where}.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r}", f"{where}.name")
    schema = spec.get("schema", spec.get("schema_"))
    if schema is None:
        return json_guided()  # OpenAI: a json_schema format without a schema is any JSON object
    check_json_schema(schema, f"{where}.schema")
    try:
        import xgrammar as xgr

        xgr.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)
    except Exception as exc:
        raise InvalidRequestError(f"{where}.schema is not supported: {exc}", f"{where}.schema") from exc
    # Always strict: the grammar is then a subset of what a non-strict schema allows, so outputs
    # still validate, and a small model is not tempted into extra properties. Compact, as for tools.
    return json_guided(schema)


def wants_json_note(guided: GuidedSpec | None) -> bool:
    return guided is not None and isinstance(guided.constraint, JsonObject)


def as_format(guided: GuidedSpec) -> dict[str, Any]:
    """An engine constraint (`SamplingParams.guided`) as an xgrammar structural-tag element (JSON
    compact, as the engine writes it alone)."""
    c = guided.constraint
    if isinstance(c, JsonSchema):
        return {"type": "grammar", "grammar": compact_json_ebnf(json.dumps(c.schema_dict()))}
    if isinstance(c, JsonObject):
        return {"type": "grammar", "grammar": compact_json_ebnf('{"type": "object"}', False)}
    if isinstance(c, Regex):
        return {"type": "regex", "pattern": c.pattern}
    if isinstance(c, Grammar):
        return {"type": "grammar", "grammar": c.ebnf}
    raise InvalidRequestError("this output constraint cannot be combined with tools", "tools")
