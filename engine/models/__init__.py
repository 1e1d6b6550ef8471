from engine.models.llama import AttentionMetadata, LlamaForCausalLM

__all__ = ["AttentionMetadata", "LlamaForCausalLM"]
