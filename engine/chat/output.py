"""Engine outputs back into chat semantics: content, tool calls and OpenAI's finish reason, one
parser per sample whether calls are parsed, our markup filtered, or the text passed as it is."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.chat.markup import MarkupFilter, strip_markup
from engine.chat.parser import ContentDelta, ReasoningDelta, StreamEvent, call_parser, parse_answer
from engine.chat.reasoning import ReasoningFormat, ReasoningSplitter, Start, split_reasoning
from engine.chat.tool_formats import HERMES, ToolFormat
from engine.chat.tools import ToolCall
from engine.outputs import RequestOutput


def finish_reason(reason: str | None, calls: list[ToolCall], ended_by_repeat: bool = False) -> str | None:
    """OpenAI's `tool_calls` when the model stopped after calling, or when a repeated call ended the
    answer (the parser dropped it and all after it, so nothing was cut); a cut-off (`length`) stays,
    even where the only thing cut was a call the parser withheld."""
    if calls and (reason == "stop" or ended_by_repeat):
        return "tool_calls"
    return reason


class ChatOutputParser:
    """One sample's text, fed one engine delta at a time, as stream events. Thinking first, as reasoning
    (engine/chat/reasoning.py); then the answer: with calls parsed, the call parser in the model's tool
    format (engine/chat/parser.py); after tool results without calls parsed, our markup removed
    (MarkupFilter); otherwise the text as it is."""

    def __init__(self, parses_calls: bool, strips_markup: bool, tool_format: ToolFormat = HERMES,
                 reasoning: ReasoningFormat | None = None, thinking: Start = "off",
                 tool_schemas: Mapping[str, Any] | None = None):
        self.parses_calls = parses_calls
        self._calls = call_parser(tool_format, tool_schemas) if parses_calls else None
        self._markup = MarkupFilter() if strips_markup and not parses_calls else None
        self._thinking = ReasoningSplitter(reasoning, thinking) if reasoning and thinking != "off" else None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self._calls.tool_calls if self._calls is not None else []

    @property
    def ended_by_repeat(self) -> bool:
        """A repeated call ended the answer: the engine sequence can stop here."""
        return self._calls is not None and self._calls.ended_by_repeat

    def feed(self, delta: str, finished: bool = False) -> list[StreamEvent]:
        """`finished`: this is the sample's last delta, so what was held back is flushed."""
        events: list[StreamEvent] = []
        if self._thinking is not None:
            reasoning, delta = self._thinking.feed(delta, finished)
            if reasoning:
                events.append(ReasoningDelta(reasoning))
        if self._calls is not None:
            return events + self._calls.feed(delta) + (self._calls.finish() if finished else [])
        text = delta
        if self._markup is not None:
            text = self._markup.feed(delta) + (self._markup.finish() if finished else "")
        return events + ([ContentDelta(text)] if text else [])

    def finish_reason(self, reason: str | None) -> str | None:
        return finish_reason(reason, self.tool_calls, self.ended_by_repeat)


@dataclass(frozen=True)
class ChatAnswer:
    """A whole sample read: content (None only when calls are parsed and there is no text beside them),
    calls, whether a repeated call ended it, and the thinking (None when there was none)."""

    content: str | None
    tool_calls: list[ToolCall]
    ended_by_repeat: bool
    reasoning: str | None = None


def read_answer(text: str, parses_calls: bool, strips_markup: bool, tool_format: ToolFormat = HERMES,
                reasoning: ReasoningFormat | None = None, thinking: Start = "off",
                tool_schemas: Mapping[str, Any] | None = None) -> ChatAnswer:
    thought, text = split_reasoning(text, reasoning, thinking)
    if parses_calls:
        return ChatAnswer(*parse_answer(text, tool_format, tool_schemas), thought)
    return ChatAnswer(strip_markup(text) if strips_markup else text, [], False, thought)


def read_whole(text: str, parses_calls: bool, strips_markup: bool) -> tuple[str | None, list[ToolCall], bool]:
    """A whole sample in Hermes' format without thinking: (content, calls, whether a repeated call ended it)."""
    a = read_answer(text, parses_calls, strips_markup)
    return a.content, a.tool_calls, a.ended_by_repeat


class RepeatWatch:
    """Reads each sample's text as it is generated, for a non-streamed answer: when a repeated call
    ends a sample's answer (the parser drops it and all after it), the sample is stopped in the
    engine there instead of running on to max_tokens for text that is thrown away."""

    def __init__(self, stop: Callable[[int, int], None], new_parser: Callable[[], ChatOutputParser] | None = None):
        self._stop = stop  # (prompt index, sample index)
        # The request's own output parser (its tool format and thinking); Hermes without thinking if not given.
        self._new_parser = new_parser or (lambda: ChatOutputParser(True, False))
        self._parsers: dict[tuple[int, int], ChatOutputParser] = {}

    def __call__(self, prompt_index: int, out: RequestOutput) -> None:
        for o in out.outputs:
            parser = self._parsers.get((prompt_index, o.index))
            if parser is None:
                parser = self._parsers[prompt_index, o.index] = self._new_parser()
            if parser.ended_by_repeat:
                continue
            parser.feed(o.delta_text)
            if parser.ended_by_repeat and o.finish_reason is None:
                self._stop(prompt_index, o.index)
