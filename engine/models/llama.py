"""Our forward pass for Llama-family decoders (Llama, Mistral, Qwen2, SmolLM2).

Tokens of all scheduled sequences are packed into one flat batch [T, hidden]; attention is the only
place where sequences are told apart, through `AttentionMetadata` and the paged KV cache. Q, K and V
share one matmul, as do gate and up: fewer, larger GEMMs are what a CPU or GPU runs best."""

from dataclasses import dataclass

import torch

import kernels
from engine.lora import LoRABatch
from engine.model_config import ModelConfig
from engine.models.rope import rope_inv_freq
from kernels.cpu.fused_ops import decode_layer_weights, decode_layers_cpu, decode_max_rows
from kernels.linear import small_linear_takes
from kernels.quantized import QuantizedWeight, cat_rows, dequantize
from kernels.rotary import build_cos_sin_cache

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] cache slot of every new token
    block_tables: torch.Tensor  # [B, max_blocks]; B = T when all_decode
    query_start_loc: torch.Tensor  # [B+1]
    context_lens: torch.Tensor  # [B] tokens in the cache after this step
    all_decode: bool  # one row per token, row i attending over block_tables[i] up to context_lens[i]


def rope_parameters(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """inv_freq and attention scaling from the config's rope settings (engine/models/rope.py)."""
    inv_freq, scaling = rope_inv_freq(config.rope_parameters, config.head_dim, config.max_position_embeddings)
    # The rotary kernels rotate whole heads (a cos/sin cache of head_dim), as HF Llama does.
    if inv_freq.numel() * 2 != config.head_dim:
        raise ValueError("partial rotary embeddings (partial_rotary_factor < 1) are not supported")
    return inv_freq, float(scaling)


class LlamaForCausalLM:
    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int):
        arch = config.architecture
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"unsupported architecture {arch}; supported: {sorted(SUPPORTED_ARCHITECTURES)}")
        c = config
        self.config = c
        self.dtype, self.device = dtype, device
        self.num_layers = c.num_hidden_layers
        self.hidden_size = c.hidden_size
        self.num_heads = c.num_attention_heads
        self.num_kv_heads = c.num_key_value_heads
        self.head_dim = c.head_dim
        self.eps = c.rms_norm_eps
        self.vocab_size = c.vocab_size
        self.scale = self.head_dim**-0.5
        self.tie_word_embeddings = c.tie_word_embeddings
        inv_freq, attn_scaling = rope_parameters(c)
        self.cos_sin_cache = build_cos_sin_cache(inv_freq, max_position, attn_scaling).to(device)
        self.weights: dict[str, torch.Tensor] = {}
        self.packed: dict[str, torch.Tensor] = {}  # CPU bf16/fp16 matmul weights, packed once (kernels/linear.py)

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, state: dict[str, torch.Tensor | QuantizedWeight]) -> None:
        """Takes an HF-named state dict and fuses q/k/v and gate/up per layer. Matrices may come
        quantized (GGUF blocks, engine/gguf_weights.py): they stay so on the CPU."""
        def get(name: str) -> torch.Tensor | QuantizedWeight:
            value = state.pop(name)
            if isinstance(value, QuantizedWeight):
                return value if self.device.type == "cpu" else dequantize(value, self.dtype).to(self.device)
            return value.to(self.device, self.dtype)

        w = self.weights
        w["embed"] = get("model.embed_tokens.weight")
        w["norm"] = get("model.norm.weight")
        if "lm_head.weight" in state and not self.tie_word_embeddings:
            w["lm_head"] = get("lm_head.weight")
        else:
            state.pop("lm_head.weight", None)
            w["lm_head"] = w["embed"]
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            w[p + "qkv"] = cat_rows([get(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
            if p + "self_attn.q_proj.bias" in state:
                w[p + "qkv_bias"] = torch.cat([get(p + f"self_attn.{x}_proj.bias") for x in "qkv"])
            w[p + "o"] = get(p + "self_attn.o_proj.weight")
            w[p + "gate_up"] = cat_rows([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")])
            w[p + "down"] = get(p + "mlp.down_proj.weight")
            w[p + "in_norm"] = get(p + "input_layernorm.weight")
            w[p + "post_norm"] = get(p + "post_attention_layernorm.weight")
        leftovers = [k for k in state if "rotary_emb" not in k]
        if leftovers:
            raise ValueError(f"unexpected weights in checkpoint: {leftovers[:5]}")
        per_layer = ("qkv", "o", "gate_up", "down")
        matmuls = ["lm_head"] + [f"model.layers.{i}.{n}" for i in range(self.num_layers) for n in per_layer]
        for name in matmuls:
            packed = kernels.pack_linear(w[name])
            if packed is None:
                break
            self.packed[name] = packed
        self.decode_layers = self._decode_layer_lists()
        self.decode_rows = decode_max_rows(self.decode_layers) if self.decode_layers is not None else 0

    def _decode_layer_lists(self) -> dict[str, list[torch.Tensor]] | None:
        """Per-layer weight lists for the one-call C++ decode path (`decode_layers_cpu`), or None where
        it does not apply: it takes fp32 CPU weights that the few-row C++ matmul can read, or GGUF blocks
        (the quantized C++ matmul)."""
        w = self.weights
        names = ("in_norm", "qkv", "o", "post_norm", "gate_up", "down")
        lists = {n: [w[f"model.layers.{i}.{n}"] for i in range(self.num_layers)] for n in names}
        lists["qkv_bias"] = [w[f"model.layers.{i}.qkv_bias"] for i in range(self.num_layers)
                             if f"model.layers.{i}.qkv_bias" in w]
        matrices = lists["qkv"] + lists["o"] + lists["gate_up"] + lists["down"]
        if not all(small_linear_takes(m) or isinstance(m, QuantizedWeight) for m in matrices):
            return None
        return decode_layer_weights(lists)

    def _linear(self, x: torch.Tensor, name: str, bias: torch.Tensor | None = None,
                lora: LoRABatch | None = None) -> torch.Tensor:
        y = kernels.linear(x, self.weights[name], bias, self.packed.get(name))
        return y if lora is None else lora.apply(y, x, name)

    # -- forward ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        lora: LoRABatch | None = None,
    ) -> torch.Tensor:
        """`lora`: the step's adapter per row (engine/lora.py), applied inside the one-call C++ decode op
        as in the Python layer loop."""
        w = self.weights
        t = input_ids.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = kernels.embedding(input_ids, w["embed"])
        if meta.all_decode and self.decode_layers is not None and t <= self.decode_rows:
            return decode_layers_cpu(
                x, positions, self.cos_sin_cache, self.decode_layers, w["norm"],
                [kc for kc, _ in kv_caches], [vc for _, vc in kv_caches], meta.slot_mapping, meta.block_tables,
                meta.context_lens, eps=self.eps, scale=self.scale, num_heads=hq, num_kv_heads=hkv, head_dim=d,
                lora=lora.decode_args() if lora is not None else None,
            )
        residual = None
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            if residual is None:
                residual = x
                h = kernels.rms_norm(x, w[p + "in_norm"], self.eps)
            else:
                h, residual = kernels.rms_norm(x, w[p + "in_norm"], self.eps, residual)
            qkv = self._linear(h, p + "qkv", w.get(p + "qkv_bias"), lora)
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            q = q.reshape(t, hq, d)
            k = k.reshape(t, hkv, d)
            v = v.reshape(t, hkv, d)
            kernels.rotary_embedding(positions, q, k, self.cos_sin_cache)
            k_cache, v_cache = kv_caches[i]
            kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            if meta.all_decode:
                o = kernels.paged_decode_attention(
                    q, k_cache, v_cache, meta.block_tables, meta.context_lens, self.scale
                )
            else:
                o = kernels.paged_attention(
                    q, k_cache, v_cache, meta.block_tables, meta.query_start_loc, meta.context_lens, self.scale
                )
            x = self._linear(o.reshape(t, hq * d), p + "o", lora=lora)
            h, residual = kernels.rms_norm(x, w[p + "post_norm"], self.eps, residual)
            x = self._linear(kernels.silu_and_mul(self._linear(h, p + "gate_up", lora=lora)), p + "down", lora=lora)
        h, _ = kernels.rms_norm(x, w["norm"], self.eps, residual)
        return h

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._linear(hidden, "lm_head").float()

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * block_size * self.num_kv_heads * self.head_dim * itemsize
