"""A GGUF file's tokenizer (`tokenizer.ggml.*`), rebuilt with the `tokenizers` library as a fast HF tokenizer.

llama.cpp is the reference for what a GGUF file means, so the choices follow its reading of the file:
- `gpt2` model: byte-level BPE over the file's tokens and merges, split first by the pre-tokenizer that
  `tokenizer.ggml.pre` names (llama.cpp maps each name to regexes; we use the original regexes of those
  models' tokenizer.json, which HF's Oniguruma engine runs as written);
- `gemma4` model: BPE with merges over raw UTF-8 after spaces become U+2581, split only at newlines;
- `llama` model: SentencePiece's BPE, as llama.cpp runs it: the pair whose merged piece has the highest
  score merges first, unknown bytes fall back to `<0xXX>` pieces, and a space is prefixed to every run of
  text (the first, and each after a special token) when `add_space_prefix` says so;
- control tokens are special tokens, user-defined ones are matched whole but are not special, but for the
  marks llama.cpp's converter demotes from special to user-defined (RENDERED_SPECIALS);
- `add_bos_token`/`add_eos_token` as the file says, else llama.cpp's defaults for the model kind.
The chat template comes from `tokenizer.chat_template`."""

from __future__ import annotations

from typing import Any

from engine.gguf_file import GGUFFile

# Token types of `tokenizer.ggml.token_type` (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Special tokens of the HF tokenizer that llama.cpp's converter writes as USER_DEFINED (Gemma4Model.set_vocab's
# visible_tokens), per tokenizer model: llama.cpp renders user-defined tokens in its output and its chat parser
# reads the marks there. Our parsers read them where SamplingParams.keep_special_token_ids keeps them, the
# grammar writes them as single special tokens and a stop at `<|tool_response>` is its token id: the same as
# from the HF folder only if they are special here too.
RENDERED_SPECIALS = {
    "gemma4": frozenset({"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                         "<tool_response|>", '<|"|>'}),
}

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
          rf"{_CONTRACTIONS}|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]


def _family(names: str, regexes: list[str], ignore_merges: bool = False,
            add_bos: bool = False) -> dict[str, tuple[list[str], bool, bool]]:
    return {name: (regexes, ignore_merges, add_bos) for name in names.split()}


# `tokenizer.ggml.pre` -> (regexes applied in turn, whole pre-tokens in the vocabulary skip the merges, add
# BOS by default), grouped as llama.cpp groups them. (llama.cpp also cleans up spaces before punctuation
# when decoding some of them; transformers 5 refuses that for BPE tokenizers, and we decode as HF does.)
PRE_TOKENIZERS: dict[str, tuple[list[str], bool, bool]] = {
    **_family("default", _DEFAULT),
    **_family("gpt-2 phi-2 mpt olmo jais trillion exaone4 mellum modern-bert granite-docling jina-es jina-de "
              "gigachat", [_GPT2]),
    **_family("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", [_LLAMA3], ignore_merges=True,
              add_bos=True),
    **_family("dbrx smaug-bpe", [_LLAMA3]),
    **_family("qwen2 deepseek-r1-qwen kormo", [_QWEN2]),
    **_family("stablelm2 megrez hunyuan", [_QWEN2]),
    **_family("qwen35", [_QWEN35]),
    **_family("starcoder refact codeshell exaone minerva-7b", [r"\p{N}", _GPT2]),
    **_family("smollm command-r", [r"\p{N}", _GPT2]),
    **_family("gpt-4o llama4", [_GPT4O]),
    **_family("tekken", [_TEKKEN], ignore_merges=True, add_bos=True),
}


def load_gguf_tokenizer(gguf: GGUFFile):
    """A `PreTrainedTokenizerFast` equivalent to the file's tokenizer, chat template included."""
    from transformers import PreTrainedTokenizerFast

    model = gguf.get("tokenizer.ggml.model")
    tokens: list[str] | None = gguf.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ValueError(f"{gguf.path.name} has no tokenizer (tokenizer.ggml.tokens)")
    types = [int(t) for t in gguf.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    if model == "gpt2":
        tokenizer, add_bos = _byte_level_bpe(gguf, tokens)
    elif model == "llama":
        tokenizer, add_bos = _sentencepiece_bpe(gguf, tokens, types)
    elif model == "gemma4":
        tokenizer, add_bos = _gemma4_bpe(gguf, tokens)
    else:
        raise ValueError(f"{gguf.path.name}: tokenizer model {model!r} is not supported (gpt2, llama and gemma4 are)")
    add_bos = bool(gguf.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(gguf.get("tokenizer.ggml.add_eos_token", False))

    from tokenizers import AddedToken

    # Ids of the special and user-defined tokens are those of the file: each is already in the vocabulary.
    rendered = RENDERED_SPECIALS.get(model, frozenset())
    tokenizer.add_tokens([AddedToken(tokens[i], special=types[i] == CONTROL or tokens[i] in rendered, normalized=False)
                          for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)])
    specials = _special_tokens(gguf, tokens)
    _post_processor(tokenizer, specials, add_bos, add_eos)
    fast = _handed_over(PreTrainedTokenizerFast)(
        tokenizer, clean_up_tokenization_spaces=False, chat_template=gguf.get("tokenizer.chat_template"), **specials,
    )
    fast.add_bos_token, fast.add_eos_token = add_bos, add_eos
    return fast


def _handed_over(base: type) -> type:
    """`base` taking its backend tokenizer as it is: given as `tokenizer_object`, transformers deep-copies it
    (a JSON round trip, 0.5-1.5 s for a 151k vocabulary). The subclass keeps the base's name, which is what
    save_pretrained records as the tokenizer class."""

    def __init__(self, backend, **kwargs):
        self._tokenizer = backend
        base.__init__(self, **kwargs)

    return type(base.__name__, (base,), {"__init__": __init__, "__module__": base.__module__})


def _byte_level_bpe(gguf: GGUFFile, tokens: list[str]):
    import json

    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers

    pre = gguf.get("tokenizer.ggml.pre") or "default"
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"{gguf.path.name}: pre-tokenizer {pre!r} is not supported; "
                         f"supported: {', '.join(sorted(PRE_TOKENIZERS))}")
    regexes, ignore_merges, add_bos = PRE_TOKENIZERS[pre]
    merges = gguf.get("tokenizer.ggml.merges", [])
    if any(m.startswith(" ") for m in merges):  # tokenizers splits "a b" at its first space, llama.cpp after
        merges = [list(_split_merge(m)) for m in merges]  # the first character: the same but for these
    # Built from its JSON form: the merges go over as strings, unsplit, and the Python-to-Rust conversion of
    # a 151k vocabulary and merge list is one parse (about half the time of models.BPE(vocab, merges)).
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
             "vocab": _vocab(tokens), "merges": merges}
    tokenizer = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, add_bos


def _gemma4_bpe(gguf: GGUFFile, tokens: list[str]):
    """Gemma 4's: BPE with the file's merges over raw UTF-8 (no byte-level mapping), spaces written as U+2581,
    no splitting but at newlines (runs of them kept whole), unknown bytes as `<0xXX>` pieces; BOS added."""
    import json

    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers

    merges = [list(_split_merge(m)) for m in gguf.get("tokenizer.ggml.merges", [])]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "ignore_merges": False,
             "vocab": _vocab(tokens), "merges": merges}
    tokenizer = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}))
    tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                           decoders.Fuse()])
    return tokenizer, True


def _sentencepiece_bpe(gguf: GGUFFile, tokens: list[str], types: list[int]):
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = gguf.get("tokenizer.ggml.scores")
    if scores is None:
        raise ValueError(f"{gguf.path.name}: a SentencePiece tokenizer needs tokenizer.ggml.scores")
    vocab = _vocab(tokens)
    unk = gguf.get("tokenizer.ggml.unknown_token_id")
    bpe = models.BPE(vocab=vocab, merges=_merges_by_score(tokens, [float(s) for s in scores], types, vocab),
                     unk_token=tokens[int(unk)] if unk is not None else None, byte_fallback=True, fuse_unk=True)
    tokenizer = Tokenizer(bpe)
    space_prefix = bool(gguf.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend("\u2581")] if space_prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "\u2581")])
    decode = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if space_prefix:
        decode.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(decode)
    return tokenizer, True


def _vocab(tokens: list[str]) -> dict[str, int]:
    # Filled from the end, so a repeated piece keeps its first id, as a lookup by text finds it.
    return dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1), strict=True))


def _split_merge(merge: str) -> tuple[str, str]:
    cut = merge.find(" ", 1)  # llama.cpp's split: the first space after the first character
    if cut < 0:
        raise ValueError(f"malformed BPE merge {merge!r}")
    return merge[:cut], merge[cut + 1:]


def _merges_by_score(tokens: list[str], scores: list[float], types: list[int],
                     vocab: dict[str, int]) -> list[tuple[str, str]]:
    """SentencePiece keeps no merge list: any two pieces whose concatenation is a normal piece may merge,
    the one with the higher score first. As BPE ranks: every such split of every normal piece, ordered by
    the merged piece's score (then its id, then the left piece's length, for a stable order)."""
    ranked = []
    for i, piece in enumerate(tokens):
        if types[i] != NORMAL or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], i, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _special_tokens(gguf: GGUFFile, tokens: list[str]) -> dict[str, Any]:
    found = {}
    for hf, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        i = gguf.get(f"tokenizer.ggml.{key}_token_id")
        if i is not None and 0 <= int(i) < len(tokens):
            found[f"{hf}_token"] = tokens[int(i)]
    return found


def _post_processor(tokenizer, specials: dict[str, Any], add_bos: bool, add_eos: bool) -> None:
    from tokenizers import processors

    bos, eos = specials.get("bos_token"), specials.get("eos_token")
    add_bos, add_eos = add_bos and bos is not None, add_eos and eos is not None
    if not (add_bos or add_eos):
        return
    single = ([f"{bos}:0"] if add_bos else []) + ["$A:0"] + ([f"{eos}:0"] if add_eos else [])
    pair = single + ([f"{bos}:1"] if add_bos else []) + ["$B:1"] + ([f"{eos}:1"] if add_eos else [])
    used = {t for t, wanted in ((bos, add_bos), (eos, add_eos)) if wanted}
    tokenizer.post_processor = processors.TemplateProcessing(
        single=" ".join(single), pair=" ".join(pair),
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in used],
    )
