"""Tiny random encoder checkpoints written as sentence-transformers writes them: a WordPiece vocabulary
of letters and a few words, a random BertModel or XLMRobertaModel (or a one-label sequence classifier,
a cross-encoder), and for embedding models the Pooling (and Normalize) modules saved by
sentence-transformers itself; and NomicBERT folders, whose modeling code transformers does not have."""

import json
import string
from pathlib import Path

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizerFast,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    ModernBertModel,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
)

WORDS = ["the", "a", "of", "and", "to", "is", "in", "plants", "light", "sugar", "market", "water", "fox", "dog",
         "select", "from", "users", "count", "how", "do", "make", "food", "document", "number", "about", "cats",
         "sql", "rain", "music", "quick", "brown", "jumps", "over", "lazy"]
SPECIALS = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"]
SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64,
             initializer_range=0.2)  # not BERT's 0.02: then inputs differ in their states and scores


def _tokenizer(folder: Path) -> BertTokenizerFast:
    vocab = SPECIALS + list(string.ascii_lowercase + string.digits + string.punctuation) + WORDS
    vocab += ["##" + c for c in string.ascii_lowercase + string.digits]
    vocab = list(dict.fromkeys(vocab))  # "a" is a letter and a word: one id each, none past len(tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # The vocabulary as a mapping: transformers 5 takes no vocab_file here (given one, it kept only the
    # special tokens, and every word became [UNK]).
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True, model_max_length=64)


def make_encoder(folder: Path, arch: str = "bert", head: bool = False, seed: int = 0) -> Path:
    """An HF folder: BertModel / XLMRobertaModel / ModernBertModel, or with `head` their
    ...ForSequenceClassification (1 label)."""
    torch.manual_seed(seed)
    tok = _tokenizer(folder)
    if arch == "bert":
        config = BertConfig(vocab_size=len(tok), **SHAPE, pad_token_id=tok.pad_token_id, num_labels=1)
        model = (BertForSequenceClassification if head else BertModel)(config)
    elif arch == "modernbert":  # three layers, global and local (a window of 4 either side) attention
        config = ModernBertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                                  local_attention=8, global_attn_every_n_layers=2, initializer_range=0.2,
                                  norm_bias=True, num_labels=1)
        model = (ModernBertForSequenceClassification if head else ModernBertModel)(config)
    else:
        # XLM-RoBERTa counts positions from pad_token_id + 1, skipping padding (two token types: our WordPiece
        # tokenizer marks pairs, where the real one does not).
        config = XLMRobertaConfig(vocab_size=len(tok), **SHAPE, pad_token_id=tok.pad_token_id, type_vocab_size=2,
                                  num_labels=1)
        config.max_position_embeddings = SHAPE["max_position_embeddings"] + 2
        model = (XLMRobertaForSequenceClassification if head else XLMRobertaModel)(config)
    with torch.no_grad():  # random LayerNorms and biases too, so a mixed-up parameter shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def make_sentence_transformer(folder: Path, arch: str = "bert", pooling: str = "mean", normalize: bool = True,
                              max_seq_length: int = 48, seed: int = 0) -> Path:
    """A sentence-transformers folder (modules.json, 1_Pooling, 2_Normalize) saved by sentence-transformers."""
    from sentence_transformers import SentenceTransformer, models

    hf = make_encoder(folder.parent / f"{folder.name}-hf", arch, seed=seed)
    transformer = models.Transformer(str(hf), max_seq_length=max_seq_length)
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode=pooling)]
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def make_nomic_encoder(folder: Path, seed: int = 0, *, rotary_fraction: float = 1.0, interleaved: bool = False,
                       activation: str = "swiglu", biases: bool = False, scaling_factor: float | None = None,
                       max_trained_positions: int = 2048) -> Path:
    """A NomicBertModel folder as nomic-embed-text-v1's is laid out (its config keys, its weight names; no
    modeling code: transformers has no class for it, so the weights are random tensors written directly).
    The defaults are the published checkpoints' choices: full rotary, GPT-NeoX halves, SwiGLU, no biases,
    rotary base 1000, a vocabulary padded to a multiple of 8 (64 in theirs)."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    tok = _tokenizer(folder)
    hidden, layers, vocab = 32, 2, (len(tok) + 7) // 8 * 8
    inner = 256  # the remote code rounds the gated MLP's width (n_inner: 64) up to a multiple of 256
    config = {"architectures": ["NomicBertModel"], "model_type": "nomic_bert", "activation_function": activation,
              "n_embd": hidden, "n_head": 4, "n_layer": layers, "n_inner": 64, "n_positions": 128,
              "layer_norm_epsilon": 1e-12, "vocab_size": vocab, "type_vocab_size": 2, "pad_vocab_size_multiple": 8,
              "rotary_emb_fraction": rotary_fraction, "rotary_emb_base": 1000, "rotary_emb_interleaved": interleaved,
              "rotary_emb_scale_base": None, "rotary_scaling_factor": scaling_factor,
              "max_trained_positions": max_trained_positions, "qkv_proj_bias": biases, "mlp_fc1_bias": biases,
              "mlp_fc2_bias": biases, "prenorm": False, "parallel_block": False, "causal": False,
              "auto_map": {"AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"}}
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    def rand(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape) * scale

    state = {"embeddings.word_embeddings.weight": rand(vocab, hidden, scale=1.0),
             "embeddings.token_type_embeddings.weight": rand(2, hidden, scale=1.0),
             "emb_ln.weight": 1 + rand(hidden, scale=0.1), "emb_ln.bias": rand(hidden, scale=0.1)}
    if rotary_fraction == 0:
        state["embeddings.position_embeddings.weight"] = rand(128, hidden, scale=1.0)
    shapes = {"attn.Wqkv": (3 * hidden, hidden), "attn.out_proj": (hidden, hidden), "mlp.fc11": (inner, hidden),
              "mlp.fc12": (inner, hidden), "mlp.fc2": (hidden, inner)}
    for i in range(layers):
        p = f"encoder.layers.{i}."
        for name, shape in shapes.items():
            state[p + name + ".weight"] = rand(*shape)
            if biases:
                state[p + name + ".bias"] = rand(shape[0], scale=0.1)
        for norm in ("norm1", "norm2"):
            state[p + norm + ".weight"] = 1 + rand(hidden, scale=0.1)
            state[p + norm + ".bias"] = rand(hidden, scale=0.1)
    save_file(state, str(folder / "model.safetensors"))
    tok.save_pretrained(folder)
    return folder


def add_sentence_transformers_config(folder: Path, pooling: str = "mean", normalize: bool = True,
                                     max_seq_length: int = 48) -> Path:
    """The sentence-transformers files of an encoder folder (modules.json, 1_Pooling, 2_Normalize), written
    as sentence-transformers writes them (for a model it cannot load without remote code)."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    hidden = json.loads((folder / "config.json").read_text()).get("n_embd")
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode": pooling, "include_prompt": True}, indent=2))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                  "do_lower_case": False}))
    return folder
