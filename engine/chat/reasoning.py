"""Thinking text (Qwen3, SmolLM3, DeepSeek-R1 distills: `<think>...</think>` before the answer; Mistral's
`[THINK]...[/THINK]`; Gemma 4's `<|channel>thought...<channel|>`) kept out of
the answer: it goes to `reasoning_content`, never into `content`, and grammars for tools or formats apply
after it (engine/thinking.py). Named as vLLM's `--reasoning-parser` names them.

Where the thinking starts is read from the prompt: a template that opened `<think>` in the generation
prompt (DeepSeek-R1's, Qwen3's thinking-only ones) starts the output inside it; one that closed an empty
`<think></think>` there (Qwen3 with `enable_thinking: false`) has no thinking at all; otherwise the output
may open it itself."""

from dataclasses import dataclass
from typing import Literal

from engine.chat.markup import held_prefix
from engine.errors import InvalidRequestError


@dataclass(frozen=True)
class ReasoningFormat:
    name: str  # vLLM's parser name
    start: str
    end: str


REASONING_FORMATS = {f.name: f for f in (
    ReasoningFormat("qwen3", "<think>", "</think>"),
    ReasoningFormat("deepseek_r1", "<think>", "</think>"),
    ReasoningFormat("mistral", "[THINK]", "[/THINK]"),
    # Gemma 4's thought channel; its template closes an empty one in the prompt when thinking is off.
    ReasoningFormat("gemma4", "<|channel>thought", "<channel|>"),
)}


def reasoning_format(name: str | None, template: str | None) -> ReasoningFormat | None:
    """The format named (vLLM's `--reasoning-parser`), or the one the chat template shows (None: no thinking)."""
    if name:
        if name not in REASONING_FORMATS:
            raise InvalidRequestError(f"unknown reasoning parser {name!r}; known: {', '.join(REASONING_FORMATS)}",
                                      "reasoning_parser")
        return REASONING_FORMATS[name]
    if template and "[THINK]" in template and "[/THINK]" in template:
        return REASONING_FORMATS["mistral"]
    if template and "<|channel>thought" in template and "<channel|>" in template:
        return REASONING_FORMATS["gemma4"]
    if template and "</think>" in template:
        return REASONING_FORMATS["qwen3"]
    return None


Start = Literal["open", "maybe", "off"]


def thinking_start(prompt: str, fmt: ReasoningFormat | None) -> Start:
    """Where the output stands: inside the thinking (`open`), before a thinking it may open (`maybe`), or
    with thinking turned off or unknown (`off`)."""
    if fmt is None:
        return "off"
    tail = prompt.rstrip()
    if tail.endswith(fmt.end):
        return "off"
    if tail.endswith(fmt.start):
        return "open"
    return "maybe"


class ReasoningSplitter:
    """Model text, fed one delta at a time, split into (reasoning, answer) pieces. Partial marks are held
    back; the whitespace around the marks (`<think>\\n...\\n</think>\\n\\n`) is dropped."""

    def __init__(self, fmt: ReasoningFormat, start: Start):
        self.fmt = fmt
        self._state: Literal["maybe", "thinking", "answer"] = {"open": "thinking", "maybe": "maybe"}.get(
            start, "answer")  # type: ignore[assignment]
        self._buf = ""
        self._pending_ws = ""  # reasoning whitespace held until more reasoning follows
        self._started = False  # reasoning text given
        self._answer_started = False

    @property
    def thinking(self) -> bool:
        return self._state == "thinking"

    def feed(self, delta: str, final: bool = False) -> tuple[str, str]:
        self._buf += delta
        reasoning: list[str] = []
        answer: list[str] = []
        while True:
            buf = self._buf
            if self._state == "maybe":
                stripped = buf.lstrip()
                if stripped.startswith(self.fmt.start):
                    self._buf, self._state = stripped[len(self.fmt.start):], "thinking"
                    continue
                if self.fmt.start.startswith(stripped) and not final:
                    break  # nothing yet, or a start mark being written
                self._state = "answer"
                continue
            if self._state == "thinking":
                at = buf.find(self.fmt.end)
                if at >= 0:
                    reasoning.append(self._reasoning(buf[:at]))
                    self._pending_ws = ""
                    self._buf, self._state = buf[at + len(self.fmt.end):], "answer"
                    continue
                # A partly written end mark is held; at the end it is dropped (cut off by max_tokens).
                keep = held_prefix(buf, self.fmt.end)
                reasoning.append(self._reasoning(buf[: len(buf) - keep]))
                self._buf = "" if final else buf[len(buf) - keep:]
                break
            if not self._answer_started:  # the blank lines after the end mark
                buf = buf.lstrip()
                if not buf and not final:
                    self._buf = ""
                    break
            self._answer_started = True
            answer.append(buf)
            self._buf = ""
            break
        return "".join(reasoning), "".join(answer)

    def _reasoning(self, text: str) -> str:
        text = self._pending_ws + text
        if not self._started:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        self._started = self._started or bool(body)
        return body


def split_reasoning(text: str, fmt: ReasoningFormat | None, start: Start) -> tuple[str | None, str]:
    """A whole text as (reasoning or None, answer)."""
    if fmt is None or start == "off":
        return None, text
    reasoning, answer = ReasoningSplitter(fmt, start).feed(text, final=True)
    return reasoning or None, answer
