"""NomicBERT (engine/models/nomic_bert.py) against a reference written in this file from Nomic's published
modeling code (`modeling_hf_nomic_bert.py` in nomic-ai/contrastors, the remote code of nomic-embed-text-v1
and v1.5): transformers has no NomicBERT class and no PyPI package ships one that runs here, so the
reference follows that code's own structure (full cos/sin tables repeated as `(2 d)` or `(d 2)` and its
rotate_half, an additive mask of the dtype's minimum, an explicit softmax), where the engine uses half
tables and scaled_dot_product_attention. Each text goes through the reference alone (no padding), the
engine batches them all padded; vectors pooled as the sentence-transformers config says, to 1e-4."""

import asyncio
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoTokenizer

from engine.encoder_engine import EncoderEngine
from engine.models.bert import is_encoder_folder
from engine.pooling import PoolingParams
from tests.engine.encoder_helpers import add_sentence_transformers_config, make_nomic_encoder

TEXTS = ["search_query: The quick brown fox jumps over the lazy dog.", "search_document: a",
         "SELECT count(*) FROM users;", "how do plants make food " * 20, "rain",
         "search_document: music about cats and dogs"]


def _rotate_half(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).reshape(x.shape)


def reference_states(folder, input_ids: list[int]) -> torch.Tensor:
    """The last layer's states `[T, H]` of one unpadded input, as the remote code computes them."""
    cfg = json.loads((folder / "config.json").read_text())
    w = load_file(str(folder / "model.safetensors"))
    ids = torch.tensor([input_ids])
    t, h, heads = ids.shape[1], cfg["n_embd"], cfg["n_head"]
    d = h // heads
    types = torch.zeros_like(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
    ro_dim = int(d * cfg["rotary_emb_fraction"])
    if ro_dim == 0:
        x = x + w["embeddings.position_embeddings.weight"][:t]
    x = F.layer_norm(x, (h,), w["emb_ln.weight"], w["emb_ln.bias"], cfg["layer_norm_epsilon"])
    if ro_dim:
        base = cfg["rotary_emb_base"]
        factor, trained = cfg["rotary_scaling_factor"], cfg["max_trained_positions"]
        if factor and t > trained:  # dynamic NTK: the base grows with the sequence length
            base = base * ((factor * t / trained) - (factor - 1)) ** (ro_dim / (ro_dim - 2))
        inv_freq = 1.0 / (base ** (torch.arange(0, ro_dim, 2, dtype=torch.float32) / ro_dim))
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
        if cfg["rotary_emb_interleaved"]:
            cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
        else:
            cos, sin = freqs.cos().repeat(1, 2), freqs.sin().repeat(1, 2)
        cos, sin = cos[:, None, :], sin[:, None, :]  # [T, 1 (heads), ro_dim]

    def rope(z):  # z [1, T, heads, d]
        if not ro_dim:
            return z
        rot = z[..., :ro_dim] * cos + _rotate_half(z[..., :ro_dim], cfg["rotary_emb_interleaved"]) * sin
        return torch.cat([rot, z[..., ro_dim:]], dim=-1)

    def lin(z, name):
        return F.linear(z, w[name + ".weight"], w.get(name + ".bias"))

    gate = {"swiglu": F.silu, "geglu": F.gelu, "glu": torch.sigmoid}[cfg["activation_function"]]
    additive = torch.zeros(1, 1, 1, t)  # one unpadded input: the mask adds nothing
    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}."
        qkv = lin(x, p + "attn.Wqkv").reshape(1, t, 3, heads, d)
        q, k, v = rope(qkv[:, :, 0]), rope(qkv[:, :, 1]), qkv[:, :, 2]
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + additive
        a = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).reshape(1, t, h)
        x = F.layer_norm(lin(a, p + "attn.out_proj") + x, (h,), w[p + "norm1.weight"], w[p + "norm1.bias"],
                         cfg["layer_norm_epsilon"])
        y = lin(x, p + "mlp.fc11") * gate(lin(x, p + "mlp.fc12"))
        x = F.layer_norm(lin(y, p + "mlp.fc2") + x, (h,), w[p + "norm2.weight"], w[p + "norm2.bias"],
                         cfg["layer_norm_epsilon"])
    return x[0]


def _pool(states: torch.Tensor, pooling: str, normalize: bool) -> torch.Tensor:
    v = {"mean": states.mean(0), "cls": states[0], "lasttoken": states[-1]}[pooling]
    return F.normalize(v, dim=0) if normalize else v


VARIANTS = {
    # nomic-embed-text-v1/v1.5's choices: full rotary in halves, SwiGLU, no biases; mean pooling, normalised
    "published": ({}, "mean", True),
    # the other branches: GPT-J pairs on half of each head, GeGLU, biases, dynamic NTK past 8 tokens
    "interleaved-ntk": (dict(rotary_fraction=0.5, interleaved=True, activation="geglu", biases=True,
                             scaling_factor=2.0, max_trained_positions=8), "cls", False),
    "glu-position-table": (dict(rotary_fraction=0.0, activation="glu"), "lasttoken", True),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_nomic_vectors_equal_the_reference(tmp_path, variant):
    options, pooling, normalize = VARIANTS[variant]
    folder = add_sentence_transformers_config(make_nomic_encoder(tmp_path / "nomic", seed=7, **options), pooling,
                                              normalize)
    tok = AutoTokenizer.from_pretrained(str(folder))
    expected = torch.stack([_pool(reference_states(folder, tok(t, truncation=True, max_length=48)["input_ids"]),
                                  pooling, normalize) for t in TEXTS])
    engine = EncoderEngine(folder)
    try:
        assert is_encoder_folder(folder) and engine.task == "embed" and engine.max_model_len == 48
        assert engine.spec.config.family == "nomic_bert" and engine.hidden_size == 32

        async def embed_all():
            params = PoolingParams(engine.spec.pooling, normalize=engine.spec.normalize)
            return await asyncio.gather(*[engine.embed(engine.check_request(t), params) for t in TEXTS])

        got = torch.stack([o.embedding for o in asyncio.run(embed_all())])
        assert engine.stats()["batches"] == 1  # six inputs of different lengths in one padded forward pass
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        assert torch.cdist(got, got).triu(1).max() > 0.1  # distinct inputs, distinct vectors
    finally:
        engine.shutdown()


def test_unsupported_nomic_options_are_refused(tmp_path):
    folder = make_nomic_encoder(tmp_path / "prenorm")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "prenorm": True}))
    from engine.models.nomic_bert import NomicBertEncoder

    with pytest.raises(ValueError, match="prenorm"):
        NomicBertEncoder.from_folder(folder)
