"""Gemma 4 text decoders (`gemma4_text`, Gemma4ForCausalLM; the text model of a multimodal `gemma4`
checkpoint, Gemma4ForConditionalGeneration). Gemma 3's layer (engine/models/gemma3.py: four norms, scaled
embeddings, GELU-tanh gate, sliding-window layers beside global ones, final logit soft-capping) with:
- norms that scale by w, not (1 + w); q, k and v RMS-normed per head (v without a weight); scores unscaled;
- global layers with a head size of their own (global_head_dim) and proportional RoPE (a quarter of the
  frequencies rotate, engine/models/rope.py); with attention_k_eq_v, their own KV head count and values that
  are their keys' projection (before k's norm);
- KV sharing: the last num_kv_shared_layers layers compute q only and attend over the cache of the last
  earlier layer of their type, so they keep no cache of their own (ModelConfig.kv_source_layer);
- per-layer embeddings (PLE): a second embedding table and a projection of the embeddings give every layer
  a small input, gated into the residual after its MLP;
- a per-layer scalar multiplying the residual at the end of each layer.
Mixture-of-experts layers (enable_moe_block) are refused by ModelConfig."""

import torch
import torch.nn.functional as F

import kernels
from engine.lora import LoRABatch, LoRATarget, stacked
from engine.model_config import ModelConfig
from engine.models.gemma3 import Gemma3ForCausalLM, embedding_scale
from engine.models.llama import AttentionMetadata, LlamaForCausalLM, text_model_weights
from engine.models.rope import rope_inv_freq
from kernels.quantized import QuantizedWeight
from kernels.rotary import build_cos_sin_cache

PLE_WEIGHTS = {"ple_embed": "model.embed_tokens_per_layer.weight",
               "ple_model_proj": "model.per_layer_model_projection.weight",
               "ple_proj_norm": "model.per_layer_projection_norm.weight"}
PLE_LAYER_WEIGHTS = {"ple_gate": "per_layer_input_gate.weight", "ple_proj": "per_layer_projection.weight",
                     "ple_norm": "post_per_layer_input_norm.weight"}


class Gemma4ForCausalLM(LlamaForCausalLM):
    norm_names = Gemma3ForCausalLM.norm_names

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int):
        n = config.num_hidden_layers
        # (KV heads, head size) per layer: global layers differ from sliding ones.
        self.layer_dims = [(config.layer_num_kv_heads(i), config.layer_head_dim(i)) for i in range(n)]
        super().__init__(config, dtype, device, max_position)
        self.scale = 1.0
        self.embed_scale = embedding_scale(config.hidden_size, dtype)
        sources = [config.kv_source_layer(i) for i in range(n)]
        self.cache_layers = sorted(set(sources))  # the layers that keep a KV cache
        self.cache_index = [self.cache_layers.index(s) for s in sources]
        self.ple_dim = config.hidden_size_per_layer_input
        self.ple_embed_scale = embedding_scale(self.ple_dim, dtype) if self.ple_dim else 1.0
        self.layer_scalars: list[float] = []
        self.keys_as_values: set[int] = set()  # layers whose values are their keys' projection

    def _init_rope(self, max_position: int) -> None:
        """One cos/sin cache per (RoPE setting, head size): sliding and global layers differ in both."""
        c = self.config
        caches: dict[tuple, torch.Tensor] = {}
        self.rope_caches = []
        self.long_rope_from, self.rope_perm = None, None
        for i in range(self.num_layers):
            rope, d = c.layer_rope_parameters(i), self.layer_dims[i][1]
            key = (repr(sorted(rope.items())), d)
            if key not in caches:
                inv_freq, scaling = rope_inv_freq(rope, d, c.max_position_embeddings)
                if inv_freq.numel() * 2 != d:
                    raise ValueError(f"Gemma 4: rope_type {rope['rope_type']!r} with a partial rotary factor is "
                                     "not supported (proportional RoPE is)")
                caches[key] = build_cos_sin_cache(inv_freq, max_position, scaling).to(self.device)
            self.rope_caches.append(caches[key])
        self.cos_sin_cache = self.rope_caches[0]

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, state: dict[str, torch.Tensor | QuantizedWeight]) -> None:
        state = text_model_weights(state)
        extras: dict[str, torch.Tensor | QuantizedWeight] = {}
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            if a + "k_proj.weight" in state and a + "v_proj.weight" not in state:  # attention_k_eq_v
                state[a + "v_proj.weight"] = state[a + "k_proj.weight"]
                self.keys_as_values.add(i)
            scalar = state.pop(p + "layer_scalar", None)
            if scalar is None:  # a GGUF file's name for it
                scalar = state.pop(p + "layer_scalar.weight")
            self.layer_scalars.append(float(scalar.float().reshape(-1)[0]))
            if self.ple_dim:
                extras.update({p + ours: state.pop(p + theirs) for ours, theirs in PLE_LAYER_WEIGHTS.items()})
        if self.ple_dim:
            extras.update({ours: state.pop(theirs) for ours, theirs in PLE_WEIGHTS.items()})
        super().load_weights(state)
        w = self.weights
        for name, value in extras.items():
            w[name] = self._placed(value)
            if isinstance(value, torch.Tensor) and value.dim() == 2 and name != "ple_embed":
                packed = kernels.pack_linear(w[name])
                if packed is not None:
                    self.packed[name] = packed
        for i, (_, d) in enumerate(self.layer_dims):
            w[f"model.layers.{i}.v_norm"] = torch.ones(d, dtype=self.dtype, device=self.device)

    def kv_cache_shapes(self) -> list[tuple[int, int]]:
        return [self.layer_dims[i] for i in self.cache_layers]

    def lora_targets(self, layer: int) -> dict[str, LoRATarget | str]:
        """Per layer: its head size and KV heads, no k_proj or v_proj in a KV-shared layer (HF builds none),
        k_proj's delta on both keys and values where values are the keys' projection (HF has no v_proj
        there), the MLP's own width, and the per-layer-embedding gate and projection."""
        p, hidden, hq = f"model.layers.{layer}.", self.hidden_size, self.num_heads
        hkv, d = self.layer_dims[layer]
        inter = self.weights[p + "down"].shape[1]
        targets: dict[str, LoRATarget | str] = stacked("qkv", hidden, [("self_attn.q_proj", hq * d)])
        if self.cache_layers[self.cache_index[layer]] == layer:
            keys = torch.arange(hq * d, (hq + hkv) * d)
            values = keys + hkv * d
            targets["self_attn.k_proj"] = LoRATarget("qkv", hidden, (keys, values) if layer in self.keys_as_values
                                                     else (keys,))
            if layer not in self.keys_as_values:
                targets["self_attn.v_proj"] = LoRATarget("qkv", hidden, (values,))
        targets |= {**stacked("o", hq * d, [("self_attn.o_proj", hidden)]),
                    **stacked("gate_up", hidden, [("mlp.gate_proj", inter), ("mlp.up_proj", inter)]),
                    **stacked("down", inter, [("mlp.down_proj", hidden)])}
        if self.ple_dim:
            targets |= {**stacked("ple_gate", hidden, [("per_layer_input_gate", self.ple_dim)]),
                        **stacked("ple_proj", self.ple_dim, [("per_layer_projection", hidden)])}
        return targets

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
        w = self.weights
        t, hq, eps = input_ids.shape[0], self.num_heads, self.eps
        x = kernels.embedding(input_ids, w["embed"]) * self.embed_scale
        per_layer = self._per_layer_inputs(input_ids, x) if self.ple_dim else None
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            hkv, d = self.layer_dims[i]
            own_cache = self.cache_layers[self.cache_index[i]] == i
            h = kernels.rms_norm(x, w[p + "in_norm"], eps)
            qkv = self._linear(h, p + "qkv", lora=lora)
            q = qkv[:, : hq * d] if not own_cache else qkv.split([hq * d, hkv * d, hkv * d], dim=-1)[0]
            q = kernels.rms_norm(q.reshape(t * hq, d), w[p + "q_norm"], eps).reshape(t, hq, d)
            k_cache, v_cache = kv_caches[self.cache_index[i]]
            if own_cache:
                _, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
                k = kernels.rms_norm(k.reshape(t * hkv, d), w[p + "k_norm"], eps).reshape(t, hkv, d)
                v = kernels.rms_norm(v.reshape(t * hkv, d), w[p + "v_norm"], eps).reshape(t, hkv, d)
            else:
                # A shared layer rotates q only (its keys are in the cache): a zero key head stands in for k,
                # since the rotary kernels take at least one (Triton's refuses none).
                k = q.new_zeros(t, 1, d)
            kernels.rotary_embedding(positions, q, k, self.rope_caches[i])
            if own_cache:
                kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            if meta.all_decode:
                o = kernels.paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                                   self.scale, sliding_window=self.windows[i])
            else:
                o = kernels.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.query_start_loc,
                                            meta.context_lens, self.scale, sliding_window=self.windows[i])
            o = self._linear(o.reshape(t, hq * d), p + "o", lora=lora)
            x = x + kernels.rms_norm(o, w[p + "attn_out_norm"], eps)
            h = kernels.rms_norm(x, w[p + "post_norm"], eps)
            h = self._linear(self.act_and_mul(self._linear(h, p + "gate_up", lora=lora)), p + "down", lora=lora)
            x = x + kernels.rms_norm(h, w[p + "mlp_out_norm"], eps)
            if per_layer is not None:
                h = F.gelu(self._linear(x, p + "ple_gate", lora=lora), approximate="tanh") * per_layer[:, i]
                x = x + kernels.rms_norm(self._linear(h, p + "ple_proj", lora=lora), w[p + "ple_norm"], eps)
            if self.layer_scalars[i] != 1.0:
                x = x * self.layer_scalars[i]
        return kernels.rms_norm(x, w["norm"], eps)

    def _per_layer_inputs(self, input_ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[T, layers, ple_dim]: each token's per-layer embedding plus the normed projection of its
        embedding, over sqrt(2), as Gemma4TextModel.project_per_layer_inputs combines them."""
        w, t, n, dim = self.weights, input_ids.shape[0], self.num_layers, self.ple_dim
        tokens = kernels.embedding(input_ids, w["ple_embed"]) * self.ple_embed_scale
        projected = self._linear(x, "ple_model_proj") * self.hidden_size**-0.5
        projected = kernels.rms_norm(projected.reshape(t * n, dim), w["ple_proj_norm"], self.eps)
        return (projected.reshape(t, n, dim) + tokens.reshape(t, n, dim)) * 2.0**-0.5
