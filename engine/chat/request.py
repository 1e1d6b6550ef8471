"""One chat request in, one engine request out: the prompt and the `SamplingParams` (with its
guided-decoding spec) of a chat request, and how its output is to be read.

Which constraint a request gets:
- `tools` + `tool_choice` (`none | auto | required | named`) + `parallel_tool_calls`: the tool
  constraint; `none` offers no tools and parses nothing.
- `response_format` (or the Responses API's `text.format`) or one of vLLM's extras: the output
  constraint, at most one of them.
- Both: with `tool_choice` `required` or a named function the calls win (the format is for the
  final answer, a later turn); with `auto` the output is either tool calls or the formatted
  answer, never free text (LangChain's agents send both and expect exactly that)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.chat.answered import repeated_call_texts
from engine.chat.constraints import as_format, guided_for_tools, wants_json_note
from engine.chat.extras import structured_output
from engine.chat.messages import JSON_REPLY_NOTE, with_system_note
from engine.chat.output import ChatOutputParser
from engine.chat.template import render_chat, uses_tool_history
from engine.chat.tools import as_dict, normalize_tool_choice, normalize_tools
from engine.guided_spec import GuidedSpec, StructuralTag
from engine.sampling_params import SamplingParams


@dataclass
class ChatRequest:
    """The chat fields of a request, whichever API it came through (Chat Completions, Responses,
    LangChain); messages and tools as OpenAI shapes them, dicts or pydantic models."""

    messages: Sequence[Any]
    tools: list[Any] | None = None
    tool_choice: Any = None  # None: auto with tools, none without, as in OpenAI's API
    parallel_tool_calls: bool | None = None  # None: allowed, as in OpenAI's API
    response_format: Any = None
    format_param: str = "response_format"  # how errors name it: "text.format" for Responses
    guided_extras: Mapping[str, Any] | None = None  # vLLM's guided_json, ..., structured_outputs
    add_generation_prompt: bool = True
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Steer the answer off repeating a call whose result is already in the conversation
    # (engine/chat/answered.py); off by default, measured in the issue 17 note.
    avoid_repeated_calls: bool = False


@dataclass(frozen=True)
class PreparedChat:
    prompt: str
    params: SamplingParams
    parses_calls: bool  # tools offered: the output is split into content and tool calls
    strips_markup: bool  # free text after tool results, no calls parsed: our markup is removed

    def output_parser(self) -> ChatOutputParser:
        return ChatOutputParser(self.parses_calls, self.strips_markup)


def chat_constraint(request: ChatRequest) -> tuple[bool, GuidedSpec | None]:
    """(whether calls are parsed, the guided-decoding spec) of a request, checked: bad tools,
    tool_choice or formats raise InvalidRequestError naming the field."""
    output = structured_output(request.response_format, request.guided_extras, request.format_param)
    fns = normalize_tools(request.tools)
    choice = normalize_tool_choice(request.tool_choice, fns)
    parallel = True if request.parallel_tool_calls is None else request.parallel_tool_calls
    if not fns or choice == "none":
        return False, output
    if output is None or choice != "auto":
        guided = guided_for_tools(request.tools, request.tool_choice, parallel)
    else:
        calls = guided_for_tools(request.tools, "required", parallel)
        assert calls is not None and isinstance(calls.constraint, StructuralTag)
        either = {"type": "or", "elements": [calls.constraint.tag["format"], as_format(output)]}
        guided = GuidedSpec(StructuralTag({"type": "structural_tag", "format": either}))
    if request.avoid_repeated_calls and guided is not None and (avoid := repeated_call_texts(request.messages)):
        guided = replace(guided, avoid=tuple(avoid))
    return True, guided


def prepare_chat(tokenizer, request: ChatRequest, sampling: SamplingParams) -> PreparedChat:
    """The prompt and the engine parameters (`sampling` with the request's guided spec) of a chat
    request. A reply constrained to any JSON object (`json_object`) is announced in the system
    message (JSON_REPLY_NOTE)."""
    parses_calls, guided = chat_constraint(request)
    messages = list(request.messages)
    if wants_json_note(guided):
        messages = with_system_note(messages, JSON_REPLY_NOTE)
    prompt = render_chat(tokenizer, messages, request.tools, request.tool_choice,
                         add_generation_prompt=request.add_generation_prompt, **request.template_kwargs)
    history = uses_tool_history([as_dict(m) for m in messages])
    return PreparedChat(prompt, replace(sampling, guided=guided), parses_calls, not parses_calls and history)
