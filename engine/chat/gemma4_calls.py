"""Gemma 4's tool calls, as its chat template writes them (vLLM and llama.cpp name the parser `gemma4`):

    <|tool_call>call:get_weather{city:<|"|>Seoul<|"|>,days:3}<tool_call|>

The arguments are no JSON: keys are bare, a string is quoted by the `<|"|>` mark (its text is taken as it
is, no escapes), numbers, `true`, `false` and `null` are JSON's, and objects and arrays nest the same way
with `,` and `:` and no blanks. Several calls follow one another with nothing between. Gemma 4's tokenizer
holds the three marks as special tokens; decoding keeps them in the text (ToolFormat.marks), where this
parser reads them. `<|tool_response>` and `<tool_response|>`, which wrap results in the prompt, never reach
content.

Same promises as the JSON formats' parser (engine/chat/parser.py): a call is given out whole once its
arguments object closes, one cut by `max_tokens` is never returned, a repeated call ends the answer. The
grammar is engine/chat/gemma4_grammar.py; budget-aware closing knows JSON only, so it is off here."""

import json
import logging
from typing import Any

from engine.chat.events import StreamEvent
from engine.chat.markup import TOOL_MARKUP, held_prefix
from engine.chat.text_stream import TextStream

log = logging.getLogger(__name__)

CALL_OPEN = "<|tool_call>"
CALL_CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
HANDOVER = "<|tool_response>"  # written after the calls: the tools' results come next (ToolFormat.handover)
# Gemma 4's own marks around tool results and a stray call end, never content (beside our Hermes markup).
STRAY_MARKS = (HANDOVER, "<tool_response|>", CALL_CLOSE, *TOOL_MARKUP)
_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_SCALAR_END = ",}]<"  # what ends a bare number or word (a mark starts with "<")


class Incomplete(ValueError):
    """The text ends inside the value: more may come."""


def render_value(value: Any) -> str:
    """A JSON value as Gemma 4 writes it (its template's `format_argument`, keys unquoted)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{render_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render_value(v) for v in value) + "]"
    return json.dumps(value)  # numbers, true, false, null


def arguments_source(arguments: str) -> str:
    """OpenAI's JSON arguments text as the `{...}` a Gemma 4 call carries."""
    return render_value(json.loads(arguments or "{}"))


def _blank(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def read_value(text: str, at: int = 0) -> tuple[Any, int]:
    """The value starting at `text[at]` (blanks first allowed) and where it ends. Raises Incomplete where
    the text stops inside it, ValueError where it is no value."""
    at = _blank(text, at)
    if at >= len(text):
        raise Incomplete
    if text.startswith(QUOTE, at):
        end = text.find(QUOTE, at + len(QUOTE))
        if end < 0:
            raise Incomplete
        return text[at + len(QUOTE): end], end + len(QUOTE)
    if QUOTE.startswith(text[at:]):
        raise Incomplete  # a quote mark cut in the middle
    if text[at] in "{[":
        return _read_container(text, at)
    end = at
    while end < len(text) and text[end] not in _SCALAR_END:
        end += 1
    if end == len(text):
        raise Incomplete  # `12` may go on as `123`
    word = text[at:end].strip()
    if word in _WORDS:
        return _WORDS[word], end
    try:
        return json.loads(word), end
    except json.JSONDecodeError:
        if not word:
            raise ValueError(f"no value at {text[at:at + 20]!r}") from None
        return word, end  # an unquoted string: read as the text it is


def _read_key(text: str, at: int) -> tuple[str, int]:
    """A bare key up to its `:` (or one quoted by the mark, as the template quotes a tool's declaration)."""
    if text.startswith(QUOTE, at):
        key, at = read_value(text, at)
        at = _blank(text, at)
    else:
        colon = text.find(":", at)
        if colon < 0:
            raise Incomplete
        key, at = text[at:colon].strip(), colon
        if not key or any(c in key for c in "{}[],<"):
            raise ValueError(f"no key at {text[at:at + 20]!r}")
    if at >= len(text):
        raise Incomplete
    if text[at] != ":":
        raise ValueError(f"no ':' after the key {key!r}")
    return key, at + 1


def _read_container(text: str, at: int) -> tuple[Any, int]:
    closer = "}" if text[at] == "{" else "]"
    out: dict[str, Any] | list[Any] = {} if closer == "}" else []
    at = _blank(text, at + 1)
    if at < len(text) and text[at] == closer:
        return out, at + 1
    while True:
        if isinstance(out, dict):
            key, at = _read_key(text, _blank(text, at))
            out[key], at = read_value(text, at)
        else:
            value, at = read_value(text, at)
            out.append(value)
        at = _blank(text, at)
        if at >= len(text):
            raise Incomplete
        if text[at] == closer:
            return out, at + 1
        if text[at] != ",":
            raise ValueError(f"expected ',' or {closer!r} at {text[at:at + 20]!r}")
        at += 1


def read_call(text: str) -> tuple[str, dict[str, Any], int] | None:
    """`call:NAME{...}` (after the open mark) as (name, arguments, where it ends), None when it is no call.
    Raises Incomplete where the text stops inside it."""
    if not text.startswith("call:"):
        if "call:".startswith(text):
            raise Incomplete
        return None
    brace = text.find("{")
    if brace < 0:
        if "<" in text:
            return None
        raise Incomplete
    name = text[len("call:"):brace].strip()
    if not name or "<" in name:
        return None
    try:
        args, end = read_value(text, brace)
    except ValueError as exc:
        if isinstance(exc, Incomplete):
            raise
        return None
    return name, args, end


class Gemma4CallParser(TextStream):
    """ToolCallParser's interface (feed, finish, tool_calls, ended_by_repeat) for Gemma 4's calls."""

    def __init__(self) -> None:
        super().__init__()
        self._ended = False

    def _drain(self, final: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        while self._buf and not self._ended:
            buf = self._buf
            marks = [(at, m) for m in (CALL_OPEN, *STRAY_MARKS) if (at := buf.find(m)) >= 0]
            if not marks:
                keep = max(held_prefix(buf, m) for m in (CALL_OPEN, *STRAY_MARKS))
                self._content(buf[: len(buf) - keep], events)
                self._buf = "" if final else buf[len(buf) - keep:]
                break
            at, mark = min(marks)
            self._content(buf[:at], events)
            rest = buf[at + len(mark):]
            if mark != CALL_OPEN:  # our markup and Gemma 4's result marks are never content
                self._buf = rest
                continue
            try:
                call = read_call(rest)
            except Incomplete:
                self._buf = buf[at:]
                if final:  # a call cut before its arguments close (max_tokens) is never returned
                    log.debug("dropping a cut tool call: %r", self._buf[:200])
                    self._buf = ""
                break
            if call is None:  # no call after the mark: dropped through its close mark (or to the end)
                close = rest.find(CALL_CLOSE)
                if close < 0 and not final:
                    self._buf = buf[at:]
                    break
                log.debug("dropping a malformed tool call: %r", rest[:200])
                self._buf = rest[close + len(CALL_CLOSE):] if close >= 0 else ""
                continue
            name, args, end = call
            after = rest[end:]
            stripped = after.lstrip()
            if stripped.startswith(CALL_CLOSE):
                after = stripped[len(CALL_CLOSE):]
            elif not final and CALL_CLOSE.startswith(stripped):
                self._buf = buf[at:]  # its close mark may be coming
                break
            self._buf = after
            self._give(name, args, events)
        if self._ended:
            self._buf = ""
        return events

    def _give(self, name: str, args: Any, events: list[StreamEvent]) -> None:
        if not self._give_call(name, args, events):
            self._ended = True
