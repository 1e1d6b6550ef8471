"""One forward pass per architecture family, and the registry from config.json's `architectures` to it
(as vLLM's model executor keeps one)."""

from engine.model_config import ModelConfig
from engine.models.gemma3 import Gemma3ForCausalLM
from engine.models.gemma4 import Gemma4ForCausalLM
from engine.models.llama import AttentionMetadata, LlamaForCausalLM
from engine.models.qwen3_5 import Qwen3_5ForCausalLM

ARCHITECTURES: dict[str, type[LlamaForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Ministral3ForCausalLM": LlamaForCausalLM,
    "Mistral3ForConditionalGeneration": LlamaForCausalLM,  # its text model; the vision tower is dropped
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "GraniteForCausalLM": LlamaForCausalLM,
    "Phi3ForCausalLM": LlamaForCausalLM,
    "SmolLM3ForCausalLM": LlamaForCausalLM,
    "Gemma3ForCausalLM": Gemma3ForCausalLM,
    "Qwen3_5ForCausalLM": Qwen3_5ForCausalLM,
    "Qwen3_5ForConditionalGeneration": Qwen3_5ForCausalLM,  # its text model; the vision tower is dropped
    "Gemma4ForCausalLM": Gemma4ForCausalLM,
    "Gemma4ForConditionalGeneration": Gemma4ForCausalLM,  # its text model; the image and audio towers are dropped
}


def model_class(config: ModelConfig) -> type[LlamaForCausalLM]:
    arch = config.architecture
    if arch not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {arch}; supported: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


__all__ = ["ARCHITECTURES", "AttentionMetadata", "Gemma3ForCausalLM", "Gemma4ForCausalLM", "LlamaForCausalLM",
           "Qwen3_5ForCausalLM", "model_class"]
