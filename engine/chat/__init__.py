"""OpenAI chat semantics beside the engine core: chat templates, tool prompt formats, guided
specs for tools and response formats, and the streaming parser that turns model text back into
content, tool calls and finish reasons. Used by the gateway (HTTP) and the in-process LangChain
model alike, so nothing here knows HTTP: bad input raises `InvalidRequestError(message, param)`.
The engine core below knows prompts, token ids, `SamplingParams` and grammars, nothing of this.

    prepared = prepare_chat(tokenizer, ChatRequest(messages, tools, tool_choice), SamplingParams(...))
    parser = prepared.output_parser()   # per sample: feed(delta, finished) -> stream events
"""

from engine.chat.constraints import guided_for_response_format, guided_for_tools, json_guided
from engine.chat.extras import EXTRA_FIELDS, structured_output
from engine.chat.markup import TOOL_MARKUP, MarkupFilter, strip_markup
from engine.chat.messages import content_text
from engine.chat.options import ChatOptions
from engine.chat.output import ChatAnswer, ChatOutputParser, RepeatWatch, finish_reason, read_answer, read_whole
from engine.chat.parser import (
    ContentDelta,
    ReasoningDelta,
    StreamEvent,
    ToolCallArguments,
    ToolCallParser,
    ToolCallStart,
    collect,
    parse_answer,
    parse_tool_calls,
)
from engine.chat.reasoning import REASONING_FORMATS, ReasoningFormat, reasoning_format
from engine.chat.request import ChatRequest, PreparedChat, chat_constraint, chat_formats, prepare_chat
from engine.chat.template import load_chat_template, render_chat
from engine.chat.tool_formats import TOOL_FORMATS, ToolFormat, tool_format
from engine.chat.tools import FunctionTool, ToolCall

__all__ = [
    "EXTRA_FIELDS", "REASONING_FORMATS", "TOOL_FORMATS", "TOOL_MARKUP", "ChatAnswer", "ChatOptions",
    "ReasoningDelta", "ReasoningFormat", "ToolFormat", "chat_formats", "load_chat_template", "read_answer",
    "reasoning_format", "tool_format",
    "ChatOutputParser", "ChatRequest", "ContentDelta", "FunctionTool",
    "MarkupFilter", "PreparedChat", "RepeatWatch", "StreamEvent", "ToolCall", "ToolCallArguments",
    "ToolCallParser", "ToolCallStart", "chat_constraint", "collect", "content_text", "finish_reason",
    "guided_for_response_format", "guided_for_tools", "json_guided", "parse_answer", "parse_tool_calls",
    "prepare_chat", "read_whole", "render_chat", "strip_markup", "structured_output",
]
