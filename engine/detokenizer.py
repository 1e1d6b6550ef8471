"""Incremental detokenization that never emits half a character.

Byte-level BPE splits a multi-byte UTF-8 character (every Hangul syllable is 3 bytes) over several
tokens; decoding a partial one gives U+FFFD. We decode a short window of recent tokens and emit the
new text only once it no longer ends in U+FFFD. The window starts a few tokens back so tokenizers
that add a leading space per word decode with the right spacing."""

from dataclasses import dataclass

REPLACEMENT = "\ufffd"


@dataclass
class DetokenizerState:
    prefix_offset: int
    read_offset: int


def new_state(prompt_len: int) -> DetokenizerState:
    return DetokenizerState(prefix_offset=max(prompt_len - 5, 0), read_offset=prompt_len)


def decode(tokenizer, token_ids: list[int], skip_special_tokens: bool = True, keep: tuple[int, ...] = ()) -> str:
    """`tokenizer.decode`, except that the special tokens in `keep` stay in the text when the others are
    skipped (the text between them is decoded as a run of its own)."""
    if not skip_special_tokens or not keep or not any(t in keep for t in token_ids):
        return tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    out, run = [], []
    for t in token_ids:
        if t in keep:
            out += [tokenizer.decode(run, skip_special_tokens=True), tokenizer.decode([t])]
            run = []
        else:
            run.append(t)
    return "".join(out) + tokenizer.decode(run, skip_special_tokens=True)


def detokenize_incrementally(
    tokenizer, token_ids: list[int], state: DetokenizerState, skip_special_tokens: bool = True,
    keep: tuple[int, ...] = (),
) -> str:
    """Returns the text the tokens up to the end of `token_ids` add, advancing `state`; the special tokens
    in `keep` stay in the text when the others are skipped."""
    prefix = decode(tokenizer, token_ids[state.prefix_offset : state.read_offset], skip_special_tokens, keep)
    full = decode(tokenizer, token_ids[state.prefix_offset :], skip_special_tokens, keep)
    if full.endswith(REPLACEMENT) or len(full) <= len(prefix):
        # An unfinished multi-byte character, or a token that decodes to nothing yet (special tokens).
        if not full.endswith(REPLACEMENT):
            state.prefix_offset, state.read_offset = state.read_offset, len(token_ids)
        return ""
    new_text = full[len(prefix) :]
    state.prefix_offset, state.read_offset = state.read_offset, len(token_ids)
    return new_text


def stop_holdback(text: str, stops: list[str]) -> int:
    """How many trailing characters might be the start of a stop string, so must not be emitted yet."""
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return hold


def find_stop(text: str, new_len: int, stops: list[str]) -> tuple[int, str] | None:
    """The earliest stop string that the last `new_len` characters completed: (index, stop)."""
    best: tuple[int, str] | None = None
    for stop in stops:
        start = max(0, len(text) - new_len - len(stop) + 1)
        idx = text.find(stop, start)
        if idx != -1 and (best is None or idx < best[0]):
            best = (idx, stop)
    return best
