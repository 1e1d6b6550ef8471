"""What every streaming tool-call parser shares (engine/chat/parser.py, pythonic.py): text fed one delta
at a time into a buffer its `_drain` reads, the calls given so far, and content with leading whitespace
removed and trailing whitespace held until more content follows."""

import json
from typing import Any

from engine.chat.events import ContentDelta, StreamEvent, ToolCallArguments, ToolCallStart
from engine.chat.tools import ToolCall, new_tool_call_id


class TextStream:
    def __init__(self) -> None:
        self._buf = ""  # text received but not yet emitted or discarded
        self._pending_ws = ""  # content whitespace held until more content follows
        self._content_started = False
        self._calls: list[ToolCall] = []
        self._seen: list[tuple[str, Any]] = []  # (name, parsed arguments) of the calls given
        self.ended_by_repeat = False

    @property
    def tool_calls(self) -> list[ToolCall]:
        return list(self._calls)

    def feed(self, delta: str) -> list[StreamEvent]:
        self._buf += delta
        return self._drain(final=False)

    def finish(self) -> list[StreamEvent]:
        """Flushes what was held back; call once after the last delta (a call still open is dropped)."""
        return self._drain(final=True)

    def _drain(self, final: bool) -> list[StreamEvent]:
        raise NotImplementedError

    def _content(self, text: str, events: list[StreamEvent]) -> None:
        text = self._pending_ws + text
        if not self._content_started:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        if body:
            self._content_started = True
            events.append(ContentDelta(body))

    def _give_call(self, name: str, args: Any, events: list[StreamEvent]) -> bool:
        """A whole call whose arguments are parsed: given as one start and one arguments event, unless the
        same call was given already, which ends the answer (`ended_by_repeat`; returns False)."""
        if (name, args) in self._seen:
            self.ended_by_repeat = True
            return False
        self._seen.append((name, args))
        text = json.dumps(args, ensure_ascii=False)
        call = ToolCall(new_tool_call_id(), name, text)
        index = len(self._calls)
        self._calls.append(call)
        events += [ToolCallStart(index, call.id, name), ToolCallArguments(index, text)]
        return True
