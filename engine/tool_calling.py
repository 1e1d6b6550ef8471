"""OpenAI tool calling and structured output, model side: the prompt, the grammar, the parser.

Shared by the gateway (HTTP) and the in-process LangChain model, so nothing here knows about HTTP;
bad input raises `InvalidRequestError(message, param)` and the caller maps it to its own 400.

The calling convention is Hermes-style, the one most small open models were tuned on:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Seoul"}}
    </tool_call>

Small models (SmolLM2-135M) rarely write that correctly on their own, so `guided_for_tools` returns an
xgrammar structural tag for `SamplingParams.guided`: once a call is opened, the tool name must be one
of the offered ones and the arguments must match that tool's JSON schema, so every call parses."""

import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from engine.errors import InvalidRequestError

log = logging.getLogger(__name__)

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
# Our prompt markup that content must never hold: the tool-result tags our preamble wraps results
# in and a stray call end. Answering after a tool result, the default model echoes the result in
# them (`<tool_response>\n7006652\n</tool_response>`): the tags are removed from content, by the
# call parser and by `MarkupFilter` where no calls are parsed. Not excluded at decode time: measured
# on 20 such answers (tests/engine/test_structured_guarantees.py), excluding the tags from the
# grammar's free text made the model write near-tags instead (`<tool_response]`) and hold the right
# number in 14/20 answers, against 20/20 echoed and stripped at temperature 0; excluding `<tool_r`
# made it call the tool again (20/20), and banning the `<` token (logit bias) gave 6/20.
TOOL_MARKUP = (TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE, TOOL_CALL_CLOSE)
# OpenAI's rule for function and response_format names.
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

ToolChoiceMode = Literal["none", "auto", "required"]


# -- tools and tool_choice -----------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionTool:
    """One offered function, whichever wire shape it came in (Chat Completions or Responses)."""

    name: str
    description: str | None
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _as_dict(value: Any) -> Any:
    """Pydantic request models (the gateway's) and plain dicts both work."""
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


def _check_json_schema(schema: Any, param: str) -> None:
    """A schema jsonschema itself rejects is the client's error, named where it is."""
    import jsonschema

    if not isinstance(schema, dict):
        raise InvalidRequestError(f"{param} must be a JSON schema object", param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidRequestError(f"{param} is not a valid JSON schema: {exc.message}"
                                  + (f" (at {where})" if where else ""), param) from exc


def normalize_tools(tools: Iterable[Any] | None, param: str = "tools") -> list[FunctionTool]:
    """Validates `tools` in either shape: `{"type": "function", "function": {name, description,
    parameters}}` (Chat Completions) or `{"type": "function", name, description, parameters}` (Responses)."""
    result: list[FunctionTool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools or []):
        where = f"{param}[{i}]"
        tool = _as_dict(raw)
        if not isinstance(tool, Mapping):
            raise InvalidRequestError(f"{where} must be an object", where)
        kind = tool.get("type", "function")
        if kind != "function":
            raise InvalidRequestError(f"{where}: tool type {kind!r} is not supported; only function tools are",
                                      f"{where}.type")
        fn = tool.get("function", tool)
        fn_where = f"{where}.function" if "function" in tool else where
        if not isinstance(fn, Mapping):
            raise InvalidRequestError(f"{fn_where} must be an object", fn_where)
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InvalidRequestError(f"{fn_where}.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r}",
                                      f"{fn_where}.name")
        if name in seen:
            raise InvalidRequestError(f"{fn_where}.name: the function {name!r} is defined twice", f"{fn_where}.name")
        seen.add(name)
        parameters = fn.get("parameters")
        parameters = EMPTY_PARAMETERS if parameters is None else parameters
        _check_json_schema(parameters, f"{fn_where}.parameters")
        if parameters.get("type", "object") != "object":
            raise InvalidRequestError(f"{fn_where}.parameters must describe an object (type 'object'), "
                                      f"got type {parameters.get('type')!r}", f"{fn_where}.parameters")
        description = fn.get("description")
        result.append(FunctionTool(name, description if isinstance(description, str) else None, parameters))
    return result


def normalize_tool_choice(tool_choice: Any, tools: list[FunctionTool],
                          param: str = "tool_choice") -> ToolChoiceMode | FunctionTool:
    """`none | auto | required` or the named function. No choice means `auto` with tools, `none`
    without, as in OpenAI's API."""
    choice = _as_dict(tool_choice)
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequestError(f"{param} must be 'none', 'auto', 'required' or a named function, "
                                      f"got {choice!r}", param)
        if choice == "required" and not tools:
            raise InvalidRequestError(f"{param} is 'required' but no tools were given", param)
        return choice  # type: ignore[return-value]
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        fn = choice.get("function", choice)  # Chat Completions nests the name, Responses does not
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            raise InvalidRequestError(f"{param} names no function: expected "
                                      '{"type": "function", "function": {"name": ...}}', param)
        for tool in tools:
            if tool.name == name:
                return tool
        known = ", ".join(t.name for t in tools) or "none"
        raise InvalidRequestError(f"{param} names the function {name!r}, which is not among the tools "
                                  f"(known: {known})", param)
    raise InvalidRequestError(f"{param} must be 'none', 'auto', 'required' or "
                              '{"type": "function", "function": {"name": ...}}', param)


def offered_tools(tools: list[FunctionTool], choice: ToolChoiceMode | FunctionTool) -> list[FunctionTool]:
    """The tools the prompt shows. A named choice shows only that function: the grammar forces it
    anyway, and a small model is less confused by one tool than by several it may not call."""
    if choice == "none":
        return []
    if isinstance(choice, FunctionTool):
        return [choice]
    return tools


# -- the prompt --------------------------------------------------------------------------------------

HERMES_PREAMBLE = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def format_tool_call(name: str, arguments: str | Mapping[str, Any]) -> str:
    """One call in the exact text the grammar produces, so history and generation look alike."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # keep the client's text as it is; it is history, not something we parse again
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'


def format_tool_response(content: str) -> str:
    return f"{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}"


@lru_cache(maxsize=32)
def _template_variables(template: str) -> frozenset[str]:
    import jinja2
    import jinja2.meta

    try:
        return frozenset(jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template)))
    except jinja2.TemplateSyntaxError:
        return frozenset(re.findall(r"\b\w+\b", template))


def template_supports_tools(tokenizer) -> bool:
    """A chat template that reads the `tools` variable renders tools itself (Qwen, Llama 3.1,
    Hermes, SmolLM3...); SmolLM2's does not, so it gets our preamble."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the tool one, if any, is named so
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in _template_variables(template)


def _content_text(content: Any, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            part = _as_dict(part)
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise InvalidRequestError(f"{param}[{j}]: {kind} content is not supported; the model is text-only",
                                          f"{param}[{j}]")
        return "\n".join(texts)
    raise InvalidRequestError(f"{param} must be a string or a list of content parts", param)


def _history_calls(message: Mapping[str, Any], param: str) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of an assistant message's `tool_calls`."""
    calls = []
    for j, raw in enumerate(message.get("tool_calls") or []):
        call = _as_dict(raw)
        fn = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidRequestError(f"{param}.tool_calls[{j}] needs function.name", f"{param}.tool_calls[{j}]")
        calls.append((call.get("id") or "", fn["name"], fn.get("arguments") or "{}"))
    return calls


def _native_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template with tool support, in the shape HF templates expect: arguments as a
    dict (most templates `tojson` them) and the tool's name on tool results where it is known."""
    names_by_id: dict[str, str] = {}
    out = []
    for i, m in enumerate(messages):
        role = m["role"]
        msg: dict[str, Any] = {"role": role, "content": _content_text(m.get("content"), f"messages[{i}].content")}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for call_id, name, args in _history_calls(m, f"messages[{i}]"):
                names_by_id[call_id] = name
                try:
                    parsed = json.loads(args) if isinstance(args, str) else args
                except json.JSONDecodeError:
                    parsed = args
                calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": parsed}})
            msg["tool_calls"] = calls
        elif role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            name = m.get("name") or names_by_id.get(m.get("tool_call_id") or "")
            if name:
                msg["name"] = name
        out.append(msg)
    return out


def _text_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template without tool support: calls become `<tool_call>` blocks in the
    assistant's text and consecutive tool results one user turn of `<tool_response>` blocks (user,
    not a `tool` role, because templates that enforce role order know only system/user/assistant)."""
    out: list[dict[str, Any]] = []
    in_tool_turn = False
    for i, m in enumerate(messages):
        role = m["role"]
        text = _content_text(m.get("content"), f"messages[{i}].content")
        if role == "tool":
            block = format_tool_response(text)
            if in_tool_turn:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            in_tool_turn = True
            continue
        in_tool_turn = False
        if role == "assistant" and m.get("tool_calls"):
            blocks = [format_tool_call(name, args) for _, name, args in _history_calls(m, f"messages[{i}]")]
            text = "\n".join(([text] if text else []) + blocks)
        out.append({"role": role, "content": text})
    return out


def tools_preamble(tools: list[FunctionTool], choice: ToolChoiceMode | FunctionTool) -> str:
    listing = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
    text = HERMES_PREAMBLE.format(tools=listing)
    if isinstance(choice, FunctionTool):
        text += f"\n\nYou must call the function {choice.name}."
    elif choice == "required":
        text += "\n\nYou must call at least one function."
    return text


# Said in the system message when the reply is constrained to some JSON object (`json_object`), whose
# keys only the conversation names. Measured on the default model, 30 prompts that each ask for named
# keys: replies with every key asked for 16/30 without it, 19/30 with it at temperature 0 (20/60 and
# 25/60 over two seeds at 0.7; "Respond with a JSON object." gave 18/30 and 19/60).
JSON_REPLY_NOTE = "You reply in JSON."


def wants_json_note(guided: Mapping[str, Any] | None) -> bool:
    return bool(guided) and bool(guided.get("json_object"))


def with_system_note(messages: list[Any], note: str) -> list[dict[str, Any]]:
    """`messages` with `note` appended to the leading system (or developer) message, or in a new one."""
    msgs = [_as_dict(m) for m in messages]
    first = msgs[0] if msgs else None
    if isinstance(first, Mapping) and first.get("role") in ("system", "developer"):
        text = _content_text(first.get("content"), "messages[0].content")
        return [{**first, "content": f"{text}\n\n{note}" if text else note}, *msgs[1:]]
    return [{"role": "system", "content": note}, *msgs]


def render_chat(tokenizer, messages: list[Any], tools: list[Any] | None = None,
                tool_choice: Any = "auto", *, add_generation_prompt: bool = True,
                **template_kwargs: Any) -> str:
    """The prompt for a chat request. Tools go through the model's chat template when it supports
    them, otherwise into our Hermes-style preamble, merged into the system message if there is one.
    Assistant `tool_calls` and `tool` results in the history are rendered either way.
    `tool_choice="none"` offers no tools (past calls in the history are still shown)."""
    fns = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, fns)
    shown = offered_tools(fns, choice)
    msgs = []
    for i, raw in enumerate(messages):
        m = _as_dict(raw)
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidRequestError(f"messages[{i}] needs a role", f"messages[{i}].role")
        msgs.append({**m, "role": "system" if m["role"] == "developer" else m["role"]})
    if template_supports_tools(tokenizer):
        rendered = _native_messages(msgs)
        if shown:
            template_kwargs["tools"] = [t.to_openai() for t in shown]
    else:
        rendered = _text_messages(msgs)
        if shown:
            preamble = tools_preamble(shown, choice)
            if rendered and rendered[0]["role"] == "system":
                system = rendered[0]["content"]
                rendered[0] = {"role": "system", "content": f"{system}\n\n{preamble}" if system else preamble}
            else:
                rendered.insert(0, {"role": "system", "content": preamble})
    try:
        return tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **template_kwargs)
    except InvalidRequestError:
        raise
    except Exception as exc:  # jinja raises for conversations a template refuses (role order, ...)
        raise InvalidRequestError(f"the chat template rejected these messages: {exc}", "messages") from exc


# -- the grammar -------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def compact_json_ebnf(schema_json: str, strict: bool = True) -> str:
    """A JSON schema as an EBNF grammar for compact JSON (separators ", " and ": ", no newlines or
    indentation), for structural-tag content: xgrammar's structural-tag `json_schema` content allows
    any whitespace, and a 135M model spends tokens on (or loops in) indentation. Compact JSON is also
    what the preamble shows."""
    import xgrammar as xgr

    return str(xgr.Grammar.from_json_schema(schema_json, any_whitespace=False, strict_mode=strict))


def json_guided(schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """`SamplingParams.guided` for compact JSON matching `schema`, or any JSON object without one."""
    if schema is None:
        return {"json_object": True, "any_whitespace": False}
    return {"json_schema": schema, "any_whitespace": False}


def _tool_tag(tool: FunctionTool, index: int) -> dict[str, Any]:
    param = f"tools[{index}].function.parameters"
    try:
        ebnf = compact_json_ebnf(json.dumps(tool.parameters))  # key order kept: the grammar follows it
    except Exception as exc:  # xgrammar refuses schema features it cannot turn into a grammar
        raise InvalidRequestError(f"{param}: the parameters schema of {tool.name!r} is not supported: {exc}",
                                  param) from exc
    return {
        "type": "tag",
        "begin": f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(tool.name)}, "arguments": ',
        "content": {"type": "grammar", "grammar": ebnf},
        "end": f"}}\n{TOOL_CALL_CLOSE}",
    }


def guided_for_tools(tools: list[Any] | None, tool_choice: Any = "auto",
                     parallel_tool_calls: bool = True) -> dict[str, Any] | None:
    """`SamplingParams.guided` for a tool request, or None when nothing is constrained.

    auto: free text, but an opened `<tool_call>` must be a valid call to an offered tool.
    required: one or more valid calls and nothing else (the output starts with a call).
    named: exactly one call to that function.
    `parallel_tool_calls=False` allows at most one call (generation stops after it)."""
    fns = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, fns)
    shown = offered_tools(fns, choice)
    if not shown:
        return None
    tags = [_tool_tag(t, fns.index(t)) for t in shown]
    one = not parallel_tool_calls or isinstance(choice, FunctionTool)
    # What budget-aware closing (engine/json_budget.py) needs to finish a call the budget would cut.
    closing = {"calls": [{"begin": tag["begin"], "schema": t.parameters, "end": tag["end"]}
                         for t, tag in zip(shown, tags, strict=True)],
               "trigger": TOOL_CALL_OPEN, "at_least_one": choice != "auto"}
    if choice == "auto":
        fmt: dict[str, Any] = {"type": "triggered_tags", "triggers": [TOOL_CALL_OPEN], "tags": tags,
                               "at_least_one": False, "stop_after_first": one}
        return {"structural_tag": {"type": "structural_tag", "format": fmt}, "tool_calls": closing}
    call = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    newline = {"type": "const_string", "value": "\n"}
    if one:
        fmt = call
    else:
        # call ("\n" call)* "\n"?  -- not tags_with_separator: there a newline after a call commits
        # to another call, and a small model that writes the newline out of habit gets trapped
        # into repeating calls until max_tokens. Here it can still end after the newline.
        more = {"type": "star", "content": {"type": "sequence", "elements": [newline, call]}}
        fmt = {"type": "sequence", "elements": [call, more, {"type": "optional", "content": newline}]}
    return {"structural_tag": {"type": "structural_tag", "format": fmt}, "tool_calls": closing}


def guided_for_response_format(response_format: Any, param: str = "response_format") -> dict[str, Any] | None:
    """`SamplingParams.guided` for OpenAI's `response_format` (`text | json_object | json_schema` with
    `{"json_schema": {"name", "schema", "strict"}}`) or the Responses API's `text.format`
    (`{"type": "json_schema", "name", "schema", "strict"}`; pass `param="text.format"`)."""
    rf = _as_dict(response_format)
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
    _check_json_schema(schema, f"{where}.schema")
    try:
        import xgrammar as xgr

        xgr.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)
    except Exception as exc:
        raise InvalidRequestError(f"{where}.schema is not supported: {exc}", f"{where}.schema") from exc
    # Always strict: the grammar is then a subset of what a non-strict schema allows, so outputs
    # still validate, and a small model is not tempted into extra properties. Compact, as for tools.
    return json_guided(schema)


# -- parsing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    index: int
    delta: str  # the next fragment of the arguments' JSON text


StreamEvent = ContentDelta | ToolCallStart | ToolCallArguments

# A call's head as the grammar writes it; other key orders or spellings fall back to whole-block parsing.
_HEAD_RE = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:')


def _held_prefix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def _find_markup(text: str) -> tuple[int, str] | None:
    """The first of TOOL_MARKUP in `text`: (where, which)."""
    found = [(at, m) for m in TOOL_MARKUP if (at := text.find(m)) >= 0]
    return min(found) if found else None


@dataclass
class _ArgsScanner:
    """Finds where a JSON value ends without parsing it, so arguments stream as they are written."""

    started: bool = False
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    scalar: bool = False

    def take(self, text: str) -> tuple[int, int, bool]:
        """Returns (skip, used, done): `skip` leading blanks, then `used` characters of the value."""
        start = i = 0
        if not self.started:
            while i < len(text) and text[i].isspace():
                i += 1
            if i == len(text):
                return i, 0, False
            if text[i] == "<":  # no value at all before the closing tag
                return i, 0, True
            self.started, start = True, i
            self.scalar = text[i] not in '{["'
            self.in_string = text[i] == '"'
            self.depth = 1 if text[i] in "{[" else 0
            i += 1
        while i < len(text):
            c = text[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
                    if self.depth == 0:
                        return start, i + 1 - start, True
            elif self.scalar:
                if c in ",}] \t\r\n<":
                    return start, i - start, True
            elif c == "<":  # not JSON: the model closed the tag inside the value
                return start, i - start, True
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return start, i + 1 - start, True
            i += 1
        return start, i - start, False


class ToolCallParser:
    """Splits streamed model text into content and tool calls, fed one delta at a time.

    Text that could be the start of `<tool_call>` is held back until it is known not to be (and
    dropped if the text ends there), so no raw tag reaches a client. A call is held back until its
    arguments are complete and parse as JSON, then given out whole (start and arguments): a call cut
    off by `max_tokens` (or otherwise not JSON) is never returned, not even as streamed fragments a
    client would have to discard. A call identical (name and parsed arguments) to one already given
    ends the answer: it and everything after it are dropped and `ended_by_repeat` is set, since a
    small model that starts repeating a call repeats it until the budget runs out.
    Content is the text outside the call blocks with leading and trailing whitespace removed (trailing
    whitespace is held until more content follows). `parse_tool_calls` runs this same machine on a
    whole text, so streamed and non-streamed results agree by construction, whatever the chunking."""

    def __init__(self) -> None:
        self._buf = ""  # text received but not yet emitted or discarded
        self._state: Literal["text", "head", "args", "tail", "ended"] = "text"
        self._pending_ws = ""  # content whitespace held until more content follows
        self._content_started = False
        self._scanner = _ArgsScanner()
        self._calls: list[ToolCall] = []
        self._seen: list[tuple[str, Any]] = []  # (name, parsed arguments) of the calls given
        self._open: tuple[str, list[str]] | None = None  # the call being written: name, argument text
        self.ended_by_repeat = False

    @property
    def tool_calls(self) -> list[ToolCall]:
        return list(self._calls)

    def feed(self, delta: str) -> list[StreamEvent]:
        self._buf += delta
        return self._drain(final=False)

    def finish(self) -> list[StreamEvent]:
        """Flushes what was held back; call once after the last delta."""
        return self._drain(final=True)

    # -- internals --
    def _content(self, text: str, events: list[StreamEvent]) -> None:
        text = self._pending_ws + text
        if not self._content_started:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        if body:
            self._content_started = True
            events.append(ContentDelta(body))

    def _start_call(self, name: str) -> None:
        self._open = (name, [])

    def _arguments(self, text: str) -> None:
        if text and self._open is not None:
            self._open[1].append(text)

    def _close_call(self, events: list[StreamEvent]) -> None:
        """The open call's arguments are complete: give it out if they parse and it is new."""
        if self._open is None:
            return
        name, parts = self._open
        self._open = None
        args = "".join(parts)
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            log.debug("dropping a tool call whose arguments are not JSON: %r", args[:200])
            return
        if (name, parsed) in self._seen:
            self.ended_by_repeat = True
            self._state, self._buf = "ended", ""
            return
        self._seen.append((name, parsed))
        call = ToolCall(new_tool_call_id(), name, args)
        index = len(self._calls)
        self._calls.append(call)
        events.append(ToolCallStart(index, call.id, name))
        if args:
            events.append(ToolCallArguments(index, args))

    def _whole_block(self, body: str, events: list[StreamEvent]) -> None:
        """A call not in the grammar's shape (keys reordered, `parameters`...): parsed once complete."""
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            log.debug("dropping a malformed tool call block: %r", body[:200])
            return
        args = obj.get("arguments", obj.get("parameters", {}))
        self._start_call(obj["name"])
        self._arguments(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        self._close_call(events)

    def _drain(self, final: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        while True:
            buf = self._buf
            if self._state == "ended":
                self._buf = ""
                break
            if self._state == "text":
                at = buf.find(TOOL_CALL_OPEN)
                stray = _find_markup(buf)
                if stray is not None and (at < 0 or stray[0] < at):  # our markup is never content
                    self._content(buf[:stray[0]], events)
                    self._buf = buf[stray[0] + len(stray[1]):]
                    continue
                if at >= 0:
                    self._content(buf[:at], events)
                    self._buf, self._state = buf[at + len(TOOL_CALL_OPEN):], "head"
                    continue
                # A trailing "<tool_c" (or "</tool_resp") is held; at the end it is dropped, not
                # flushed: there it is almost surely a tag cut off by max_tokens, and raw tag text
                # must not leak.
                keep = max(_held_prefix(buf, m) for m in (TOOL_CALL_OPEN, *TOOL_MARKUP))
                self._content(buf[: len(buf) - keep], events)
                self._buf = "" if final else buf[len(buf) - keep:]
                break
            if self._state == "head":
                m = _HEAD_RE.match(buf)
                if m:
                    try:
                        name = json.loads(f'"{m.group(1)}"')
                    except json.JSONDecodeError:
                        name = m.group(1)
                    self._start_call(name)
                    self._buf, self._state, self._scanner = buf[m.end():], "args", _ArgsScanner()
                    continue
                close = buf.find(TOOL_CALL_CLOSE)
                if close >= 0 or final:
                    self._whole_block(buf[:close] if close >= 0 else buf, events)
                    self._buf, self._state = (buf[close + len(TOOL_CALL_CLOSE):] if close >= 0 else ""), "text"
                    continue
                break
            if self._state == "args":
                skip, used, done = self._scanner.take(buf)
                self._arguments(buf[skip: skip + used])
                self._buf = buf[skip + used:]
                if done:
                    self._state = "tail"
                    self._close_call(events)
                    continue
                if final:
                    self._buf, self._open = "", None  # cut off mid-arguments (max_tokens): dropped
                    self._state = "text"
                break
            # tail: the rest of the block after the arguments (the outer "}"), up to </tool_call>
            close = buf.find(TOOL_CALL_CLOSE)
            if close >= 0:
                self._buf, self._state = buf[close + len(TOOL_CALL_CLOSE):], "text"
                continue
            if final:
                self._buf, self._state = "", "text"
                continue
            self._buf = buf[len(buf) - _held_prefix(buf, TOOL_CALL_CLOSE):]
            break
        return events


class MarkupFilter:
    """Free text fed in pieces with our tool markup (TOOL_MARKUP and `<tool_call>`) removed, for
    answers whose calls are not parsed (tool_choice none, or no tools) but whose history holds tool
    results in that markup. Like the call parser's content: a partly written tag is held back (and
    dropped at the end). Text with no markup passes whole; once a tag was removed, the whitespace it
    leaves at the start and end of the answer goes too (`<tool_response>\nRESULT\n</tool_response>`
    reads as RESULT)."""

    MARKERS = (TOOL_CALL_OPEN, *TOOL_MARKUP)

    def __init__(self) -> None:
        self._buf = ""
        self._pending_ws = ""
        self._started = False
        self._removed = False

    def feed(self, delta: str) -> str:
        self._buf += delta
        out: list[str] = []
        while (found := min(((at, m) for m in self.MARKERS if (at := self._buf.find(m)) >= 0), default=None)):
            out.append(self._buf[:found[0]])
            self._buf = self._buf[found[0] + len(found[1]):]
            self._removed = True
        keep = max(_held_prefix(self._buf, m) for m in self.MARKERS)
        out.append(self._buf[: len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep:]
        return self._text("".join(out))

    def finish(self) -> str:
        self._buf = ""
        tail, self._pending_ws = ("" if self._removed else self._pending_ws), ""
        return tail

    def _text(self, text: str) -> str:
        # Trailing whitespace waits: a tag after it would make it the answer's end.
        text = self._pending_ws + text
        if not self._started and self._removed:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        self._started = self._started or bool(body)
        return body


def strip_markup(text: str) -> str:
    """`text` without our tool markup (MarkupFilter on a whole text)."""
    f = MarkupFilter()
    return f.feed(text) + f.finish()


def collect(events: Iterable[StreamEvent]) -> tuple[str | None, list[ToolCall]]:
    """Joins stream events into (content, calls), the non-streaming view."""
    content: list[str] = []
    heads: dict[int, ToolCallStart] = {}
    args: dict[int, list[str]] = {}
    for ev in events:
        if isinstance(ev, ContentDelta):
            content.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            heads[ev.index] = ev
            args[ev.index] = []
        else:
            args[ev.index].append(ev.delta)
    calls = [ToolCall(h.id, h.name, "".join(args[i])) for i, h in sorted(heads.items())]
    return ("".join(content) or None), calls


def parse_answer(text: str) -> tuple[str | None, list[ToolCall], bool]:
    """(content without the call blocks or None, calls with `arguments` as JSON text, whether a
    repeated call ended the answer)."""
    parser = ToolCallParser()
    content, calls = collect(parser.feed(text) + parser.finish())
    return content, calls, parser.ended_by_repeat


def parse_tool_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """(content without the call blocks or None, calls with `arguments` as JSON text)."""
    content, calls, _ = parse_answer(text)
    return content, calls
