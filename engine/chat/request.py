"""One chat request in, one engine request out: the prompt and the `SamplingParams` (with its
guided-decoding spec) of a chat request, and how its output is to be read.

Which constraint a request gets:
- `tools` + `tool_choice` (`none | auto | required | named`) + `parallel_tool_calls`: the tool
  constraint; `none` offers no tools and parses nothing.
- `response_format` (or the Responses API's `text.format`) or one of vLLM's extras: the output
  constraint, at most one of them.
- Both: with `tool_choice` `required` or a named function the calls win (the format is for the
  final answer, a later turn); with `auto` the output is either tool calls or the formatted
  answer, never free text (LangChain's agents send both and expect exactly that).

Calls are written in the model's own format (engine/chat/tool_formats.py: from the template or the
server's `--tool-call-parser`); a reasoning model's thinking comes first, unconstrained, and the
constraint applies after it (engine/chat/reasoning.py, engine/thinking.py)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.chat.answered import repeated_call_texts
from engine.chat.constraints import as_format, guided_for_tools, wants_json_note
from engine.chat.extras import structured_output
from engine.chat.messages import JSON_REPLY_NOTE, with_system_note
from engine.chat.options import ChatOptions
from engine.chat.output import ChatAnswer, ChatOutputParser, RepeatWatch, read_answer
from engine.chat.reasoning import ReasoningFormat, Start, reasoning_format, thinking_start
from engine.chat.template import chat_template_text, render_chat, template_supports_tools, uses_tool_history
from engine.chat.tool_formats import HERMES, ToolFormat, tool_format
from engine.chat.tools import as_dict, normalize_tool_choice, normalize_tools
from engine.errors import InvalidRequestError
from engine.guided_spec import GuidedSpec, StructuralTag
from engine.sampling_params import SamplingParams
from engine.thinking import Thinking

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")


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
    # OpenAI's reasoning_effort: "none" turns thinking off (enable_thinking false, as Qwen3's template
    # reads it); any other is given to the template as `reasoning_effort` (gpt-oss's reads it).
    reasoning_effort: str | None = None
    max_thinking_tokens: int | None = None  # None: the server's --max-thinking-tokens


@dataclass(frozen=True)
class PreparedChat:
    prompt: str
    params: SamplingParams
    parses_calls: bool  # tools offered: the output is split into content and tool calls
    strips_markup: bool  # free text after tool results, no calls parsed: our markup is removed
    tool_format: ToolFormat = HERMES
    reasoning: ReasoningFormat | None = None  # the model's thinking marks
    thinking: Start = "off"  # where the output starts: inside the thinking, before it, or without
    tool_schemas: Mapping[str, Any] | None = None  # the offered tools' parameters, by name

    def output_parser(self) -> ChatOutputParser:
        return ChatOutputParser(self.parses_calls, self.strips_markup, self.tool_format, self.reasoning,
                                self.thinking, self.tool_schemas)

    def read(self, text: str) -> ChatAnswer:
        """A whole sample: content, calls, reasoning."""
        return read_answer(text, self.parses_calls, self.strips_markup, self.tool_format, self.reasoning,
                           self.thinking, self.tool_schemas)

    def repeat_watch(self, stop) -> RepeatWatch | None:
        """What stops a sample whose repeated call ended its answer (non-streamed), when calls are parsed."""
        return RepeatWatch(stop, self.output_parser) if self.parses_calls else None


def chat_formats(tokenizer, options: ChatOptions | None) -> tuple[ToolFormat, ReasoningFormat | None]:
    """The model's tool-call and reasoning formats: the server's choice, or what its template shows. A
    template that does not render tools gets our preamble, which teaches Hermes' format."""
    options = options or ChatOptions()
    template = chat_template_text(tokenizer)
    tools = tool_format(options.tool_call_parser, template) if template_supports_tools(tokenizer) else HERMES
    return tools, reasoning_format(options.reasoning_parser, template)


def special_marks(tokenizer, tools: ToolFormat, reasoning: ReasoningFormat | None) -> dict[str, int]:
    """The special tokens the formats' marks are made of (Mistral's `[TOOL_CALLS]` and `[ARGS]`, Gemma 4's
    `<|channel>`), by text: decoding keeps them in the text while it drops the other special tokens (the
    parsers read the marks there), and the grammar writes them as those tokens."""
    marks = [*tools.marks, *((reasoning.start, reasoning.end) if reasoning else ())]
    special = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special |= {t.content for t in added.values() if getattr(t, "special", False)}
    vocab = getattr(tokenizer, "get_added_vocab", dict)() or {}
    return {tok: i for tok, i in vocab.items() if tok in special and any(tok in m for m in marks)}


def _stop_at(params: SamplingParams, tokenizer, mark: str) -> SamplingParams:
    """`params` stopping where the model writes `mark`: at its token where the tokenizer holds one (a special
    token's text never reaches the output a stop string is matched in), else at the text."""
    token = (getattr(tokenizer, "get_added_vocab", dict)() or {}).get(mark)
    if token is not None:
        return replace(params, stop_token_ids=[*params.stop_token_ids, token])
    return replace(params, stop=[*params.stop, mark])


def _template_kwargs(request: ChatRequest) -> dict[str, Any]:
    kwargs = dict(request.template_kwargs)
    effort = request.reasoning_effort
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            raise InvalidRequestError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, "
                                      f"got {effort!r}", "reasoning_effort")
        if effort == "none":
            kwargs.setdefault("enable_thinking", False)
        else:
            kwargs.setdefault("reasoning_effort", effort)
    return kwargs


def chat_constraint(request: ChatRequest, fmt: ToolFormat = HERMES,
                    special: frozenset[str] = frozenset()) -> tuple[bool, GuidedSpec | None]:
    """(whether calls are parsed, the guided-decoding spec) of a request, checked: bad tools,
    tool_choice or formats raise InvalidRequestError naming the field. `special`: the format's marks that
    are single special tokens of the model's tokenizer."""
    output = structured_output(request.response_format, request.guided_extras, request.format_param)
    fns = normalize_tools(request.tools)
    choice = normalize_tool_choice(request.tool_choice, fns)
    parallel = True if request.parallel_tool_calls is None else request.parallel_tool_calls
    if not fns or choice == "none":
        return False, output
    if output is None or choice != "auto":
        guided = guided_for_tools(request.tools, request.tool_choice, parallel, fmt, special)
    else:
        calls = guided_for_tools(request.tools, "required", parallel, fmt, special)
        assert calls is not None and isinstance(calls.constraint, StructuralTag)
        either = {"type": "or", "elements": [calls.constraint.tag["format"], as_format(output)]}
        guided = GuidedSpec(StructuralTag({"type": "structural_tag", "format": either}))
    if request.avoid_repeated_calls and guided is not None and (avoid := repeated_call_texts(request.messages, fmt)):
        guided = replace(guided, avoid=tuple(avoid))
    return True, guided


def prepare_chat(tokenizer, request: ChatRequest, sampling: SamplingParams,
                 options: ChatOptions | None = None) -> PreparedChat:
    """The prompt and the engine parameters (`sampling` with the request's guided spec and thinking
    section) of a chat request, under the served model's chat `options`. A reply constrained to any JSON
    object (`json_object`) is announced in the system message (JSON_REPLY_NOTE)."""
    tools, reasoning = chat_formats(tokenizer, options)
    marks = special_marks(tokenizer, tools, reasoning)
    parses_calls, guided = chat_constraint(request, tools, frozenset(marks))
    messages = list(request.messages)
    if wants_json_note(guided):
        messages = with_system_note(messages, JSON_REPLY_NOTE)
    prompt = render_chat(tokenizer, messages, request.tools, request.tool_choice,
                         add_generation_prompt=request.add_generation_prompt, **_template_kwargs(request))
    history = uses_tool_history([as_dict(m) for m in messages])
    start = thinking_start(prompt, reasoning) if request.add_generation_prompt else "off"
    thinking = None
    if reasoning is not None and start != "off":
        budget = request.max_thinking_tokens
        if budget is None and options is not None:
            budget = options.max_thinking_tokens
        thinking = Thinking(reasoning.start, reasoning.end, start == "open", budget)
    params = replace(sampling, guided=guided, thinking=thinking, keep_special_token_ids=tuple(sorted(marks.values())))
    if parses_calls and tools.handover:
        params = _stop_at(params, tokenizer, tools.handover)
    schemas = {f.name: f.parameters for f in normalize_tools(request.tools)} if parses_calls else None
    return PreparedChat(prompt, params, parses_calls, not parses_calls and history, tools, reasoning, start,
                        schemas)
