"""Qwen3.5 text decoders (`qwen3_5_text`, Qwen3_5ForCausalLM; the text model of a `qwen3_5` checkpoint,
Qwen3_5ForConditionalGeneration): a hybrid of full-attention layers and Gated DeltaNet linear-attention layers
(three of four by default), each followed by a SwiGLU MLP, with RMSNorms that scale by (1 + w).

- Full attention: Qwen3's per-head q/k RMSNorm and partial RoPE (a quarter of each head), plus an output gate:
  q_proj writes each head's query and gate side by side, and the attention output is multiplied by
  sigmoid(gate) before o_proj. Its keys and values live in the paged KV cache.
- Linear attention: in_proj_qkv, then a causal depthwise convolution (kernel linear_conv_kernel_dim) with SiLU,
  then the gated delta rule (kernels/gated_delta.py) over L2-normalised q and k, with a decay
  g = -exp(A_log) * softplus(a + dt_bias) and a rate beta = sigmoid(b); its output is RMS-normed per head,
  gated by SiLU(z) and projected by out_proj. Its state (the convolution's last inputs and the rule's matrix)
  lives in a slot per sequence (engine/recurrent_state.py), not in the KV cache; a prompt runs the chunked
  form, one decode token per sequence the recurrent one, batched across sequences.

From a GGUF file (llama.cpp's `qwen35`) the value heads come tiled by key head rather than grouped, and are
read so (ModelConfig.linear_value_heads_tiled); engine/gguf_weights.py gives back the HF names, A_log and the
unshifted norms."""

import torch
import torch.nn.functional as F

import kernels
from engine.lora import LoRABatch, LoRATarget, stacked
from engine.model_config import LINEAR_ATTENTION, ModelConfig
from engine.models.llama import AttentionMetadata, LlamaForCausalLM, text_model_weights
from engine.recurrent_state import RecurrentStates, StateShape
from kernels.gated_delta import chunked_gated_delta, l2_normalize, recurrent_gated_delta
from kernels.quantized import QuantizedWeight, cat_rows, dequantize


class Qwen3_5ForCausalLM(LlamaForCausalLM):
    norm_offset = 1.0  # (1 + w), but for the gated norm of the linear-attention layers

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int):
        super().__init__(config, dtype, device, max_position)
        c = config
        self.linear = [c.layer_type(i) == LINEAR_ATTENTION for i in range(self.num_layers)]
        full = [i for i in range(self.num_layers) if not self.linear[i]]
        self.cache_index = {layer: n for n, layer in enumerate(full)}  # only full-attention layers keep KV
        self.state_index = {layer: n for n, layer in enumerate(i for i in range(self.num_layers) if self.linear[i])}
        self.k_heads, self.v_heads = c.linear_num_key_heads, c.linear_num_value_heads
        self.k_dim, self.v_dim = c.linear_key_head_dim, c.linear_value_head_dim
        self.conv_kernel = c.linear_conv_kernel_dim
        self.conv_channels = 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
        # Which key head each value head reads: HF groups value heads by key head, llama.cpp's GGUF files tile
        # them (ModelConfig.linear_value_heads_tiled); every value-head tensor of a file is in its order.
        self.v_heads_tiled = c.linear_value_heads_tiled
        self.states: RecurrentStates | None = None  # given by the model runner (engine/model_runner.py)

    def kv_cache_shapes(self) -> list[tuple[int, int]]:
        return [(self.num_kv_heads, self.head_dim)] * len(self.cache_index)

    def recurrent_state_shapes(self) -> list[StateShape]:
        shape = StateShape((self.conv_channels, self.conv_kernel - 1), (self.v_heads, self.k_dim, self.v_dim))
        return [shape] * len(self.state_index)

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, state: dict[str, torch.Tensor | QuantizedWeight]) -> None:
        state = text_model_weights(state)

        def get(name: str) -> torch.Tensor | QuantizedWeight:
            return self._placed(state.pop(name))

        def norm(name: str) -> torch.Tensor:
            return get(name) + self.norm_offset

        w = self.weights
        w["embed"] = get("model.embed_tokens.weight")
        w["norm"] = norm("model.norm.weight")
        lm_head = state.pop("lm_head.weight", None)
        w["lm_head"] = self._placed(lm_head) if lm_head is not None and not self.tie_word_embeddings else w["embed"]
        hq, d = self.num_heads, self.head_dim
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            w[p + "in_norm"] = norm(p + "input_layernorm.weight")
            w[p + "post_norm"] = norm(p + "post_attention_layernorm.weight")
            w[p + "gate_up"] = cat_rows([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")])
            w[p + "down"] = get(p + "mlp.down_proj.weight")
            if self.linear[i]:
                la = p + "linear_attn."
                for ours, theirs in (("in_qkv", "in_proj_qkv"), ("in_z", "in_proj_z"), ("in_b", "in_proj_b"),
                                     ("in_a", "in_proj_a"), ("o", "out_proj")):
                    w[p + ours] = get(f"{la}{theirs}.weight")
                conv = get(la + "conv1d.weight")
                conv = dequantize(conv).to(self.dtype) if isinstance(conv, QuantizedWeight) else conv
                w[p + "conv"] = conv.reshape(self.conv_channels, self.conv_kernel)
                w[p + "a_log"] = state.pop(la + "A_log").float().to(self.device)
                w[p + "dt_bias"] = get(la + "dt_bias")
                w[p + "gated_norm"] = get(la + "norm.weight")  # scales by w
                continue
            a = p + "self_attn."
            # q_proj's rows are each head's query, then its gate: the queries lead the fused matrix, the gates end it
            queries, gates = _queries_and_gates(state.pop(a + "q_proj.weight"), hq, d)
            w[p + "qkv"] = cat_rows([self._placed(queries), get(a + "k_proj.weight"), get(a + "v_proj.weight"),
                                     self._placed(gates)])
            w[p + "o"] = get(a + "o_proj.weight")
            w[p + "q_norm"] = norm(a + "q_norm.weight")
            w[p + "k_norm"] = norm(a + "k_norm.weight")
            if self.rope_perm is not None:
                self._permute_rotary(p)
        leftovers = [k for k in state if "rotary_emb" not in k]
        if leftovers:
            raise ValueError(f"unexpected weights in checkpoint: {leftovers[:5]}")
        for name, value in list(w.items()):
            if name in ("embed", "norm") or name.endswith("conv") or not isinstance(value, torch.Tensor) \
                    or value.dim() != 2:
                continue
            packed = kernels.pack_linear(value)
            if packed is not None:
                self.packed[name] = packed
        self.decode_layers, self.decode_rows = None, 0

    def lora_targets(self, layer: int) -> dict[str, LoRATarget | str]:
        """Full-attention layers: q_proj's rows, each head's query then its gate, land where the fused qkv holds
        queries and gates (then partial RoPE's order). Linear-attention layers: their five projections as HF
        names them, but not the depthwise convolution, nor any where a GGUF file tiled the value heads."""
        p, hidden = f"model.layers.{layer}.", self.hidden_size
        inter = self.weights[p + "down"].shape[1]
        mlp = {**stacked("gate_up", hidden, [("mlp.gate_proj", inter), ("mlp.up_proj", inter)]),
               **stacked("down", inter, [("mlp.down_proj", hidden)])}
        if self.linear[layer]:
            kd, vd = self.k_heads * self.k_dim, self.v_heads * self.v_dim
            projections = {"in_proj_qkv": ("in_qkv", hidden, 2 * kd + vd), "in_proj_z": ("in_z", hidden, vd),
                           "in_proj_b": ("in_b", hidden, self.v_heads), "in_proj_a": ("in_a", hidden, self.v_heads),
                           "out_proj": ("o", vd, hidden)}
            tiled = ("this GGUF file holds the value heads tiled by key head (llama.cpp's order), not as the "
                     "adapter was trained")
            targets: dict[str, LoRATarget | str] = {
                f"linear_attn.{theirs}": tiled if self.v_heads_tiled else stacked(ours, n_in, [(theirs, n_out)])[theirs]
                for theirs, (ours, n_in, n_out) in projections.items()}
            targets["linear_attn.conv1d"] = "a depthwise convolution, not a projection"
            return targets | mlp
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        heads = torch.arange(hq).repeat_interleave(d) * d + torch.arange(d).repeat(hq)  # query row -> fused row
        gates = heads + (hq + 2 * hkv) * d
        q_rows = torch.stack([heads.reshape(hq, d), gates.reshape(hq, d)], dim=1).reshape(-1)  # HF's row order
        k_rows = torch.arange(hq * d, (hq + hkv) * d)
        v_rows = k_rows + hkv * d
        if self.rope_perm is not None:
            positions = torch.argsort(self._rotary_rows(2 * (hq + hkv) * d))
            q_rows, k_rows, v_rows = positions[q_rows], positions[k_rows], positions[v_rows]
        return {"self_attn.q_proj": LoRATarget("qkv", hidden, (q_rows,)),
                "self_attn.k_proj": LoRATarget("qkv", hidden, (k_rows,)),
                "self_attn.v_proj": LoRATarget("qkv", hidden, (v_rows,)),
                **stacked("o", hq * d, [("self_attn.o_proj", hidden)]), **mlp}

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
        w, eps = self.weights, self.eps
        x = kernels.embedding(input_ids, w["embed"])
        residual = None
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            if residual is None:
                residual = x
                h = kernels.rms_norm(x, w[p + "in_norm"], eps)
            else:
                h, residual = kernels.rms_norm(x, w[p + "in_norm"], eps, residual)
            if self.linear[i]:
                x = self._linear_attention(i, h, meta, lora)
            else:
                x = self._full_attention(i, h, positions, meta, kv_caches[self.cache_index[i]], lora)
            h, residual = kernels.rms_norm(x, w[p + "post_norm"], eps, residual)
            x = self._linear(self.act_and_mul(self._linear(h, p + "gate_up", lora=lora)), p + "down", lora=lora)
        h, _ = kernels.rms_norm(x, w["norm"], eps, residual)
        return h

    def _full_attention(self, i: int, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                        cache: tuple[torch.Tensor, torch.Tensor], lora: LoRABatch | None) -> torch.Tensor:
        w, p, t = self.weights, f"model.layers.{i}.", h.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        q, k, v, gate = self._linear(h, p + "qkv", lora=lora).split([hq * d, hkv * d, hkv * d, hq * d], dim=-1)
        q = kernels.rms_norm(q.reshape(t * hq, d), w[p + "q_norm"], self.eps).reshape(t, hq, d)
        k = kernels.rms_norm(k.reshape(t * hkv, d), w[p + "k_norm"], self.eps).reshape(t, hkv, d)
        v = v.reshape(t, hkv, d)
        kernels.rotary_embedding(positions, q, k, self.rope_caches[i])
        k_cache, v_cache = cache
        kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.all_decode:
            o = kernels.paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.context_lens, self.scale)
        else:
            o = kernels.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.query_start_loc,
                                        meta.context_lens, self.scale)
        return self._linear(o.reshape(t, hq * d) * torch.sigmoid(gate), p + "o", lora=lora)

    def _per_value_head(self, x: torch.Tensor) -> torch.Tensor:
        """[t, key heads, d] as [t, value heads, d]: each value head's key head, in the weights' order."""
        groups = self.v_heads // self.k_heads
        return x.repeat(1, groups, 1) if self.v_heads_tiled else x.repeat_interleave(groups, dim=1)

    def _linear_attention(self, i: int, h: torch.Tensor, meta: AttentionMetadata,
                          lora: LoRABatch | None) -> torch.Tensor:
        w, p, t = self.weights, f"model.layers.{i}.", h.shape[0]
        j, states = self.state_index[i], self.states
        conv_states, rec_states = states.conv[j], states.recurrent[j]
        mixed = self._linear(h, p + "in_qkv", lora=lora)
        starts = meta.query_start_loc.tolist()
        slots = meta.state_slots
        # States kept for prefix caching (engine/state_snapshots.py): per sequence, (tokens in, entry).
        saves = meta.state_saves or [[]] * len(slots)
        snaps = states.snapshots
        # The causal convolution, each sequence after the last inputs of its previous step.
        keep = self.conv_kernel - 1
        conv_w = w[p + "conv"].unsqueeze(1)
        mixed_out = torch.empty_like(mixed)
        for s, e, slot, kept in zip(starts[:-1], starts[1:], slots, saves, strict=True):
            inputs = torch.cat([conv_states[slot], mixed[s:e].T.to(conv_states.dtype)], dim=-1)
            conv_states[slot] = inputs[:, -keep:]
            for at, entry in kept:  # the last inputs before token `at` of the step
                snaps.conv[j][entry] = inputs[:, at : at + keep]
            out = F.conv1d(inputs.unsqueeze(0).to(conv_w.dtype), conv_w, groups=self.conv_channels)[0]
            mixed_out[s:e] = F.silu(out).T.to(mixed.dtype)
        kd, vd = self.k_heads * self.k_dim, self.v_heads * self.v_dim
        q, k, v = mixed_out.split([kd, kd, vd], dim=-1)
        q, k = (self._per_value_head(x.reshape(t, self.k_heads, self.k_dim)) for x in (q, k))
        q, k = l2_normalize(q.float()), l2_normalize(k.float())
        v = v.reshape(t, self.v_heads, self.v_dim)
        beta = torch.sigmoid(self._linear(h, p + "in_b", lora=lora))
        g = -w[p + "a_log"].exp() * F.softplus(self._linear(h, p + "in_a", lora=lora).float() + w[p + "dt_bias"])
        core = torch.empty(t, self.v_heads, self.v_dim, dtype=torch.float32, device=h.device)
        single = [n for n, (s, e) in enumerate(zip(starts[:-1], starts[1:], strict=True)) if e - s == 1]
        if single:  # one token per sequence: the recurrent form, all such sequences at once
            rows = torch.tensor([starts[n] for n in single], device=h.device)
            index = torch.tensor([slots[n] for n in single], device=h.device)
            out, rec_states[index] = recurrent_gated_delta(q[rows], k[rows], v[rows], g[rows], beta[rows],
                                                           rec_states[index])
            core[rows] = out
        for n, (s, e) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
            if e - s > 1:  # in pieces where a state is kept inside the step
                state, lo = rec_states[slots[n]], s
                for hi, entry in [(s + at, entry) for at, entry in saves[n]] + [(e, None)]:
                    if hi > lo:
                        core[lo:hi], state = chunked_gated_delta(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi],
                                                                 beta[lo:hi], state)
                        lo = hi
                    if entry is not None:
                        snaps.recurrent[j][entry] = state
                rec_states[slots[n]] = state
            else:
                for _, entry in saves[n]:  # a one-token step ending on a kept boundary
                    snaps.recurrent[j][entry] = rec_states[slots[n]]
        normed = kernels.rms_norm(core.to(h.dtype).reshape(t * self.v_heads, self.v_dim), w[p + "gated_norm"],
                                  self.eps)
        z = self._linear(h, p + "in_z", lora=lora).reshape(t * self.v_heads, self.v_dim)
        gated = (normed * F.silu(z.float())).to(h.dtype).reshape(t, vd)
        return self._linear(gated, p + "o", lora=lora)


def _queries_and_gates(q_proj: torch.Tensor | QuantizedWeight, heads: int, head_dim: int):
    """q_proj's rows, each head's query then its gate, as (queries, gates). A GGUF file's blocks are whole rows,
    so quantized ones split the same way, left in their blocks."""
    if isinstance(q_proj, QuantizedWeight):
        rows = q_proj.data.reshape(heads, 2, head_dim, -1)
        shape = (heads * head_dim, q_proj.shape[1])
        return tuple(QuantizedWeight(rows[:, n].reshape(shape[0], -1).contiguous(), q_proj.qtype, shape)
                     for n in (0, 1))
    rows = q_proj.reshape(heads, 2, head_dim, -1)
    return rows[:, 0].reshape(heads * head_dim, -1), rows[:, 1].reshape(heads * head_dim, -1)
