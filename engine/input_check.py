"""The one check of a request's input against the engine's limits, before it is queued.

Every refusal is an InvalidRequestError naming the field at fault, which the gateway answers as a
400. The limits are fixed once the engine is built and guided specs compile under a lock, so the
check may run on any thread (the gateway runs it before it submits the request)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRequestError
from engine.guided_spec import GuidedSpec
from engine.sampling_params import SamplingParams


def check_priority(priority: object) -> None:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidRequestError(f"priority must be an integer, got {priority!r}", "priority")


@dataclass(frozen=True)
class RequestLimits:
    vocab_size: int
    max_model_len: int
    block_size: int
    num_blocks: int  # the KV cache, in blocks
    card_max_tokens: int | None = None  # the model card's max_new_tokens (engine/generation_config.py)

    def max_tokens(self, params: SamplingParams, num_prompt: int) -> int | None:
        """What a request may generate: its own max_tokens, else the card's within the context left (as vLLM),
        else None (up to the context)."""
        if params.max_tokens is not None or not self.card_max_tokens:
            return params.max_tokens
        return min(self.card_max_tokens, self.max_model_len - num_prompt)

    def check(self, token_ids: list[int], params: SamplingParams) -> None:
        if not token_ids:
            raise InvalidRequestError("the prompt is empty", "prompt")
        vocab = self.vocab_size
        if any(not isinstance(t, int) or t < 0 or t >= vocab for t in token_ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", "prompt")
        bad = [t for t in params.stop_token_ids if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"unknown stop_token_ids {bad}: vocabulary size is {vocab}", "stop_token_ids")
        bad = [t for t in params.logit_bias if t >= vocab]
        if bad:
            raise InvalidRequestError(f"logit_bias has unknown token ids {bad[:5]}: vocabulary size is {vocab}",
                                      "logit_bias")
        n, limit = len(token_ids), self.max_model_len
        if n >= limit:
            raise InvalidRequestError(
                f"the prompt has {n} tokens, but this model's maximum context length is {limit}", "prompt")
        if params.max_tokens is not None and n + params.max_tokens > limit:
            raise InvalidRequestError(
                f"this model's maximum context length is {limit} tokens; the request asks for "
                f"{n + params.max_tokens} ({n} in the prompt and {params.max_tokens} to generate)", "max_tokens")
        total = n + (self.max_tokens(params, n) or limit - n)
        if (total + self.block_size - 1) // self.block_size > self.num_blocks:
            raise InvalidRequestError(
                f"the request needs {total} tokens of KV cache but the cache holds "
                f"{self.num_blocks * self.block_size}", "max_tokens")


class InputCheck:
    """LLMEngine.check_request: the priority, the prompt (tokenized here when it is text), the limits,
    and the guided-decoding spec, compiled so that a bad schema fails before queueing."""

    def __init__(self, tokenizer, limits: RequestLimits, compile_guided: Callable[[GuidedSpec], Any]):
        self.tokenizer = tokenizer
        self.limits = limits
        self.compile_guided = compile_guided

    def __call__(self, prompt: str | list[int], params: SamplingParams, priority: int = 0) -> list[int]:
        check_priority(priority)
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
            token_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            token_ids = list(prompt)
        self.limits.check(token_ids, params)
        if params.guided:
            self.compile_guided(params.guided)
        return token_ids
