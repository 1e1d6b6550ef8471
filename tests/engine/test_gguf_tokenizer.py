"""A GGUF file's tokenizer (engine/gguf_tokenizer.py) tokenizes as the tokenizer it was written from, on a
few hundred strings (Korean, code, emoji, whitespace runs, digits, contractions, special tokens inline):
- byte-level BPE tokenizers built here the way Qwen2, Llama 3, SmolLM2 and GPT-2 define theirs in their
  tokenizer.json, trained on a small corpus, written into a GGUF file as llama.cpp's converter writes them;
- a SentencePiece BPE model trained here, against the sentencepiece library itself;
- the default model's file, against SmolLM2's tokenizer as its tokenizer.json defines it;
- llama.cpp's vocabulary test files (its tokenizations of its test strings), the one shipped in
  tests/data and, when a llama.cpp source tree is at hand (SLLM_LLAMA_CPP_DIR), all of them."""

import os
import random
from pathlib import Path

import gguf
import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from engine.gguf_file import GGUFFile
from engine.gguf_tokenizer import load_gguf_tokenizer
from engine.loader import default_model_path
from tests.gguf_files import add_bpe_tokenizer, add_sentencepiece_tokenizer

DATA = Path(__file__).parent.parent / "data" / "llama_cpp_vocab"
LLAMA_CPP = os.environ.get("SLLM_LLAMA_CPP_DIR", str(Path.home() / ".cache/sllm/llama.cpp/llama_cpp_python-0.3.36"
                                                                     "/vendor/llama.cpp"))

FRAGMENTS = [
    "안녕하세요", "데이터베이스에서 고객 목록을 보여 주세요.", "서울의 2024년 매출은?", "한국어와 English 섞기",
    "def add(a, b):\n    return a + b\n", "SELECT name, COUNT(*) FROM users WHERE age >= 30 GROUP BY name;",
    "for (int i = 0; i < n; ++i) { x[i] *= 2; }", "🚀", "🦙🦙", "😶‍🌫️", "✅ done", "  ", "   \n\n", "\t\t", "\n",
    " ", "Hello", " world", "HELLO World!", "I've", "we'RE", "they'll", "it's", "3", "33", "333", "3333",
    "1,000,000.50", "3.14159", "e.g.", "...", "!!!???", "Ñandú", "Äpfel", "нещо на Български", "我想在apple工作",
    "カタカナ", "http://example.com/a?b=c", "x_y-z", "CamelCaseWord", "snake_case_word", "<|im_start|>",
    "<|im_end|>", "<tool_call>", "\u00a0nbsp", "\r\n", "tab\there",
]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
USER_DEFINED = ["<tool_call>", "</tool_call>"]


def sample_strings(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = list(FRAGMENTS)
    while len(out) < n:
        out.append("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(2, 7))))
    return out


# Pre-tokenizers as these models' tokenizer.json state them (written independently of the loader's table).
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_SPLIT = {"qwen2": _WORDS + r"\p{N}" + _REST, "llama-bpe": _WORDS + r"\p{N}{1,3}" + _REST}


def _source_pre_tokenizer(pre: str):
    if pre in _SPLIT:
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_SPLIT[pre]), behavior="isolated", invert=False),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # gpt-2


def _trained_bpe(pre: str) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(ignore_merges=pre == "llama-bpe"))
    tok.pre_tokenizer = _source_pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample_strings(400, seed=1) * 3, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_DEFINED])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>")


def _gguf(path: Path, add) -> GGUFFile:
    writer = gguf.GGUFWriter(str(path), "llama")
    add(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GGUFFile(path)


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "smollm", "gpt-2"])
def test_byte_level_bpe_tokenizes_as_its_source(pre, tmp_path):
    source = _trained_bpe(pre)
    ours = load_gguf_tokenizer(_gguf(tmp_path / "t.gguf", lambda w: add_bpe_tokenizer(w, source, pre)))
    assert ours.get_vocab() == source.get_vocab()
    for text in sample_strings(300, seed=2):
        ids = source.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=False) == ids, text
        assert ours.decode(ids) == source.decode(ids), text
    # Control tokens are special (dropped by skip_special_tokens), user-defined ones are plain text.
    ids = ours.encode("<|im_start|>hi <tool_call>", add_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=True) == "hi <tool_call>"


def test_sentencepiece_tokenizes_as_sentencepiece(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(s.replace("\n", " ") for s in sample_strings(400, seed=3)), encoding="utf-8")
    # Llama's settings: BPE pieces, byte fallback, text kept as written (no normalisation, spaces kept).
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=600, model_type="bpe", byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))

    class Ids:  # the special ids the converter reads from the HF tokenizer
        bos_token_id, eos_token_id, unk_token_id, pad_token_id = 1, 2, 0, None
        add_bos_token, add_eos_token, chat_template = True, False, None

    ours = load_gguf_tokenizer(_gguf(tmp_path / "spm.gguf",
                                     lambda w: add_sentencepiece_tokenizer(w, tmp_path / "sp.model", Ids)))
    for text in sample_strings(300, seed=4):
        if "<|" in text:
            continue  # no control pieces of that name in this model: sentencepiece spells them out
        want = sp.encode(text)
        assert ours.encode(text, add_special_tokens=False) == want, text
        assert ours.decode(want) == sp.decode(want), text
    assert ours.encode("hi")[0] == 1  # add_bos_token


@pytest.mark.default_model
def test_default_model_tokenizes_as_smollm2_defines_it():
    """SmolLM2's tokenizer.json: BPE over the file's vocabulary and merges, digits split one by one, then
    GPT-2's byte-level regex. transformers' GGUF reader leaves out the digit split (so it differs on
    whitespace before a digit, 15 of these 300 strings); llama.cpp keeps it ("smollm"), and so do we."""
    file = GGUFFile(default_model_path())
    ours = load_gguf_tokenizer(file)
    merges = [tuple(m.split(" ", 1)) for m in file.get("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(file.get("tokenizer.ggml.tokens"))}, merges=merges))
    tok.pre_tokenizer = _source_pre_tokenizer("smollm")
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(file.get("tokenizer.ggml.tokens"), file.get("tokenizer.ggml.token_type"),
                                               strict=True) if kind == 3])
    source = PreTrainedTokenizerFast(tokenizer_object=tok)
    for text in sample_strings(300, seed=5):
        ids = source.encode(text)
        assert ours.encode(text) == ids, text
        assert ours.decode(ids, skip_special_tokens=True) == source.decode(ids, skip_special_tokens=True)
    assert ours.chat_template == file.get("tokenizer.chat_template")
    assert (ours.bos_token, ours.eos_token) == ("<|im_start|>", "<|im_end|>")


def _vocab_files() -> list[Path]:
    found = sorted(DATA.glob("ggml-vocab-*.gguf"))
    shipped = {f.name for f in found}
    found += [f for f in sorted(Path(LLAMA_CPP, "models").glob("ggml-vocab-*.gguf")) if f.name not in shipped]
    return [f for f in found if Path(f"{f}.inp").exists()]


@pytest.mark.parametrize("vocab", _vocab_files(), ids=lambda p: p.name)
def test_llama_cpp_vocab_tests(vocab):
    """llama.cpp's own expected tokenizations (tests/test-tokenizer-0 data) for its vocabulary files."""
    file = GGUFFile(vocab)
    try:
        tok = load_gguf_tokenizer(file)
    except ValueError as e:
        pytest.skip(str(e))  # a tokenizer kind or pre-tokenizer we do not serve
    texts = Path(f"{vocab}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    expected = Path(f"{vocab}.out").read_text(encoding="utf-8").split("\n")
    for text, want in zip(texts, expected, strict=False):
        assert tok.encode(text, add_special_tokens=False) == [int(x) for x in want.split()], text
