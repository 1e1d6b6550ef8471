"""Turns the OpenAI request fields into the engine's SamplingParams (which validates them)."""

from typing import Any

from engine import SamplingParams
from gateway.errors import APIError
from gateway.protocol.common import SamplingExtras


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def sampling_params(
    req: SamplingExtras,
    *,
    n: int,
    max_tokens: int | None,
    logprobs: int | None,
    temperature: float | None,
    top_p: float | None,
    stop: str | list[str] | None = None,
    seed: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    guided: dict[str, Any] | None = None,
) -> SamplingParams:
    if req.logit_bias:
        raise APIError(400, "logit_bias is not supported by this server", param="logit_bias")
    extras: dict[str, Any] = {
        k: v
        for k, v in {
            "top_k": req.top_k,
            "min_p": req.min_p,
            "repetition_penalty": req.repetition_penalty,
            "temperature": temperature,
            "top_p": top_p,
        }.items()
        if v is not None
    }
    # SamplingParams raises InvalidRequestError for out-of-range values: the handler maps it to a 400.
    return SamplingParams(
        n=n,
        max_tokens=max_tokens,
        logprobs=logprobs,
        stop=_stops(stop),
        seed=seed,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        ignore_eos=req.ignore_eos,
        min_tokens=req.min_tokens,
        stop_token_ids=req.stop_token_ids or [],
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        guided=guided,
        **extras,
    )
