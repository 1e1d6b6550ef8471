"""Pythonic tool calls, vLLM's `pythonic` parser: a Python list of calls with keyword arguments,
`[get_weather(city="Oslo"), add(a=1, b=2)]`, as Llama 3.2 1B/3B (with a pythonic template) and Llama 4 write
them. The list is read with `ast` (never evaluated): only literals are accepted as values, and the arguments
become the JSON text OpenAI sends.

The other formats are a JSON object between marks (engine/chat/parser.py); this one is not, so it has its
own streaming parser with the same interface and the same promises: a call is given out whole once its list
closes, a list cut by `max_tokens` is never returned, a repeated call ends the answer. Text that opens a
list but is no list of calls (`[1] see above`) stays content.

The grammar (`pythonic_tag`, engine/chat/pythonic_grammar.py) writes each keyword value with xgrammar's
JSON grammar for that property's schema, its `true`/`false`/`null` spelled `True`/`False`/`None`: JSON
strings, numbers, arrays and objects are Python literals too. Budget-aware closing (engine/json_budget.py)
knows JSON only, so it is off here."""

import ast
import json
import logging
import re
from typing import Any

from engine.chat.events import StreamEvent
from engine.chat.text_stream import TextStream

log = logging.getLogger(__name__)

_CALL_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_MAYBE_START = re.compile(r"\[\s*(?:[A-Za-z_][\w.]*\s*)?\Z")  # too short yet to tell
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_JSON_WORDS = {"true": True, "false": False, "null": None}  # a model may write JSON's spellings


class _NotACall(ValueError):
    pass


def _value(node: ast.AST) -> Any:
    """A literal's value, JSON-shaped; anything else (names, calls, operators) is refused."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float | bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _value(node.operand)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return {k.value: _value(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[union-attr]
    if isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    raise _NotACall(ast.dump(node)[:80])


def parse_call_list(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """`[f(a=1), g(b="x")]` as [(name, arguments)], or None when the text is no list of such calls."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls = []
        for call in tree.elts:
            if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
                return None
            name = ast.unparse(call.func)  # a plain or dotted name (Llama 4 writes `brave_search.call`)
            if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
                return None
            calls.append((name, {k.arg: _value(k.value) for k in call.keywords}))
        return calls
    except (SyntaxError, ValueError, RecursionError):
        return None


def python_literal(value: Any) -> str:
    """A JSON value as the Python literal a model writes (a JSON string is a Python string literal)."""
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def call_source(name: str, arguments: str) -> str:
    """One call, `name(k=v, ...)`, from OpenAI's JSON arguments text."""
    args = json.loads(arguments or "{}")
    return f"{name}(" + ", ".join(f"{k}={python_literal(v)}" for k, v in args.items()) + ")"


def _list_end(text: str) -> int | None:
    """The index just past the `]` that closes the list opening `text`, or None while it is open."""
    stack: list[str] = []
    quote, i = "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif ch in "'\"":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote) - 1
        elif ch in "([{":
            stack.append(ch)
        elif ch in _CLOSERS:
            if not stack or stack.pop() != _CLOSERS[ch]:
                return i + 1  # unbalanced: ends here, and fails to parse as calls
            if not stack:
                return i + 1
        i += 1
    return None


def _whole_calls(cut: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls before the one `max_tokens` cut in an open list (`[f(a=1), g(b=`: f)."""
    for at in (i for i in range(len(cut) - 1, 0, -1) if cut[i] == ","):
        calls = parse_call_list(cut[:at] + "]")
        if calls is not None:
            return calls
    log.debug("dropping a cut pythonic call: %r", cut[:200])
    return []


class PythonicCallParser(TextStream):
    """ToolCallParser's interface (feed, finish, tool_calls, ended_by_repeat) for pythonic call lists; a list
    still open at finish (cut by max_tokens) is dropped."""

    def __init__(self) -> None:
        super().__init__()
        self._ended = False

    def _drain(self, final: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        while self._buf and not self._ended:
            buf = self._buf
            at = buf.find("[")
            if at < 0:
                self._content(buf, events)
                self._buf = ""
                break
            self._content(buf[:at], events)
            rest = self._buf = buf[at:]
            if not _CALL_START.match(rest):
                if _MAYBE_START.match(rest) and not final:
                    break  # `[get_wea`: wait for more
                self._content("[", events)  # no call opens here
                self._buf = rest[1:]
                continue
            end = _list_end(rest)
            if end is None:
                if final:  # a list cut before its end: its whole calls are given, the cut one never
                    self._give(_whole_calls(rest), events)
                    self._buf = ""
                break
            calls = parse_call_list(rest[:end])
            if calls is None:
                self._content(rest[:end], events)
            else:
                self._give(calls, events)
            self._buf = rest[end:] if not self._ended else ""
        return events

    def _give(self, calls: list[tuple[str, dict[str, Any]]], events: list[StreamEvent]) -> None:
        for name, args in calls:
            if not self._give_call(name, args, events):
                self._ended = True
                return
