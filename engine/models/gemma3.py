"""Gemma 3 text decoders (`gemma3_text`, Gemma3ForCausalLM): the Llama layer loop with four norms per layer,
one on each branch's output before the residual add as well as before each branch; RMSNorm scales by
(1 + w); embeddings are scaled by sqrt(hidden_size); the MLP gate is GELU (tanh); scores are scaled by
query_pre_attn_scalar ** -0.5. Sliding-window layers and global ones alternate, each kind with its own
RoPE base (ModelConfig.layer_types and layer_rope_parameters, read by the Llama loop)."""

import torch

from engine.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM


class Gemma3ForCausalLM(LlamaForCausalLM):
    norm_names = {
        "in_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
        "post_norm": "pre_feedforward_layernorm", "mlp_out_norm": "post_feedforward_layernorm",
    }
    norm_offset = 1.0

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int):
        super().__init__(config, dtype, device, max_position)
        self.scale = config.query_pre_attn_scalar**-0.5
        self.embed_scale = embedding_scale(config.hidden_size, dtype)


def embedding_scale(size: int, dtype: torch.dtype) -> float:
    """Gemma's embeddings are multiplied by sqrt(size), which HF rounds to the weights' dtype first (a bf16
    sqrt(2304) is 48.0)."""
    return float(torch.tensor(size**0.5, dtype=dtype))
