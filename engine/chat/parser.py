"""The streaming tool-call parser: model text, fed one delta at a time, split into content and
complete, schema-shaped tool calls."""

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from engine.chat.json_scan import JsonValueScanner
from engine.chat.markup import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_MARKUP, find_markup, held_prefix
from engine.chat.tools import ToolCall, new_tool_call_id

log = logging.getLogger(__name__)

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
        self._scanner = JsonValueScanner()
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
                stray = find_markup(buf)
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
                keep = max(held_prefix(buf, m) for m in (TOOL_CALL_OPEN, *TOOL_MARKUP))
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
                    self._buf, self._state, self._scanner = buf[m.end():], "args", JsonValueScanner()
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
            self._buf = buf[len(buf) - held_prefix(buf, TOOL_CALL_CLOSE):]
            break
        return events



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
