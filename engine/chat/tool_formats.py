"""How each model family writes a tool call, named as vLLM's `--tool-call-parser` names them. Every format
here is a JSON object `{"name": ..., "<args key>": {...}}` between a family's own marks, so one grammar
(engine/chat/constraints.py), one budget closer (engine/json_budget.py) and one parser
(engine/chat/parser.py) serve them all; the OpenAI output is the same whatever the format.

    hermes          <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>   Qwen2.5, Qwen3, SmolLM3, Hermes
    llama3_json     {"name": "f", "parameters": {...}}                            Llama 3.1-3.3
    mistral         [TOOL_CALLS][{"name": "f", "arguments": {...}}]               Mistral 7B v0.3, Nemo
                    [TOOL_CALLS]f[ARGS]{...}   (chosen where the template writes [ARGS])   Ministral 3, Mistral
                                                                                  Small 3.2, Devstral, Magistral
    granite         <|tool_call|>[{"name": "f", "arguments": {...}}]              Granite 3.x
    phi4_mini_json  functools[{"name": "f", "arguments": {...}}]                  Phi-4-mini
    pythonic        [f(a=1, b="x"), g(c=2)]                                       Llama 3.2 (pythonic template), Llama 4
    qwen3_coder     <tool_call>\\n<function=f>\\n<parameter=a>\\n1\\n</parameter>\\n</function>\\n</tool_call>
                                                                                  Qwen3-Coder, Qwen3.5
    gemma4          <|tool_call>call:f{a:1,b:<|"|>x<|"|>}<tool_call|>                Gemma 4

Mistral's newer form names the call before its arguments object (`[CALL_ID]id` may sit between, as Mistral
Small 3.2 writes it); the one `mistral` parser reads both forms, and the grammar writes the template's.
Its marks are special tokens in Mistral's HF tokenizers: `marks` names them, so decoding keeps them in the
text (engine/chat/request.py). Pythonic, Qwen3-Coder's XML and Gemma 4's calls are no JSON object: they have
their own parsers and grammars (engine/chat/pythonic.py, engine/chat/xml_calls.py, engine/chat/gemma4_calls.py).
The grammar writes one call per block (parallel calls as several blocks, a newline apart, none between Gemma
4's, as its template writes them) so every call
has the same begin and end text; the parser also reads a family's list of several calls in one block."""

import json
from dataclasses import dataclass

from engine.chat.gemma4_calls import HANDOVER, QUOTE, arguments_source
from engine.errors import InvalidRequestError


@dataclass(frozen=True)
class ToolFormat:
    name: str  # vLLM's parser name
    trigger: str  # what opens a call in free text
    opener: str  # written after the trigger, before the call object ("[" of a list)
    args_key: str  # "arguments" or Llama 3's "parameters"
    closer: str  # written after the call object
    # The trigger is the call object's own start (Llama 3's `{"name": `): the parser keeps it as JSON.
    trigger_in_call: bool = False
    pythonic: bool = False  # `[f(a=1)]`, engine/chat/pythonic.py
    xml: bool = False  # `<function=f><parameter=a>1</parameter></function>`, engine/chat/xml_calls.py
    args_mark: str = ""  # Mistral's `[ARGS]`: the call is `{trigger}name{args_mark}{arguments}`
    gemma: bool = False  # `<|tool_call>call:f{a:1}<tool_call|>`, engine/chat/gemma4_calls.py
    separator: str = "\n"  # what the grammar writes between parallel calls
    # The mark a model writes after its calls to hand the turn to the tools (Gemma 4's `<|tool_response>`,
    # where its template puts their results): generation stops there, else the model writes the results itself.
    handover: str = ""

    @property
    def marks(self) -> tuple[str, ...]:
        """The format's marks a tokenizer may hold as special tokens, which decoding must keep in the text."""
        if self.gemma:
            return (self.trigger, self.closer, QUOTE)
        return (self.trigger, self.args_mark, "[CALL_ID]") if self.args_mark else (self.trigger,)

    def begin(self, tool_name: str) -> str:
        """A call's text up to its arguments, as the grammar writes it."""
        if self.pythonic:
            return f"[{tool_name}("
        if self.xml:
            return f"{self.trigger}\n<function={tool_name}>\n"
        if self.gemma:
            return f"{self.trigger}call:{tool_name}"
        if self.args_mark:
            return f"{self.trigger}{tool_name}{self.args_mark}"
        lead = "" if self.trigger_in_call else self.trigger + self.opener
        return f'{lead}{{"name": {json.dumps(tool_name)}, "{self.args_key}": '

    @property
    def end(self) -> str:
        """A call's text after its arguments."""
        if self.pythonic:
            return ")]"
        if self.xml:
            return "</function>" + self.closer
        if self.gemma:
            return self.closer
        return "" if self.args_mark else "}" + self.closer

    def call_text(self, tool_name: str, arguments: str) -> str:
        if self.pythonic:
            from engine.chat.pythonic import call_source

            return f"[{call_source(tool_name, arguments)}]"
        if self.xml:
            from engine.chat.xml_calls import parameters_source

            return self.begin(tool_name) + parameters_source(arguments) + self.end
        if self.gemma:
            return self.begin(tool_name) + arguments_source(arguments) + self.end
        return self.begin(tool_name) + arguments + self.end


HERMES = ToolFormat("hermes", "<tool_call>", "\n", "arguments", "\n</tool_call>")
# Mistral's newer form, `[TOOL_CALLS]name[ARGS]{...}`: read by the `mistral` parser too; written where the
# template writes it.
MISTRAL_ARGS = ToolFormat("mistral", "[TOOL_CALLS]", "", "arguments", "", args_mark="[ARGS]")
TOOL_FORMATS = {f.name: f for f in (
    HERMES,
    ToolFormat("llama3_json", '{"name": ', "", "parameters", "", trigger_in_call=True),
    ToolFormat("mistral", "[TOOL_CALLS]", "[", "arguments", "]"),
    ToolFormat("granite", "<|tool_call|>", "[", "arguments", "]"),
    ToolFormat("phi4_mini_json", "functools", "[", "arguments", "]"),
    ToolFormat("pythonic", "[", "", "", "]", pythonic=True),
    ToolFormat("qwen3_coder", "<tool_call>", "", "", "\n</tool_call>", xml=True),
    ToolFormat("gemma4", "<|tool_call>", "", "", "<tool_call|>", gemma=True, separator="", handover=HANDOVER),
)}

# What a chat template writes around the calls in its history or its instructions, most specific first.
_SIGNS = (
    ("<|tool_call>call:", "gemma4"),
    ("[func_name1(", "pythonic"),  # the instruction vLLM's pythonic templates (Llama 3.2, Llama 4) write
    ("<function=", "qwen3_coder"),  # before Hermes: these templates write <tool_call> too
    ("[TOOL_CALLS]", "mistral"),
    ("<|tool_call|>", "granite"),
    ("functools", "phi4_mini_json"),
    ("<tool_call>", "hermes"),
    ('"parameters": ', "llama3_json"),
    ("<|python_tag|>", "llama3_json"),
)


def tool_format(name: str | None, template: str | None = None) -> ToolFormat:
    """The format named (vLLM's `--tool-call-parser`), or the one the chat template writes (Hermes when it
    shows none: our preamble teaches Hermes)."""
    if name:
        if name not in TOOL_FORMATS:
            raise InvalidRequestError(f"unknown tool call parser {name!r}; known: {', '.join(TOOL_FORMATS)}",
                                      "tool_call_parser")
        return _variant(TOOL_FORMATS[name], template)
    for sign, found in _SIGNS:
        if template and sign in template:
            return _variant(TOOL_FORMATS[found], template)
    return HERMES


def _variant(fmt: ToolFormat, template: str | None) -> ToolFormat:
    """Mistral's form as the template writes it: `name[ARGS]{...}` (Ministral 3, Devstral) or a JSON list."""
    return MISTRAL_ARGS if fmt.name == "mistral" and template and "[ARGS]" in template else fmt
