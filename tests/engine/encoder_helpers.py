"""Tiny random encoder checkpoints written as sentence-transformers writes them: a WordPiece vocabulary
of letters and a few words, a random BertModel or XLMRobertaModel (or a one-label sequence classifier,
a cross-encoder), and for embedding models the Pooling (and Normalize) modules saved by
sentence-transformers itself."""

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
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True, model_max_length=64)


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
