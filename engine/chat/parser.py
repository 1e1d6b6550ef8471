"""The streaming tool-call parser: model text, fed one delta at a time, split into content and
complete, schema-shaped tool calls."""

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from engine.chat.events import ContentDelta, ReasoningDelta, StreamEvent, ToolCallArguments, ToolCallStart
from engine.chat.json_scan import JsonValueScanner
from engine.chat.markup import TOOL_MARKUP, find_markup, held_prefix
from engine.chat.text_stream import TextStream
from engine.chat.tool_formats import HERMES, ToolFormat
from engine.chat.tools import ToolCall, new_tool_call_id

log = logging.getLogger(__name__)


# A call's head as the grammar writes it (either arguments key); other key orders or spellings fall back to
# parsing the whole call object.
_HEAD_RE = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:')

State = Literal["text", "open", "named", "head", "args", "tail", "next", "after", "ended"]
_NAMED_ARGS = "[ARGS]"  # Mistral's `[TOOL_CALLS]name[ARGS]{...}` (`[CALL_ID]id` may come before it)
_CALL_ID = "[CALL_ID]"


class ToolCallParser(TextStream):
    """Splits streamed model text into content and tool calls in one family's format (ToolFormat,
    engine/chat/tool_formats.py), fed one delta at a time.

    Text that could be the start of the format's trigger (`<tool_call>`, `[TOOL_CALLS]`, ...) is held back
    until it is known not to be (and dropped if the text ends there), so no raw mark reaches a client. A
    call is held back until its arguments are complete and parse as JSON, then given out whole (start and
    arguments): a call cut off by `max_tokens` (or otherwise not JSON) is never returned, not even as
    streamed fragments a client would have to discard. A call identical (name and parsed arguments) to one
    already given ends the answer: it and everything after it are dropped and `ended_by_repeat` is set,
    since a small model that starts repeating a call repeats it until the budget runs out.
    After the trigger comes one call object or a list of them (`[{...}, {...}]`, as Mistral, Granite and
    Phi-4-mini write several calls), or, in Mistral's newer form, the call's name and `[ARGS]` before its
    arguments object; a call whose end marks were cut is still returned once its arguments are whole.
    Content is the text outside the calls with leading and trailing whitespace removed (trailing whitespace
    is held until more content follows). `parse_tool_calls` runs this same
    machine on a whole text, so streamed and non-streamed results agree by construction, whatever the
    chunking."""

    def __init__(self, fmt: ToolFormat = HERMES) -> None:
        self.fmt = fmt
        # What ends a block after its call object: Hermes' close tag (a list's "]" is read as the list's end).
        self._block_end = fmt.closer.strip() if not fmt.opener.strip() else ""
        super().__init__()
        self._state: State = "text"
        self._in_list = False
        self._named = False  # the open call is Mistral's `name[ARGS]{...}`: no object of its own to close
        self._scanner = JsonValueScanner()
        self._open: tuple[str, list[str]] | None = None  # the call being written: name, argument text

    # -- internals --

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

    def _whole_call(self, body: str, events: list[StreamEvent]) -> None:
        """A call not in the grammar's shape (keys reordered, ...): parsed once its object is complete."""
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            log.debug("dropping a malformed tool call: %r", body[:200])
            return
        args = obj.get("arguments", obj.get("parameters", {}))
        self._start_call(obj["name"])
        self._arguments(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        self._close_call(events)

    def _markers(self) -> tuple[str, ...]:
        return (self.fmt.trigger, *TOOL_MARKUP)

    def _text(self, buf: str, final: bool, events: list[StreamEvent]) -> bool:
        """Free text up to the next call; False when it waits for more text."""
        at = buf.find(self.fmt.trigger)
        stray = find_markup(buf)
        if stray is not None and (at < 0 or stray[0] < at):  # our markup is never content
            self._content(buf[:stray[0]], events)
            self._buf = buf[stray[0] + len(stray[1]):]
            return True
        if at >= 0:
            self._content(buf[:at], events)
            self._buf = buf[at:] if self.fmt.trigger_in_call else buf[at + len(self.fmt.trigger):]
            self._state, self._in_list = "open", False
            return True
        # A trailing "<tool_c" (or "</tool_resp") is held; at the end it is dropped, not flushed: there
        # it is almost surely a mark cut off by max_tokens, and raw markup must not leak.
        keep = max(held_prefix(buf, m) for m in self._markers())
        self._content(buf[: len(buf) - keep], events)
        self._buf = "" if final else buf[len(buf) - keep:]
        return False

    def _drain(self, final: bool) -> list[StreamEvent]:  # noqa: C901 - one state machine, read top to bottom
        events: list[StreamEvent] = []
        while True:
            buf = self._buf
            state = self._state
            if state == "ended":
                self._buf = ""
                break
            if state == "text":
                if self._text(buf, final, events):
                    continue
                break
            stripped = buf.lstrip()
            if state in ("open", "tail", "next", "after") and not stripped and not final:
                break  # what comes next decides
            if state == "open":  # after the trigger: one call object, a list of them, or `name[ARGS]`
                self._in_list, self._named = stripped.startswith("["), False
                named = bool(self.fmt.args_mark or self.fmt.name == "mistral") and stripped[:1] not in "[{"
                self._buf, self._state = (stripped[1:] if self._in_list else buf), "named" if named else "head"
                continue
            if state == "named":
                at = buf.find(_NAMED_ARGS)
                if at < 0:
                    if final:  # cut before its arguments
                        self._buf, self._state = "", "text"
                        continue
                    break
                name = buf[:at].split(_CALL_ID, 1)[0].strip()
                self._start_call(name)
                self._named = True
                self._buf, self._state, self._scanner = buf[at + len(_NAMED_ARGS):], "args", JsonValueScanner()
                continue
            if state == "head":
                m = _HEAD_RE.match(buf)
                if m:
                    try:
                        name = json.loads(f'"{m.group(1)}"')
                    except json.JSONDecodeError:
                        name = m.group(1)
                    self._start_call(name)
                    self._buf, self._state, self._scanner = buf[m.end():], "args", JsonValueScanner()
                    continue
                skip, used, done = JsonValueScanner().take(buf)  # the whole object, keys in any order
                if done:
                    self._whole_call(buf[skip: skip + used], events)
                    self._buf, self._state = buf[skip + used:], "next"
                    continue
                if final:
                    self._buf, self._state = "", "text"
                    continue
                break
            if state == "args":
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
            if state == "tail":  # the call object's own "}" after its arguments
                closes = stripped.startswith("}") and not self._named
                self._buf, self._state = (stripped[1:] if closes else buf), "next"
                continue
            if state == "next":  # in a list: another call, or its end
                if self._in_list and stripped.startswith(","):
                    self._buf, self._state = stripped[1:], "head"
                elif self._in_list and stripped.startswith("]"):
                    self._buf, self._state = stripped[1:], "after"
                else:
                    self._state = "after"
                continue
            # after: the block's end mark, if the format has one
            end = self._block_end
            if end and stripped.startswith(end):
                self._buf = stripped[len(end):]
            elif end and end.startswith(stripped) and not final:
                break
            elif self.fmt.trigger_in_call and stripped.startswith(";"):  # Llama 3 separates calls so
                self._buf = stripped[1:]
            self._state = "text"
        return events


def collect(events: Iterable[StreamEvent]) -> tuple[str | None, list[ToolCall]]:
    """Joins stream events into (content, calls), the non-streaming view."""
    content: list[str] = []
    heads: dict[int, ToolCallStart] = {}
    args: dict[int, list[str]] = {}
    for ev in events:
        if isinstance(ev, ContentDelta):
            content.append(ev.text)
        elif isinstance(ev, ReasoningDelta):
            continue
        elif isinstance(ev, ToolCallStart):
            heads[ev.index] = ev
            args[ev.index] = []
        else:
            args[ev.index].append(ev.delta)
    calls = [ToolCall(h.id, h.name, "".join(args[i])) for i, h in sorted(heads.items())]
    return ("".join(content) or None), calls


def call_parser(fmt: ToolFormat = HERMES, schemas: Mapping[str, Any] | None = None):
    """The streaming parser of `fmt`: ToolCallParser, or PythonicCallParser, XmlCallParser or Gemma4CallParser
    with the same interface. `schemas` (each offered tool's parameters, by name) says how XML calls' values read."""
    if fmt.pythonic:
        from engine.chat.pythonic import PythonicCallParser

        return PythonicCallParser()
    if fmt.xml:
        from engine.chat.xml_calls import XmlCallParser

        return XmlCallParser(schemas)
    if fmt.gemma:
        from engine.chat.gemma4_calls import Gemma4CallParser

        return Gemma4CallParser()
    return ToolCallParser(fmt)


def parse_answer(text: str, fmt: ToolFormat = HERMES,
                 schemas: Mapping[str, Any] | None = None) -> tuple[str | None, list[ToolCall], bool]:
    """(content without the call blocks or None, calls with `arguments` as JSON text, whether a
    repeated call ended the answer)."""
    parser = call_parser(fmt, schemas)
    content, calls = collect(parser.feed(text) + parser.finish())
    return content, calls, parser.ended_by_repeat


def parse_tool_calls(text: str, fmt: ToolFormat = HERMES) -> tuple[str | None, list[ToolCall]]:
    """(content without the call blocks or None, calls with `arguments` as JSON text)."""
    content, calls, _ = parse_answer(text, fmt)
    return content, calls
