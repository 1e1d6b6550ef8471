"""Steering away from texts a sequence must not write whole: the chat layer passes the tool calls
whose results are already in the conversation (`SamplingParams.guided["avoid"]`, each call's text
up to the end of its arguments), so the next answer does not repeat one of them.

Masking the token that would finish such a text is too late: the grammar usually forces a call's
last characters (`"}` after the last value), and masking there would leave no token. So the path is
left at its last *structural choice*: while the output follows a text, the rest of the path is
walked through the grammar (accepted, then rolled back), and the path's tokens are masked at the
last position where the grammar allows a few tokens off the path (another tool's name, JSON
instead of a call, another property), not counting the insides of strings and other free runs
(more than STRUCTURAL_MAX tokens allowed), where leaving the path would only mutate a value.
A text with no such choice on its way is left alone: the rule steers, it never leaves a row
without a token. The check is on bytes, so it holds however the model tokenizes the text."""

from collections.abc import Callable

import torch

# More tokens allowed than this is free text or a string's inside, not a choice between structures.
STRUCTURAL_MAX = 256


def _allowed(row: torch.Tensor) -> torch.Tensor:
    """The token ids a packed int32 bitmask row allows."""
    bits = (row.to(torch.int64).unsqueeze(1) >> torch.arange(32)) & 1
    return bits.flatten().nonzero().flatten()


def _clear(row: torch.Tensor, tokens: list[int]) -> None:
    for token in tokens:
        word, bit = divmod(token, 32)
        value = int(row[word]) & ~(1 << bit) & 0xFFFFFFFF
        row[word] = value - 2**32 if value >= 2**31 else value  # bit 31 is the sign


class TextAvoider:
    """Built once per engine from the decoded vocabulary; stateless per sequence."""

    def __init__(self, decoded_vocab: list[bytes], encode: Callable[[str], list[int]],
                 allocate: Callable[[], torch.Tensor]):
        self._decoded = decoded_vocab
        self._encode = encode  # text -> token ids, how the path is walked through the grammar
        self._allocate = allocate  # a fresh one-row bitmask

    def _on_path(self, token: int, rest: bytes) -> bool:
        raw = self._decoded[token]
        return bool(raw) and (rest.startswith(raw) or raw.startswith(rest))

    def _split(self, row: torch.Tensor, rest: bytes) -> tuple[list[int], list[int]] | None:
        """(allowed tokens on the path, allowed tokens off it), or None when so many are allowed that
        this is no structural choice."""
        allowed = _allowed(row)
        if len(allowed) > STRUCTURAL_MAX:
            return None
        on, off = [], []
        for token in allowed.tolist():
            (on if self._on_path(token, rest) else off).append(token)
        return on, off

    @staticmethod
    def _kept(written: bytes, text: bytes) -> int:
        """The longest prefix of `text` that `written` ends with (0 at the start of the output)."""
        for kept in range(min(len(text) - 1, len(written)), 0, -1):
            if written.endswith(text[:kept]):
                return kept
        return 0

    def _choice_ahead(self, matcher, rest: bytes) -> bool:
        """Whether the path's rest holds a structural choice after its next token (walked through
        `matcher`, which is left as it was)."""
        tokens = self._encode(rest.decode("utf-8", errors="ignore"))
        scratch = self._allocate()
        accepted, done, found = 0, b"", False
        for j, token in enumerate(tokens):
            if j > 0:
                matcher.fill_next_token_bitmask(scratch, 0)
                split = self._split(scratch[0], rest[len(done):])
                if split is not None and split[1]:
                    found = True
                    break
            if not matcher.accept_token(token):
                break
            accepted += 1
            done += self._decoded[token]
        if accepted:
            matcher.rollback(accepted)
        return found

    def mask(self, row: torch.Tensor, output: list[int], texts: tuple[bytes, ...], matcher) -> None:
        """Masks in `row` (this step's packed bitmask) the tokens that keep the output on one of
        `texts`, when this is the last structural choice on its way."""
        longest = max(len(t) for t in texts)
        written = b"".join(self._decoded[t] for t in output[-longest:])[-longest:]
        for text in texts:
            kept = self._kept(written, text)
            if kept == 0 and output:
                continue  # not on this text's path
            rest = text[kept:]
            split = self._split(row, rest)
            if split is None or not split[0] or not split[1]:
                continue  # no choice here (or nothing on the path to mask)
            if not self._choice_ahead(matcher.matcher, rest):
                _clear(row, split[0])
                return
