"""A thinking section at the start of the output (`<think>...</think>`, Qwen3's and other reasoning models'):
a request's grammar (tools, response formats) applies only after it, so the model thinks in free text
and then answers in the constrained form; and a thinking budget forces its end mark, so a small model
cannot think until `max_tokens` and never answer.

`SamplingParams.thinking` describes the section; each sequence reads its output through a
`ThinkingGate` (engine/guided.py holds it beside the grammar matcher), byte by byte, so marks split
over several tokens or sharing a token with the answer's first text are found."""

from dataclasses import dataclass
from typing import Literal

from engine.errors import InvalidRequestError


@dataclass(frozen=True)
class Thinking:
    start: str = "<think>"
    end: str = "</think>"
    opened: bool = False  # the prompt opened it: the output starts inside (else the output may open it)
    max_tokens: int | None = None  # thinking tokens after which `end` is forced; None: no budget

    def __post_init__(self) -> None:
        if not self.start or not self.end:
            raise InvalidRequestError("thinking needs start and end marks", "thinking")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 0):
            raise InvalidRequestError(f"max_thinking_tokens must be a non-negative integer, got {self.max_tokens}",
                                      "max_thinking_tokens")


class ThinkingGate:
    """One sequence's way through its thinking: `maybe` (the output may still open it), `thinking`, then
    `passed`. `end_ids`: the end mark's tokens, forced one per step once the budget is spent."""

    __slots__ = ("spec", "state", "buf", "count", "tokens", "after", "end_ids", "forced")

    def __init__(self, spec: Thinking, end_ids: list[int]):
        self.spec = spec
        self.state: Literal["maybe", "thinking", "passed"] = "thinking" if spec.opened else "maybe"
        self.buf = bytearray()  # maybe: the output so far; thinking: the last bytes, to find the end mark
        self.count = 0  # tokens read while thinking
        self.tokens = 0  # tokens read in all
        self.after = b""  # the bytes after the end mark in the token that ended the thinking
        self.end_ids = end_ids
        self.forced: list[int] | None = None  # the end mark's tokens still to force

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    def feed(self, token: int, data: bytes) -> None:
        self.tokens += 1
        if self.state == "passed":
            return
        if self.forced:
            self.forced = self.forced[1:] if token == self.forced[0] else []
        self.buf += data
        if self.state == "maybe":
            text = bytes(self.buf).lstrip()
            start = self.spec.start.encode()
            if text.startswith(start):
                self.state, self.buf = "thinking", bytearray(text[len(start):])
            elif not start.startswith(text):
                self.state = "passed"  # no thinking: the grammar has had every token
                return
            else:
                return
        self.count += 1
        end = self.spec.end.encode()
        at = self.buf.find(end)
        if at >= 0:
            self.state, self.after = "passed", bytes(self.buf[at + len(end):])
            return
        del self.buf[: max(0, len(self.buf) - len(end) + 1)]

    def forced_token(self) -> int | None:
        """The token this step must be, once the budget is spent (the end mark's next token)."""
        budget = self.spec.max_tokens
        if self.state != "thinking" or budget is None or self.count < budget or not self.end_ids:
            return None
        if self.forced is None or not self.forced:
            self.forced = list(self.end_ids)
        return self.forced[0]
