"""The ModernBERT encoder: pre-norm layers with rotary positions, a gated MLP (GeGLU), no biases by default,
and attention alternating between global layers and local ones that see `sliding_window` tokens either
side; a final norm. Same interface as engine/models/bert.py's BertEncoder (a padded batch in, the last
states out; `classify` for `ModernBertForSequenceClassification`'s head: cls or mean pooling, dense,
activation, norm, classifier).

The config is read through transformers' AutoConfig, which resolves ModernBERT's older keys
(`global_rope_theta`, `local_attention`, `global_attn_every_n_layers`) into `layer_types`,
`rope_parameters` and `sliding_window`; the forward pass is ours."""

from pathlib import Path

import torch
import torch.nn.functional as F

from engine.models.bert import _ACTIVATIONS, EncoderConfig, NamedWeights, _read_state


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class ModernBertEncoder(NamedWeights):
    def __init__(self, config: EncoderConfig, hf_config, state: dict[str, torch.Tensor]):
        self.config = config
        w = {k: v.float().contiguous() for k, v in state.items()}
        self.w = w
        self.layer_types = list(hf_config.layer_types)
        self.sliding_window = hf_config.sliding_window
        self.thetas = {t: hf_config.rope_parameters[t]["rope_theta"] for t in set(self.layer_types)}
        for t, p in hf_config.rope_parameters.items():
            if t in self.thetas and p.get("rope_type", "default") != "default":
                raise ValueError(f"ModernBERT with {p['rope_type']} RoPE is not supported")
        self.eps = hf_config.norm_eps
        self.act = _ACTIVATIONS[hf_config.hidden_activation]
        self.head_act = _ACTIVATIONS[hf_config.classifier_activation]
        self.classifier_pooling = hf_config.classifier_pooling

    @classmethod
    def from_folder(cls, folder: str | Path) -> "ModernBertEncoder":
        from transformers import AutoConfig

        folder = Path(folder)
        return cls(EncoderConfig.from_folder(folder), AutoConfig.from_pretrained(str(folder)), _read_state(folder))

    def _rope(self, t: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        freqs = torch.outer(torch.arange(t, dtype=torch.float), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        c = self.config
        x = self._norm(F.embedding(input_ids, self.w["embeddings.tok_embeddings.weight"]), "embeddings.norm")
        b, t, h = x.shape
        heads, d = c.num_heads, h // c.num_heads
        keys = attention_mask.bool()[:, None, None, :]
        pos = torch.arange(t)
        near = ((pos[:, None] - pos[None, :]).abs() <= self.sliding_window)[None, None]
        masks = {"full_attention": keys, "sliding_attention": keys & near}
        ropes = {kind: self._rope(t, d, theta) for kind, theta in self.thetas.items()}
        for i, kind in enumerate(self.layer_types):
            p = f"layers.{i}."
            y = x if i == 0 else self._norm(x, p + "attn_norm")
            qkv = self._linear(y, p + "attn.Wqkv").view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4)
            cos, sin = ropes[kind]
            q = qkv[0] * cos + _rotate_half(qkv[0]) * sin
            k = qkv[1] * cos + _rotate_half(qkv[1]) * sin
            a = F.scaled_dot_product_attention(q, k, qkv[2], attn_mask=masks[kind])
            x = x + self._linear(a.transpose(1, 2).reshape(b, t, h), p + "attn.Wo")
            up, gate = self._linear(self._norm(x, p + "mlp_norm"), p + "mlp.Wi").chunk(2, dim=-1)
            x = x + self._linear(self.act(up) * gate, p + "mlp.Wo")
        return self._norm(x, "final_norm")

    @torch.inference_mode()
    def classify(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.classifier_pooling == "mean":
            m = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * m).sum(1) / m.sum(1)
        else:
            pooled = states[:, 0]
        x = self._norm(self.head_act(self._linear(pooled, "head.dense")), "head.norm")
        return self._linear(x, "classifier")
