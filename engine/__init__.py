"""The embedded inference engine: continuous batching over a paged KV cache."""

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.errors import EngineDeadError, InvalidRequestError
from engine.guided_spec import GuidedSpec
from engine.llm import LLM
from engine.llm_engine import LLMEngine
from engine.lora import LoRARequest
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from engine.sampling_params import SamplingParams

__all__ = [
    "LLM",
    "AsyncEngine",
    "CompletionOutput",
    "EngineConfig",
    "EngineDeadError",
    "GuidedSpec",
    "InvalidRequestError",
    "LLMEngine",
    "LoRARequest",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
]
