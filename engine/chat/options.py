"""A served model's chat settings, as vLLM's `serve` flags name them: the tool-call and reasoning formats
(None: read from the chat template) and the thinking budget of requests that set none. The chat template
itself (`--chat-template`) replaces the tokenizer's when the engine loads (engine/chat/template.py)."""

from dataclasses import dataclass

from engine.chat.reasoning import REASONING_FORMATS
from engine.chat.tool_formats import TOOL_FORMATS


@dataclass(frozen=True)
class ChatOptions:
    tool_call_parser: str | None = None  # engine/chat/tool_formats.py
    reasoning_parser: str | None = None  # engine/chat/reasoning.py
    max_thinking_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.tool_call_parser and self.tool_call_parser not in TOOL_FORMATS:
            raise ValueError(f"unknown tool call parser {self.tool_call_parser!r}; known: {', '.join(TOOL_FORMATS)}")
        if self.reasoning_parser and self.reasoning_parser not in REASONING_FORMATS:
            raise ValueError(f"unknown reasoning parser {self.reasoning_parser!r}; "
                             f"known: {', '.join(REASONING_FORMATS)}")
        if self.max_thinking_tokens is not None and self.max_thinking_tokens < 0:
            raise ValueError(f"max_thinking_tokens must be 0 or more, got {self.max_thinking_tokens}")
