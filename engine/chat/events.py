"""What the streaming parsers (engine/chat/parser.py, pythonic.py, reasoning) emit as they read model text:
content, thinking, and a tool call's start and argument fragments."""

from dataclasses import dataclass


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


@dataclass(frozen=True)
class ReasoningDelta:
    text: str  # thinking text (engine/chat/reasoning.py), never content


StreamEvent = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArguments
