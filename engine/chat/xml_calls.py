"""Qwen3-Coder's XML tool calls, vLLM's `qwen3_coder` parser, as Qwen3-Coder and Qwen3.5 write them:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Seoul
    </parameter>
    </function>
    </tool_call>

A parameter's value is raw text (one newline either side is the format's, not the value's): a string
property's value is the text itself; any other is read as JSON (a Python literal as a fallback, `True`),
then kept as text if it is neither. Without the tool's schema (a call to a tool not offered) a value is
JSON where it parses as JSON, text otherwise. The arguments become the JSON text OpenAI sends.

Same promises as the JSON formats' parser (engine/chat/parser.py): a call is given out whole once its
`</function>` is written, a call cut by `max_tokens` is never returned, a repeated call ends the answer, our
markup never reaches content. The grammar is xgrammar's JSON-schema format in its `qwen_xml` style
(engine/chat/constraints.py); budget-aware closing knows JSON only, so it is off here."""

import ast
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from engine.chat.events import StreamEvent
from engine.chat.markup import TOOL_CALL_CLOSE, find_markup, held_prefix
from engine.chat.text_stream import TextStream

log = logging.getLogger(__name__)

TRIGGERS = ("<tool_call>", "<function=")  # a model may leave out the outer tag
_FUNCTION_END = "</function>"
_FUNCTION_RE = re.compile(r"<function=([^>\n]*)>(.*)", re.S)
_PARAMETER_RE = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)


def parameters_source(arguments: str) -> str:
    """OpenAI's JSON arguments text as the parameters a model writes (Qwen3-Coder's template's way)."""
    out = []
    for key, value in json.loads(arguments or "{}").items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out.append(f"<parameter={key}>\n{text}\n</parameter>\n")
    return "".join(out)


def _types(schema: Any) -> set[str]:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    return set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()


def parameter_value(text: str, schema: Any = None) -> Any:
    """A parameter's raw text as its JSON value, read by the property's schema where there is one."""
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    types = _types(schema)
    if "string" in types and not types & {"integer", "number", "boolean", "object", "array"}:
        return text
    text = text.strip()  # any other value: the blanks around it are the format's
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if types & {"object", "array", "boolean", "null"}:
        try:
            value = ast.literal_eval(text)  # `{'a': 1}`, `True`, `None`
            json.dumps(value)
            return value
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            pass
    return text


def parse_function(block: str, schemas: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]] | None:
    """`<function=NAME>...` up to its end as (name, arguments), or None when it names no function."""
    m = _FUNCTION_RE.match(block)
    if not m or not m.group(1).strip():
        return None
    name = m.group(1).strip()
    props = (schemas or {}).get(name, {}).get("properties", {}) if schemas is not None else {}
    args = {}
    for p in _PARAMETER_RE.finditer(m.group(2)):
        key = p.group(1).strip()
        args[key] = parameter_value(p.group(2), props.get(key) if isinstance(props, Mapping) else None)
    return name, args


class XmlCallParser(TextStream):
    """ToolCallParser's interface (feed, finish, tool_calls, ended_by_repeat) for Qwen3-Coder's calls.
    `schemas`: each offered tool's parameters schema, by name, which says how to read a value."""

    def __init__(self, schemas: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._schemas = schemas
        self._ended = False

    def _drain(self, final: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        while self._buf and not self._ended:
            buf = self._buf
            found = [(at, t) for t in TRIGGERS if (at := buf.find(t)) >= 0]
            stray = find_markup(buf)
            if stray is not None and (not found or stray[0] < min(found)[0]):  # our markup is never content
                self._content(buf[:stray[0]], events)
                self._buf = buf[stray[0] + len(stray[1]):]
                continue
            if not found:
                keep = max(held_prefix(buf, m) for m in (*TRIGGERS, TOOL_CALL_CLOSE, "<tool_response>"))
                self._content(buf[: len(buf) - keep], events)
                self._buf = "" if final else buf[len(buf) - keep:]
                break
            at, trigger = min(found)
            self._content(buf[:at], events)
            rest = buf[at + len(trigger):] if trigger == "<tool_call>" else buf[at:]
            start = rest.find("<function=")
            end = rest.find(_FUNCTION_END)
            if start < 0 or end < 0:
                self._buf = buf[at:]
                if final:  # a call cut before its end (max_tokens) is never returned
                    log.debug("dropping a cut tool call: %r", self._buf[:200])
                    self._buf = ""
                break
            call = parse_function(rest[start:end], self._schemas)
            after = rest[end + len(_FUNCTION_END):]
            stripped = after.lstrip()
            if stripped.startswith(TOOL_CALL_CLOSE):
                after = stripped[len(TOOL_CALL_CLOSE):]
            elif not final and TOOL_CALL_CLOSE.startswith(stripped):
                self._buf = buf[at:]  # its close tag may be coming
                break
            self._buf = after
            if call is not None:
                self._give(*call, events)
        if self._ended:
            self._buf = ""
        return events

    def _give(self, name: str, args: dict[str, Any], events: list[StreamEvent]) -> None:
        if not self._give_call(name, args, events):
            self._ended = True
