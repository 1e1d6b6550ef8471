"""Our forward pass for Llama-family decoders: Llama, Mistral, Qwen2, SmolLM2, and the families that are
Llama plus a few switches read from the config and the checkpoint: Qwen3 (per-head q/k RMSNorm), Granite
(embedding, residual, attention and logit multipliers), Phi-3 / Phi-4-mini (fused qkv and gate_up in the
checkpoint, LongRoPE, partial rotary), SmolLM3 (layers without RoPE), Ministral 3 (Llama 4's attention
temperature past the original context); Gemma 3 (engine/models/gemma3.py) adds a norm on each branch's
output, Gemma 4 (engine/models/gemma4.py) its own layer loop.

Tokens of all scheduled sequences are packed into one flat batch [T, hidden]; attention is the only
place where sequences are told apart, through `AttentionMetadata` and the paged KV cache. Q, K and V
share one matmul, as do gate and up: fewer, larger GEMMs are what a CPU or GPU runs best."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import kernels
from engine.lora import LoRABatch, LoRATarget, stacked
from engine.model_config import ModelConfig
from engine.models.rope import rope_inv_freq
from kernels.cpu.fused_ops import decode_layer_weights, decode_layers_cpu, decode_max_rows
from kernels.linear import small_linear_takes
from kernels.quantized import QuantizedWeight, StackedWeight, as_one_type, cat_rows, dequantize
from kernels.rotary import build_cos_sin_cache

# A prefill slice's gate_up output at most (`_mlp`): under glibc's largest mmap threshold, 32 MB, with room.
MLP_SLICE_BYTES = 16 << 20
ACTIVATIONS = {"silu": kernels.silu_and_mul, "gelu_pytorch_tanh": kernels.gelu_tanh_and_mul}


# A multimodal checkpoint's text-model names -> a causal LM's: Gemma 4's layout, and the one transformers
# writes for Mistral 3 (as the published checkpoints have it).
MULTIMODAL_TEXT_PREFIXES = {"model.language_model.": "model.", "language_model.model.": "model.",
                            "language_model.lm_head.": "lm_head.", "lm_head.": "lm_head."}


def text_model_weights(state: dict[str, Any]) -> dict[str, Any]:
    """A multimodal checkpoint's text model (Gemma4ForConditionalGeneration, Mistral3ForConditionalGeneration)
    under a causal LM's names, the vision and audio towers and their projectors left out. Other checkpoints
    are returned as they are."""
    if not any(k.startswith(("model.language_model.", "language_model.")) for k in state):
        return state
    text = {}
    for name, value in state.items():
        prefix = next((p for p in MULTIMODAL_TEXT_PREFIXES if name.startswith(p)), None)
        if prefix is not None:
            text[MULTIMODAL_TEXT_PREFIXES[prefix] + name[len(prefix):]] = value
    return text


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] cache slot of every new token
    block_tables: torch.Tensor  # [B, max_blocks]; B = T when all_decode
    query_start_loc: torch.Tensor  # [B+1]
    context_lens: torch.Tensor  # [B] tokens in the cache after this step
    all_decode: bool  # one row per token, row i attending over block_tables[i] up to context_lens[i]
    state_slots: list[int] | None = None  # hybrid models: each sequence's slot in engine/recurrent_state.py
    # hybrid models with prefix caching: per sequence, (tokens into its part of the step, snapshot entry) pairs
    # whose state engine/state_snapshots.py keeps
    state_saves: list[list[tuple[int, int]]] | None = None


def rotary_dim(config: ModelConfig, rope: dict[str, Any]) -> int:
    """Head dimensions RoPE rotates. HF's default RoPE ignores partial_rotary_factor in every family but
    Phi-3 and Qwen3.5, whose own defaults honour it; the scaled types all do."""
    if rope.get("rope_type", "default") == "default" and config.model_type not in ("phi3", "qwen3_5_text"):
        return config.head_dim
    return int(config.head_dim * rope.get("partial_rotary_factor", 1.0))


def rope_parameters(config: ModelConfig, rope: dict[str, Any] | None = None,
                    long_context: bool = False) -> tuple[torch.Tensor, float]:
    """inv_freq [rotary_dim / 2] and attention scaling of `rope` (the config's, by default)."""
    rope = config.rope_parameters if rope is None else rope
    dim = rotary_dim(config, rope)
    whole = {k: v for k, v in rope.items() if k != "partial_rotary_factor"}  # dim has it already
    inv_freq, scaling = rope_inv_freq(whole, dim, config.max_position_embeddings, long_context)
    return inv_freq, float(scaling)


def rotary_permutation(head_dim: int, rot: int) -> torch.Tensor | None:
    """The order of head dimensions that turns a partial rotation into a whole-head one, or None.

    The rotary kernels pair dimension i with i + head_dim / 2; HF's partial RoPE pairs i with i + rot / 2
    below rot and leaves the rest alone. Reordering q's and k's dimensions alike (their dot product does
    not change) to [rot's first half, rest's first half, rot's second half, rest's second half] makes the
    pairs line up, and the rest rotates by angle 0 (cos 1, sin 0: exact)."""
    if rot == head_dim:
        return None
    if rot % 2 or (head_dim - rot) % 2:
        raise ValueError(f"partial rotary embeddings need even splits: {rot} of {head_dim} head dimensions")
    half, rest = rot // 2, (head_dim - rot) // 2
    idx = torch.arange(head_dim)
    return torch.cat([idx[:half], idx[rot : rot + rest], idx[half:rot], idx[rot + rest :]])


class LlamaForCausalLM:
    # The checkpoint's name of each per-layer norm we apply: before attention, before the MLP, and (where
    # the family has them) on the attention and MLP outputs before the residual add.
    norm_names = {"in_norm": "input_layernorm", "post_norm": "post_attention_layernorm"}
    norm_offset = 0.0  # added to every RMSNorm weight at load: Gemma's norms scale by (1 + w)

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int):
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
        if c.hidden_act not in ACTIVATIONS:
            raise ValueError(f"unsupported hidden activation {c.hidden_act!r}; supported: {sorted(ACTIVATIONS)}")
        self.act_and_mul = ACTIVATIONS[c.hidden_act]
        self.scale = self.head_dim**-0.5 if c.attention_multiplier is None else c.attention_multiplier
        self.embed_scale = c.embedding_multiplier
        self.tie_word_embeddings = c.tie_word_embeddings
        self.max_position = max_position
        # A window at least as long as the longest sequence hides nothing: those layers attend in full.
        self.windows = [w if w is not None and w < max_position else None
                        for w in (c.layer_sliding_window(i) for i in range(self.num_layers))]
        self._init_rope(max_position)
        self.attn_temperature = self._attention_temperature_setting()
        self.weights: dict[str, torch.Tensor] = {}
        self.packed: dict[str, torch.Tensor] = {}  # CPU bf16/fp16 matmul weights, packed once (kernels/linear.py)

    # -- rotary embeddings ----------------------------------------------------------------------
    def _init_rope(self, max_position: int) -> None:
        """One cos/sin cache per distinct RoPE setting, shared by the layers that use it (None for a layer
        without RoPE). A LongRoPE cache holds the short-factor rows, then the long-factor ones; the
        `rope_positions` of a sequence past the original length index the second half."""
        c = self.config
        caches: dict[str, torch.Tensor] = {}
        self.rope_caches: list[torch.Tensor | None] = []
        self.long_rope_from: int | None = None
        self.rope_perm: torch.Tensor | None = None
        for i in range(self.num_layers):
            rope = c.layer_rope_parameters(i)
            if rope is None:
                self.rope_caches.append(None)
                continue
            key = repr(sorted(rope.items()))
            if key not in caches:
                caches[key] = self._rope_cache(rope, max_position).to(self.device)
            self.rope_caches.append(caches[key])
        # The cache of the common case, for callers that take one (the one-call C++ decode op).
        self.cos_sin_cache = next((x for x in self.rope_caches if x is not None), None)

    def _rope_cache(self, rope: dict[str, Any], max_position: int) -> torch.Tensor:
        rot = rotary_dim(self.config, rope)
        perm = rotary_permutation(self.head_dim, rot)
        if perm is not None:
            if self.rope_perm is not None and not torch.equal(perm, self.rope_perm):
                raise ValueError("layers with different partial rotary dimensions are not supported")
            self.rope_perm = perm
        sets = [False]
        if rope["rope_type"] == "longrope":
            self.long_rope_from = rope["original_max_position_embeddings"]
            sets.append(True)
        parts = []
        for long_context in sets:
            inv_freq, scaling = rope_parameters(self.config, rope, long_context)
            parts.append(build_cos_sin_cache(inv_freq, max_position, scaling))
        cache = torch.cat(parts)
        if rot < self.head_dim:  # the dimensions left alone rotate by 0, unscaled
            cos, sin = cache.chunk(2, dim=-1)
            pad = torch.zeros(cache.shape[0], (self.head_dim - rot) // 2)
            cache = torch.cat([cos, pad + 1, sin, pad], dim=-1)
        return cache

    def _attention_temperature_setting(self) -> tuple[float, int] | None:
        """Ministral 3's (Llama 4's) attention temperature: (beta, original context), or None."""
        rope = self.config.rope_parameters
        if self.config.model_type != "ministral3" or rope.get("llama_4_scaling_beta") is None:
            return None
        if rope.get("original_max_position_embeddings") is None:
            raise ValueError("llama_4_scaling_beta needs original_max_position_embeddings in the rope parameters")
        return float(rope["llama_4_scaling_beta"]), int(rope["original_max_position_embeddings"])

    def _query_scale(self, positions: torch.Tensor) -> torch.Tensor:
        """[T, 1, 1]: each query multiplied by 1 + beta * log(1 + floor(position / original context)), as
        transformers' Ministral 3 computes it; 1 within the original context."""
        beta, original = self.attn_temperature
        scale = 1 + beta * torch.log(1 + torch.floor(positions / original))
        return scale.to(self.dtype)[:, None, None]

    def rope_positions(self, positions: list[int], long_rope: bool) -> list[int]:
        """The cos/sin rows of one sequence's tokens: their positions, in LongRoPE's long rows for a
        sequence longer than the original context (`Sequence.long_rope`; the scheduler recomputes a
        sequence's cache when it outgrows that context, as HF's Phi-3 does)."""
        return [p + self.max_position for p in positions] if long_rope and self.long_rope_from else positions

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, state: dict[str, torch.Tensor | QuantizedWeight]) -> None:
        """Takes an HF-named state dict and fuses q/k/v and gate/up per layer (Phi-3 checkpoints have them
        fused already). Matrices may come quantized (GGUF blocks, engine/gguf_weights.py): they stay so
        on the CPU."""
        state = text_model_weights(state)

        def get(name: str) -> torch.Tensor | QuantizedWeight:
            return self._placed(state.pop(name))

        def norm(name: str) -> torch.Tensor:
            w = get(name)
            return w + self.norm_offset if self.norm_offset else w

        w = self.weights
        w["embed"] = get("model.embed_tokens.weight")
        w["norm"] = norm("model.norm.weight")
        if "lm_head.weight" in state and not self.tie_word_embeddings:
            w["lm_head"] = get("lm_head.weight")
        else:
            state.pop("lm_head.weight", None)
            w["lm_head"] = w["embed"]
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            fused_qkv = a + "qkv_proj.weight" in state
            # Gemma 4's KV-shared layers have q only: they read another layer's cache.
            w[p + "qkv"] = get(a + "qkv_proj.weight") if fused_qkv else cat_rows(
                [get(a + f"{x}_proj.weight") for x in "qkv" if a + f"{x}_proj.weight" in state])
            if a + "q_proj.bias" in state:
                w[p + "qkv_bias"] = torch.cat([get(a + f"{x}_proj.bias") for x in "qkv"])
            w[p + "o"] = get(a + "o_proj.weight")
            w[p + "gate_up"] = get(m + "gate_up_proj.weight") if m + "gate_up_proj.weight" in state else cat_rows(
                [get(m + "gate_proj.weight"), get(m + "up_proj.weight")])
            w[p + "down"] = get(m + "down_proj.weight")
            for ours, theirs in self.norm_names.items():
                w[p + ours] = norm(p + theirs + ".weight")
            for x in "qk":  # Qwen3, Gemma 3: RMSNorm of each q and k head
                if a + f"{x}_norm.weight" in state:
                    w[p + f"{x}_norm"] = norm(a + f"{x}_norm.weight")
            if self.rope_perm is not None:
                self._permute_rotary(p)
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

    def place_quantized(self, place: Callable[[list], list]) -> None:
        """Hands every quantized matrix to `place` (engine/host_memory.on_huge_pages), which returns
        them moved, and points the one-call decode op at the moved ones."""
        w = self.weights
        names = [n for n, v in w.items() if isinstance(v, QuantizedWeight | StackedWeight)]
        w.update(zip(names, place([w[n] for n in names]), strict=True))
        if self.decode_layers is not None:
            self.decode_layers = self._decode_layer_lists()

    def _placed(self, value: torch.Tensor | QuantizedWeight) -> torch.Tensor | QuantizedWeight:
        """A checkpoint weight on the model's device and in its dtype; GGUF blocks stay so on the CPU."""
        if isinstance(value, QuantizedWeight):
            return value if self.device.type == "cpu" else dequantize(value, self.dtype).to(self.device)
        return value.to(self.device, self.dtype)

    def _permute_rotary(self, p: str) -> None:
        """Reorders each q and k head's dimensions by `rope_perm` (see `rotary_permutation`)."""
        w = self.weights
        qkv = w[p + "qkv"]
        rows = self._rotary_rows(qkv.shape[0])
        if isinstance(qkv, QuantizedWeight | StackedWeight):
            qkv = as_one_type(qkv)  # rows of q and k move: one matrix of one type
            w[p + "qkv"] = QuantizedWeight(qkv.data.index_select(0, rows).contiguous(), qkv.qtype, qkv.shape)
        else:
            w[p + "qkv"] = qkv.index_select(0, rows.to(qkv.device)).contiguous()
        if p + "qkv_bias" in w:
            w[p + "qkv_bias"] = w[p + "qkv_bias"][rows.to(self.device)]
        for name in ("q_norm", "k_norm"):
            if p + name in w:
                w[p + name] = w[p + name][self.rope_perm.to(self.device)]

    def _rotary_rows(self, total: int) -> torch.Tensor:
        """The fused qkv's rows in `rope_perm`'s order: row j of the reordered matrix is row rows[j] of the
        checkpoint's. q's and k's heads lead the fused rows; the rest stay."""
        d, heads = self.head_dim, self.num_heads + self.num_kv_heads
        return torch.cat([h * d + self.rope_perm for h in range(heads)] + [torch.arange(heads * d, total)])

    def lora_targets(self, layer: int) -> dict[str, LoRATarget | str]:
        """HF module (its name inside the layer) -> where its LoRA delta lands (engine/lora.py); a module that
        cannot take one maps to the reason."""
        p, hidden = f"model.layers.{layer}.", self.hidden_size
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        inter = self.weights[p + "down"].shape[1]
        qkv = [("self_attn.q_proj", hq * d), ("self_attn.k_proj", hkv * d), ("self_attn.v_proj", hkv * d)]
        positions = None if self.rope_perm is None else torch.argsort(self._rotary_rows(sum(n for _, n in qkv)))
        return {**stacked("qkv", hidden, qkv, positions), **stacked("o", hq * d, [("self_attn.o_proj", hidden)]),
                **stacked("gate_up", hidden, [("mlp.gate_proj", inter), ("mlp.up_proj", inter)]),
                **stacked("down", inter, [("mlp.down_proj", hidden)])}

    def _decode_layer_lists(self) -> dict[str, list[torch.Tensor]] | None:
        """Per-layer weight lists for the one-call C++ decode path (`decode_layers_cpu`), or None where
        it does not apply. It takes Llama-style layers with Qwen3's per-head q/k norms, SmolLM3's layers
        without RoPE, sliding windows (Mistral, Phi-3) and Granite's residual multiplier; not Gemma's
        branch norms and activation, per-layer RoPE settings or Llama 4's attention temperature. Its
        matrices are fp32 CPU weights that the few-row C++ matmul can read, or GGUF blocks."""
        w = self.weights
        takes = (
            "model.layers.0.attn_out_norm" not in w and "model.layers.0.mlp_out_norm" not in w
            and all(x is None or x is self.cos_sin_cache for x in self.rope_caches) and self.cos_sin_cache is not None
            and self.attn_temperature is None and self.act_and_mul is kernels.silu_and_mul
        )
        if not takes:
            return None
        names = ("in_norm", "qkv", "o", "post_norm", "gate_up", "down")
        lists = {n: [w[f"model.layers.{i}.{n}"] for i in range(self.num_layers)] for n in names}
        lists["qkv_bias"] = [w[f"model.layers.{i}.qkv_bias"] for i in range(self.num_layers)
                             if f"model.layers.{i}.qkv_bias" in w]
        if "model.layers.0.q_norm" in w:
            lists["q_norm"] = [w[f"model.layers.{i}.q_norm"] for i in range(self.num_layers)]
            lists["k_norm"] = [w[f"model.layers.{i}.k_norm"] for i in range(self.num_layers)]
        matrices = lists["qkv"] + lists["o"] + lists["gate_up"] + lists["down"]
        if not all(small_linear_takes(m) or isinstance(m, QuantizedWeight | StackedWeight) for m in matrices):
            return None
        out = decode_layer_weights(lists)
        out["rotary"] = [int(x is not None) for x in self.rope_caches]
        out["windows"] = [int(x or 0) for x in self.windows]
        out["residual_scale"] = float(self.config.residual_multiplier)
        return out

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
        """`positions`: each token's cos/sin row (`rope_positions`). `lora`: the step's adapter per row
        (engine/lora.py), applied inside the one-call C++ decode op as in the Python layer loop."""
        w = self.weights
        t = input_ids.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = kernels.embedding(input_ids, w["embed"])
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if meta.all_decode and self.decode_layers is not None and t <= self.decode_rows:
            return decode_layers_cpu(
                x, positions, self.cos_sin_cache, self.decode_layers, w["norm"],
                [kc for kc, _ in kv_caches], [vc for _, vc in kv_caches], meta.slot_mapping, meta.block_tables,
                meta.context_lens, eps=self.eps, scale=self.scale, num_heads=hq, num_kv_heads=hkv, head_dim=d,
                lora=lora.decode_args() if lora is not None else None,
            )
        residual = None
        branch_scale = self.config.residual_multiplier
        q_scale = self._query_scale(positions) if self.attn_temperature is not None else None
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            if residual is None:
                residual = x
                h = kernels.rms_norm(x, w[p + "in_norm"], self.eps)
            else:
                h, residual = kernels.rms_norm(x, w[p + "in_norm"], self.eps, residual)
            qkv = self._linear(h, p + "qkv", w.get(p + "qkv_bias"), lora)
            q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
            if p + "q_norm" in w:
                q = kernels.rms_norm(q.reshape(t * hq, d), w[p + "q_norm"], self.eps)
                k = kernels.rms_norm(k.reshape(t * hkv, d), w[p + "k_norm"], self.eps)
            q = q.reshape(t, hq, d)
            k = k.reshape(t, hkv, d)
            v = v.reshape(t, hkv, d)
            if self.rope_caches[i] is not None:
                kernels.rotary_embedding(positions, q, k, self.rope_caches[i])
            if q_scale is not None:
                q = q * q_scale
            k_cache, v_cache = kv_caches[i]
            kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
            if meta.all_decode:
                o = kernels.paged_decode_attention(
                    q, k_cache, v_cache, meta.block_tables, meta.context_lens, self.scale,
                    sliding_window=self.windows[i],
                )
            else:
                o = kernels.paged_attention(
                    q, k_cache, v_cache, meta.block_tables, meta.query_start_loc, meta.context_lens, self.scale,
                    sliding_window=self.windows[i],
                )
            x = self._branch_out(self._linear(o.reshape(t, hq * d), p + "o", lora=lora), p + "attn_out_norm",
                                 branch_scale)
            h, residual = kernels.rms_norm(x, w[p + "post_norm"], self.eps, residual)
            x = self._branch_out(self._mlp(h, p, lora), p + "mlp_out_norm", branch_scale)
        h, _ = kernels.rms_norm(x, w["norm"], self.eps, residual)
        return h

    def _mlp(self, h: torch.Tensor, p: str, lora: LoRABatch | None) -> torch.Tensor:
        """down(act(gate_up(h))), a long prefill's rows in slices on the CPU: whole, a 2,048-token chunk's
        gate_up output is 134 MB for a 1B model, and glibc maps every allocation over 32 MB afresh and
        unmaps it when freed, so each layer faulted its pages in again (1-2 GB a 1,000-token prompt, 10%
        of its prefill on a 2-core EPYC VM). Slices of MLP_SLICE_BYTES come from, and go back to, the heap.
        LoRA rows stay whole (their adapters are per row)."""
        gate_up = self.weights[p + "gate_up"].shape[0]
        rows = max(1, MLP_SLICE_BYTES // (gate_up * h.element_size()))
        if h.shape[0] <= rows or lora is not None or h.device.type != "cpu":
            return self._linear(self.act_and_mul(self._linear(h, p + "gate_up", lora=lora)), p + "down", lora=lora)
        return torch.cat([self._linear(self.act_and_mul(self._linear(part, p + "gate_up")), p + "down")
                          for part in h.split(rows)])

    def _branch_out(self, x: torch.Tensor, norm: str, scale: float) -> torch.Tensor:
        """An attention or MLP output before it joins the residual: normed (Gemma) or scaled (Granite)."""
        if norm in self.weights:
            x = kernels.rms_norm(x, self.weights[norm], self.eps)
        return x * scale if scale != 1.0 else x

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self._linear(hidden, "lm_head")
        if self.config.logits_scaling != 1.0:
            logits = logits / self.config.logits_scaling
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def kv_cache_shapes(self) -> list[tuple[int, int]]:
        """(KV heads, head size) of each KV cache the model keeps: one per layer, alike."""
        return [(self.num_kv_heads, self.head_dim)] * self.num_layers

    def recurrent_state_shapes(self) -> list:
        """The per-sequence recurrent state of each linear-attention layer (engine/recurrent_state.py): none."""
        return []

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * block_size * itemsize * sum(h * d for h, d in self.kv_cache_shapes())
