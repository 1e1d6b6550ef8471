"""Building blocks for EBNF grammars in xgrammar's dialect: literals, character classes, bounded
repetition, an ordered rule set, and identifiers that exclude a list of words (EBNF has no set
difference, so that one walks a trie)."""

from __future__ import annotations

import json
from collections.abc import Iterable


def ebnf_literal(text: str) -> str:
    """``text`` as an EBNF string literal (JSON escaping is a subset of what xgrammar accepts)."""
    return json.dumps(text, ensure_ascii=False)


class EBNFRules:
    """An ordered rule set; the first rule added is emitted first (``root``)."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        if name not in self._rules:
            self._rules[name] = body
        return name

    def has(self, name: str) -> bool:
        return name in self._rules

    def text(self) -> str:
        return "\n".join(f"{name} ::= {body}" for name, body in self._rules.items()) + "\n"


def char_class(chars: Iterable[str]) -> str:
    """A character class with runs written as ranges: [0-9A-Z_a-z]."""
    chars = set(chars)
    assert all(c.isalnum() or c == "_" for c in chars), "only identifier characters need no escaping"
    codes = sorted(ord(c) for c in chars)
    parts, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = chr(codes[i]), chr(codes[j])
        parts.append(lo if i == j else f"{lo}{hi}" if j == i + 1 else f"{lo}-{hi}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def identifier_excluding(rules: EBNFRules, name: str, first: str, rest: str, max_len: int,
                         excluded: Iterable[str]) -> str:
    """Adds rule ``name``: identifiers ``first rest{0,max_len-1}`` except the ``excluded`` words,
    compared case-insensitively (SQL keywords). EBNF has no set difference, so this walks a trie of
    the excluded words: off the trie any character may follow; on it, a word may not end where an
    excluded word ends."""
    trie: dict = {}
    for word in excluded:
        if 0 < len(word) <= max_len and word[0] in first.lower() + first.upper():
            node = trie
            for ch in word.lower():
                node = node.setdefault(ch, {})
            node[""] = {}  # end-of-word marker

    def free(remaining: int) -> str:
        return f"{char_class(rest)}{{0,{remaining}}}" if remaining > 0 else ""

    def build(node: dict, rule: str, depth: int, alphabet: str) -> str:
        remaining = max_len - depth - 1  # characters that may follow the next one
        options: list[str] = []
        on_trie = [c for c in node if c]
        off = [c for c in alphabet if c.lower() not in on_trie]
        if off:
            options.append(f"{char_class(off)} {free(remaining)}".strip())
        for i, ch in enumerate(sorted(on_trie)):
            cased = sorted({ch, ch.upper()} & set(alphabet))
            child = node[ch]
            child_rule = f"{rule}_{i}"
            ends_ok = "" not in child
            if remaining > 0 and any(c for c in child):
                build(child, child_rule, depth + 1, rest)
                tail = f"{child_rule}{'?' if ends_ok else ''}"
            elif remaining > 0:  # a leaf: anything may follow, and must if the word is excluded
                tail = free(remaining) if ends_ok else f"{char_class(rest)}{{1,{remaining}}}"
            else:
                tail = ""
                if not ends_ok:
                    continue  # the excluded word itself, and nothing can follow: drop it
            options.append(f"{char_class(cased)} {tail}".strip())
        rules.add(rule, alts(options))
        return rule

    return build(trie, name, 0, first)


def alts(items: Iterable[str]) -> str:
    return " | ".join(items)


def rep(item: str, sep: str, most: int) -> str:
    """``item (sep item){0,most-1}``: at least one, at most ``most`` items."""
    if most <= 1:
        return item
    return f"{item} ({sep} {item}){{0,{most - 1}}}"
