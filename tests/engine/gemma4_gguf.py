"""A tiny random Gemma 4 with a tokenizer of Gemma 4's kind and its chat template, as an HF folder and as the
GGUF file llama.cpp's own converter writes from that folder. The converter reads Gemma 4's vocabulary only
from a BPE tokenizer with byte fallback (gguf-py's LlamaHfVocab), so the default model's byte-level tokenizer
the other tests borrow will not do: this one is trained here on a few sentences, Gemma 4's way (spaces as
U+2581, no split but at newlines, `<0xXX>` byte pieces), with Gemma 4's marks as special tokens."""

import json
from pathlib import Path

from tests.engine.test_model_families import FAMILIES, make_tiny
from tests.gguf_files import llama_cpp_gguf

TEMPLATE = Path(__file__).parent.parent / "data" / "templates" / "google-gemma-4-31B-it.jinja"
# Gemma 4's special tokens the template and its calls use, at Gemma 4's ids' order (pad, eos, bos first).
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
            "<|tool_response>", "<tool_response|>", '<|"|>', "<|think|>", "<|channel>", "<channel|>", "<|turn>",
            "<turn|>"]
CORPUS = [
    "You are a helpful assistant. Use celsius. Use fahrenheit. What is the weather in Paris today?",
    "declaration:set_unit{description:Unit.,parameters:{properties:{ok:{type:BOOLEAN},unit:{enum:[celsius,"
    "fahrenheit],type:STRING}},required:[ok,unit],type:OBJECT}} call:set_unit{ok:true,unit:celsius}",
    "user model system thought The quick brown fox jumps over the lazy dog. 0123456789 false true null",
]


def write_gemma4_tokenizer(folder: Path) -> int:
    """Gemma 4's kind of tokenizer saved in `folder`; returns its size."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    # The byte pieces go in as the trainer's special tokens (so they are in the vocabulary, after the marks),
    # then leave the added tokens: they are ordinary pieces of Gemma 4's vocabulary.
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS + byte_pieces, show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPECIALS]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), pad_token="<pad>",
                                   eos_token="<eos>", bos_token="<bos>", unk_token="<unk>", mask_token="<mask>",
                                   additional_special_tokens=SPECIALS[5:], chat_template=TEMPLATE.read_text())
    fast.save_pretrained(folder)
    return len(fast)


def make_gemma4_pair(root: Path, seed: int = 4) -> tuple[Path, Path]:
    """(the HF folder, the F32 GGUF file llama.cpp's converter makes of it) of the family tests' tiny Gemma 4."""
    folder = root / "hf"
    size = write_gemma4_tokenizer(root / "tokenizer")
    config = FAMILIES["gemma4"]()
    config.vocab_size = config.vocab_size_per_layer_input = size
    config.pad_token_id, config.eos_token_id, config.bos_token_id = 0, 1, 2
    make_tiny(folder, config, root / "tokenizer", seed=seed)
    return folder, llama_cpp_gguf(folder, root / "gemma4.f32.gguf", "f32")
