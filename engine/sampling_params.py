"""Per-request decoding settings, named as vLLM and the OpenAI API name them."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import torch

from engine.errors import InvalidRequestError
from engine.guided_spec import GuidedSpec
from engine.thinking import Thinking

MAX_N = 128
MAX_LOGPROBS = 20
MAX_LOGIT_BIAS = 100.0
# What torch.Generator.manual_seed takes (it reads a seed modulo 2**64, so -1 seeds as 2**64 - 1 does).
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # OpenAI's range: -100 bans a token, 100 all but forces it


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True
    # Special tokens kept in the text even so: the chat layer's format marks that the tokenizer holds as
    # special tokens (Mistral's `[TOOL_CALLS]`), which its parsers read.
    keep_special_token_ids: tuple[int, ...] = ()
    # Grammar-constrained decoding (engine/guided_spec.py; the dict form, {"json_schema": ...} etc., is
    # read into a GuidedSpec), compiled by the engine's guided-decoding backend (engine/guided.py).
    guided: GuidedSpec | None = None
    # token id -> value added to its logit before sampling (OpenAI's logit_bias; -100 all but bans it)
    logit_bias: dict[int, float] = field(default_factory=dict)
    # Guided JSON (compact json_schema / json_object, tool calls) is closed when the tokens left before
    # max_tokens are just enough to (engine/json_budget.py); False leaves it to the grammar alone.
    guided_budget_close: bool = True
    # A thinking section at the start of the output (engine/thinking.py): the guided spec applies after
    # it, and its budget forces its end. The chat layer sets it for reasoning models.
    thinking: Thinking | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.logit_bias = dict(self.logit_bias or {})
        if isinstance(self.guided, Mapping):
            self.guided = GuidedSpec.from_dict(self.guided)
        self.validate()

    @cached_property
    def logit_bias_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """logit_bias as (token ids, values), built once rather than at every sampled token."""
        return torch.tensor(list(self.logit_bias), dtype=torch.long), torch.tensor(list(self.logit_bias.values()))

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    def validate(self) -> None:
        def bad(msg: str, param: str) -> InvalidRequestError:
            return InvalidRequestError(msg, param)

        if not isinstance(self.n, int) or not 1 <= self.n <= MAX_N:
            raise bad(f"n must be an integer between 1 and {MAX_N}, got {self.n}", "n")
        if not 0.0 <= self.temperature <= 2.0:
            raise bad(f"temperature must be in [0, 2], got {self.temperature}", "temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise bad(f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        if self.top_k == 0 or self.top_k < -1:
            raise bad(f"top_k must be -1 (disabled) or at least 1, got {self.top_k}", "top_k")
        if not 0.0 <= self.min_p <= 1.0:
            raise bad(f"min_p must be in [0, 1], got {self.min_p}", "min_p")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise bad(f"{name} must be in [-2, 2], got {getattr(self, name)}", name)
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise bad(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}", "repetition_penalty")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise bad(f"max_tokens must be at least 1, got {self.max_tokens}", "max_tokens")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.min_tokens > self.max_tokens):
            raise bad(f"min_tokens must be in [0, max_tokens], got {self.min_tokens}", "min_tokens")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise bad(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}", "logprobs")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop must be a list of non-empty strings", "stop")
        if len(self.stop) > 16:
            raise bad("at most 16 stop sequences are allowed", "stop")
        if self.seed is not None and (not isinstance(self.seed, int) or not SEED_MIN <= self.seed <= SEED_MAX):
            raise bad(f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}]", "seed")
        for token, value in self.logit_bias.items():
            if not isinstance(token, int) or token < 0:
                raise bad(f"logit_bias keys must be token ids (non-negative integers), got {token!r}", "logit_bias")
            if not isinstance(value, int | float) or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                raise bad(f"logit_bias values must be in [-100, 100], got {value!r} for token {token}", "logit_bias")
