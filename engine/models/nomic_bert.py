"""The NomicBERT encoder (`model_type: nomic_bert`: nomic-embed-text-v1 and v1.5, nomic-bert-2048 and the
embedding models fine-tuned from them). Its modeling code is remote code (Nomic's `modeling_hf_nomic_bert.py`,
from their contrastors repository), not part of transformers, so the architecture is read from its config
keys (GPT-2's names: `n_embd`, `n_layer`, `n_head`, `layer_norm_epsilon`) and written here:

- BERT's post-norm layers (attention, add, LayerNorm; MLP, add, LayerNorm) after word and token-type
  embeddings and an embedding LayerNorm (`emb_ln`);
- rotary positions on q and k (`rotary_emb_fraction` of each head, base `rotary_emb_base`, GPT-NeoX's
  halves or GPT-J's interleaved pairs) instead of a position table; a fraction of 0 means BERT's table;
- one fused `Wqkv` projection, `out_proj`, and a gated MLP `fc2(fc11(x) * act(fc12(x)))` (SwiGLU: silu;
  GeGLU: gelu; GLU: sigmoid), with no biases in the published checkpoints (a bias is used when present);
- `rotary_scaling_factor` (dynamic NTK, for inputs past `max_trained_positions`): the rotary base grows
  with the input's length. The remote code scales by the padded batch's width and keeps the table of the
  longest batch it has seen, so its vectors for a long input depend on what was embedded before; here each
  input's base follows its own length, which is what the remote code gives for that input alone.

Same interface as engine/models/bert.py's BertEncoder: a padded batch in, the last layer's states out.
Embedding models only: the checkpoints people serve have no classification head."""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.models.bert import EncoderConfig, NamedWeights, _read_state

# The gated MLP's activation on fc12 (the remote code's choice for each `activation_function`).
_GATES = {"swiglu": F.silu, "geglu": F.gelu, "glu": torch.sigmoid}


@dataclass(frozen=True)
class NomicRotary:
    dim: int  # rotated features per head (even), the first `dim` of each
    base: float
    interleaved: bool
    scaling_factor: float | None  # dynamic NTK past `max_trained_positions`
    max_trained_positions: int

    def tables(self, lengths: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin `[B, 1, T, dim / 2]` for a batch whose rows hold `lengths` real tokens."""
        exponents = torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim
        base = torch.full((lengths.shape[0],), self.base, dtype=torch.float32)
        if self.scaling_factor:
            s, n = self.scaling_factor, lengths.float()
            grown = self.base * ((s * n / self.max_trained_positions) - (s - 1)) ** (self.dim / (self.dim - 2))
            base = torch.where(lengths > self.max_trained_positions, grown, base)
        inv_freq = 1.0 / base[:, None] ** exponents[None, :]  # [B, dim / 2]
        angles = torch.arange(width, dtype=torch.float32)[None, :, None] * inv_freq[:, None, :]
        return angles.cos()[:, None], angles.sin()[:, None]

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x `[B, heads, T, head_dim]`: its first `dim` features rotated, the rest as they are."""
        rot, rest = x[..., : self.dim], x[..., self.dim:]
        if self.interleaved:  # pairs (2i, 2i + 1)
            a, b = rot[..., ::2], rot[..., 1::2]
            rot = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        else:  # halves (i, i + dim / 2)
            a, b = rot.chunk(2, dim=-1)
            rot = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        return torch.cat((rot, rest), dim=-1)


class NomicBertEncoder(NamedWeights):
    def __init__(self, config: EncoderConfig, raw: dict, state: dict[str, torch.Tensor]):
        self.config = config
        for key, refused in (("prenorm", True), ("parallel_block", True), ("causal", True)):
            if raw.get(key, False) == refused:
                raise ValueError(f"NomicBERT with {key}={refused} is not supported")
        if raw.get("rotary_emb_scale_base") is not None:
            raise ValueError("NomicBERT with rotary_emb_scale_base (xPos) is not supported")
        if raw.get("num_heads_kv") not in (None, config.num_heads):
            raise ValueError("NomicBERT with grouped key/value heads is not supported")
        act = raw.get("activation_function", "gelu_new")
        if act not in _GATES:
            raise ValueError(f"NomicBERT with activation_function {act!r} is not supported ({sorted(_GATES)} are)")
        self.gate = _GATES[act]
        self.w = {k: v.float().contiguous() for k, v in state.items()}
        self.eps = config.layer_norm_eps
        head_dim = config.hidden_size // config.num_heads
        rotary_dim = int(head_dim * raw.get("rotary_emb_fraction", 0.0))
        self.rotary = None
        if rotary_dim > 0:
            assert rotary_dim % 2 == 0, "rotary features come in pairs"
            self.rotary = NomicRotary(rotary_dim, float(raw.get("rotary_emb_base", 10_000)),
                                      bool(raw.get("rotary_emb_interleaved", False)), raw.get("rotary_scaling_factor"),
                                      int(raw.get("max_trained_positions", 2048)))
        else:
            assert "embeddings.position_embeddings.weight" in self.w, "no rotary and no position table"

    @classmethod
    def from_folder(cls, folder: str | Path) -> "NomicBertEncoder":
        folder = Path(folder)
        raw = json.loads((folder / "config.json").read_text())
        return cls(EncoderConfig.from_folder(folder), raw, _read_state(folder))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        c, w = self.config, self.w
        x = F.embedding(input_ids, w["embeddings.word_embeddings.weight"])
        if "embeddings.token_type_embeddings.weight" in w:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + F.embedding(types, w["embeddings.token_type_embeddings.weight"])
        b, t, h = x.shape
        if self.rotary is None:
            x = x + F.embedding(torch.arange(t), w["embeddings.position_embeddings.weight"])[None]
        x = self._norm(x, "emb_ln")
        heads, d = c.num_heads, h // c.num_heads
        keep = attention_mask.bool()[:, None, None, :]  # every query row attends to the real tokens only
        if self.rotary is not None:
            cos, sin = self.rotary.tables(attention_mask.sum(1), t)
        for i in range(c.num_layers):
            p = f"encoder.layers.{i}."
            q, k, v = self._linear(x, p + "attn.Wqkv").view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4)
            if self.rotary is not None:
                q, k = self.rotary.apply(q, cos, sin), self.rotary.apply(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = self._norm(x + self._linear(a.transpose(1, 2).reshape(b, t, h), p + "attn.out_proj"), p + "norm1")
            m = self._linear(self._linear(x, p + "mlp.fc11") * self.gate(self._linear(x, p + "mlp.fc12")),
                             p + "mlp.fc2")
            x = self._norm(x + m, p + "norm2")
        return x

    def classify(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("NomicBERT is served as an embedding model only")
