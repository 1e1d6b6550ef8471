"""The BERT-family encoder (BERT, XLM-RoBERTa): bidirectional post-norm layers over a padded batch,
for embedding models and cross-encoders. No KV cache and no paging: an encoder reads its whole input
once, so a batch is a `[B, T]` tensor with a padding mask, and one forward pass answers it.

Weights load from an HF folder (`BertModel`, `XLMRobertaModel`, `*ForSequenceClassification`); the
classification head (BERT's pooler + classifier, or RoBERTa's dense + out_proj on the first token) is
kept when the folder has one. XLM-RoBERTa differs from BERT in its positions only (counted from
`pad_token_id + 1`, skipping padding) and its head's layout."""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

ENCODER_ARCHITECTURES = {
    "BertModel": ("bert", "embed"),
    "XLMRobertaModel": ("roberta", "embed"),
    "RobertaModel": ("roberta", "embed"),
    "BertForSequenceClassification": ("bert", "score"),
    "XLMRobertaForSequenceClassification": ("roberta", "score"),
    "RobertaForSequenceClassification": ("roberta", "score"),
    "ModernBertModel": ("modernbert", "embed"),  # engine/models/modernbert.py
    "ModernBertForSequenceClassification": ("modernbert", "score"),
    "NomicBertModel": ("nomic_bert", "embed"),  # engine/models/nomic_bert.py
}
# NomicBERT's config is GPT-2's (its class derives from GPT2Config): our names from its keys, GPT-2's
# defaults where a key is left out.
_NOMIC_KEYS = {"hidden_size": ("n_embd", 768), "num_hidden_layers": ("n_layer", 12),
               "num_attention_heads": ("n_head", 12), "max_position_embeddings": ("n_positions", 1024),
               "layer_norm_eps": ("layer_norm_epsilon", 1e-5), "hidden_act": ("activation_function", "gelu_new")}
_ACTIVATIONS = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
                "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


@dataclass(frozen=True)
class EncoderConfig:
    architecture: str
    family: str  # "bert", "roberta" (positions after the padding index), "modernbert" or "nomic_bert"
    task: str  # "embed" (hidden states) or "score" (a classification head)
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    pad_token_id: int
    num_labels: int

    @classmethod
    def from_folder(cls, folder: Path) -> "EncoderConfig":
        raw = json.loads((folder / "config.json").read_text())
        arch = (raw.get("architectures") or [""])[0]
        if arch not in ENCODER_ARCHITECTURES:
            raise ValueError(f"{folder}: {arch or 'no architecture'} is not an encoder we serve; supported: "
                             f"{sorted(ENCODER_ARCHITECTURES)}")
        family, task = ENCODER_ARCHITECTURES[arch]
        if family == "modernbert":  # its own names for the norm and the activation
            raw = {**raw, "layer_norm_eps": raw.get("norm_eps", 1e-5), "type_vocab_size": 0,
                   "hidden_act": raw.get("hidden_activation", "gelu")}
        if family == "nomic_bert":  # the gated MLP's width is read from its weights (the remote code rounds it up)
            raw = {**raw, **{ours: raw.get(theirs, default) for ours, (theirs, default) in _NOMIC_KEYS.items()},
                   "intermediate_size": raw.get("n_inner") or 4 * raw.get("n_embd", 768)}
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{folder}: position_embedding_type {raw['position_embedding_type']} is not supported")
        if family != "nomic_bert" and raw.get("hidden_act", "gelu") not in _ACTIVATIONS:  # nomic_bert checks its own
            raise ValueError(f"{folder}: hidden_act {raw['hidden_act']} is not supported")
        num_labels = raw.get("num_labels") or len(raw.get("id2label") or {}) or 2
        return cls(arch, family, task, raw["vocab_size"], raw["hidden_size"], raw["num_hidden_layers"],
                   raw["num_attention_heads"], raw["intermediate_size"], raw["max_position_embeddings"],
                   raw.get("type_vocab_size", 2), raw.get("layer_norm_eps", 1e-12), raw.get("hidden_act", "gelu"),
                   raw.get("pad_token_id") or 0, num_labels)

    @property
    def max_positions(self) -> int:
        """The longest input the position table holds (RoBERTa's first pad_token_id + 1 rows are unused)."""
        offset = self.pad_token_id + 1 if self.family == "roberta" else 0
        return self.max_position_embeddings - offset


def is_encoder_folder(folder: str | Path) -> bool:
    path = Path(folder)
    if not (path / "config.json").is_file():
        return False
    arch = (json.loads((path / "config.json").read_text()).get("architectures") or [""])[0]
    return arch in ENCODER_ARCHITECTURES


def _read_state(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
    elif (folder / "pytorch_model.bin").exists():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"{folder}: no model.safetensors or pytorch_model.bin")
    out = {}
    for name, tensor in state.items():
        for prefix in ("bert.", "roberta.", "model."):
            if name.startswith(prefix):
                name = name[len(prefix):]
                break
        out[name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = tensor
    return out


class NamedWeights:
    """What the encoders holding their weights by HF name (`self.w`) share: the hidden size, and layer
    norms and linears looked up by a module's name (its bias optional)."""

    config: EncoderConfig
    w: dict[str, torch.Tensor]
    eps: float

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.w[name + ".weight"], self.w.get(name + ".bias"), self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))


class BertEncoder:
    """`forward(input_ids, attention_mask, token_type_ids)` -> the last layer's states `[B, T, H]`;
    `classify(states)` -> the head's logits `[B, num_labels]` (cross-encoders)."""

    def __init__(self, config: EncoderConfig, state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32):
        self.config = config
        w = {k: v.to(dtype).contiguous() for k, v in state.items()}
        self.w = w
        self.layers = []
        for i in range(config.num_layers):
            p = f"encoder.layer.{i}."
            self.layers.append({
                "qkv_w": torch.cat([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]),
                "qkv_b": torch.cat([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]),
                "o_w": w[p + "attention.output.dense.weight"], "o_b": w[p + "attention.output.dense.bias"],
                "ln1": (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                "up_w": w[p + "intermediate.dense.weight"], "up_b": w[p + "intermediate.dense.bias"],
                "down_w": w[p + "output.dense.weight"], "down_b": w[p + "output.dense.bias"],
                "ln2": (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            })
        for p in list(w):
            if p.startswith("encoder.layer."):
                del w[p]
        self.act = _ACTIVATIONS[config.hidden_act]
        if config.task == "score":
            has_head = "classifier.weight" in w or "classifier.out_proj.weight" in w
            assert has_head, "a sequence-classification folder without its classifier weights"

    @classmethod
    def from_folder(cls, folder: str | Path, dtype: torch.dtype = torch.float32) -> "BertEncoder":
        folder = Path(folder)
        return cls(EncoderConfig.from_folder(folder), _read_state(folder), dtype)

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def _positions(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.config.family == "roberta":
            pad = self.config.pad_token_id
            not_pad = input_ids.ne(pad).long()
            return torch.cumsum(not_pad, dim=1) * not_pad + pad
        return torch.arange(input_ids.shape[1]).expand_as(input_ids)

    def _norm(self, x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), wb[0], wb[1], self.config.layer_norm_eps)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        c, w = self.config, self.w
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (F.embedding(input_ids, w["embeddings.word_embeddings.weight"])
             + F.embedding(self._positions(input_ids, attention_mask), w["embeddings.position_embeddings.weight"])
             + F.embedding(token_type_ids, w["embeddings.token_type_embeddings.weight"]))
        x = self._norm(x, (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]))
        b, t, h = x.shape
        heads, d = c.num_heads, h // c.num_heads
        keep = attention_mask.bool()[:, None, None, :]  # every query row attends to the real tokens only
        for layer in self.layers:
            qkv = F.linear(x, layer["qkv_w"], layer["qkv_b"]).view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=keep)
            a = F.linear(a.transpose(1, 2).reshape(b, t, h), layer["o_w"], layer["o_b"])
            x = self._norm(x + a, layer["ln1"])
            m = F.linear(self.act(F.linear(x, layer["up_w"], layer["up_b"])), layer["down_w"], layer["down_b"])
            x = self._norm(x + m, layer["ln2"])
        return x

    @torch.inference_mode()
    def classify(self, states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The sequence-classification head on the first token's state: BERT's pooler (dense, tanh) then
        its classifier, or RoBERTa's head (dense, tanh, out_proj)."""
        w, first = self.w, states[:, 0]
        if "classifier.out_proj.weight" in w:
            x = torch.tanh(F.linear(first, w["classifier.dense.weight"], w["classifier.dense.bias"]))
            return F.linear(x, w["classifier.out_proj.weight"], w["classifier.out_proj.bias"])
        x = torch.tanh(F.linear(first, w["pooler.dense.weight"], w["pooler.dense.bias"]))
        return F.linear(x, w["classifier.weight"], w["classifier.bias"])
