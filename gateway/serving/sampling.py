"""Turns the OpenAI request fields into the engine's SamplingParams (which validates them)."""

from collections.abc import Mapping
from typing import Any

from engine import GuidedSpec, SamplingParams
from gateway.protocol.common import SamplingExtras
from gateway.web.errors import APIError


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _logit_bias(raw: dict[str, float] | None) -> dict[int, float]:
    """OpenAI sends token ids as JSON object keys, so as strings."""
    out: dict[int, float] = {}
    for key, value in (raw or {}).items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise APIError(400, f"logit_bias keys must be token ids, got {key!r}", param="logit_bias") from None
        out[token] = value
    return out


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
    guided: GuidedSpec | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> SamplingParams:
    """`defaults`: the model card's values (AsyncEngine.sampling_defaults) for the fields the request
    leaves out; its max_tokens the engine applies itself, within the context the prompt leaves."""
    asked = {
        "top_k": req.top_k,
        "min_p": req.min_p,
        "repetition_penalty": req.repetition_penalty,
        "temperature": temperature,
        "top_p": top_p,
    }
    card = defaults or {}
    extras: dict[str, Any] = {k: card.get(k) if v is None else v for k, v in asked.items()}
    extras = {k: v for k, v in extras.items() if v is not None}
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
        logit_bias=_logit_bias(req.logit_bias),
        **extras,
    )
