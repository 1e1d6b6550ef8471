"""The embedded inference engine: continuous batching over a paged KV cache.

The names below are re-exported lazily (as :mod:`integrations.text2sql` does), so a tool that needs one
module, ``engine.loader`` to convert a GGUF for training, does not pull in the whole engine and what it
depends on (grammar backends, CPU kernels)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AsyncEngine": "async_engine", "EngineConfig": "config", "EngineDeadError": "errors",
    "InvalidRequestError": "errors", "NotFoundError": "errors", "GuidedSpec": "guided_spec", "LLM": "llm",
    "LLMEngine": "llm_engine", "LoRARequest": "lora", "CompletionOutput": "outputs", "RequestMetrics": "outputs",
    "RequestOutput": "outputs", "SamplingParams": "sampling_params",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
