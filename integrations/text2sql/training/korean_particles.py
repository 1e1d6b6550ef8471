"""Korean particles (josa) chosen by the sound the word before them ends in.

A particle has two forms, one after a final consonant (batchim) and one after a vowel: 이/가, 은/는, 을/를,
과/와, 으로/로 (로 also after ㄹ). Hangul syllables carry their final consonant in their code point; digits
and Latin letters are read the way Koreans say them ("3" is 삼, "Seoul" ends in ㄹ).
"""

from __future__ import annotations

_HANGUL_FIRST, _HANGUL_LAST = 0xAC00, 0xD7A3
_RIEUL = 8  # index of ㄹ among the 28 finals
_DIGIT_FINAL = {"0": 21, "1": _RIEUL, "2": 0, "3": 16, "4": 0, "5": 0, "6": 1, "7": _RIEUL, "8": _RIEUL, "9": 0}
# English words said in Korean end in a consonant only after these letters ("gold" is 골드, "bank" 뱅크 but "shop" 숍).
_LATIN_FINAL = {"l": _RIEUL, "m": 16, "n": 4, "k": 1, "p": 17}
PAIRS = {"이/가": ("이", "가"), "은/는": ("은", "는"), "을/를": ("을", "를"), "과/와": ("과", "와"),
         "으로/로": ("으로", "로"), "이에요/예요": ("이에요", "예요"), "이나/나": ("이나", "나")}


def final_consonant(word: str) -> int:
    """Index (0 = none, 8 = ㄹ) of the final consonant the word ends in, ignoring trailing quotes and spaces."""
    text = word.rstrip(" '\")]}.")
    if not text:
        return 0
    ch = text[-1]
    if _HANGUL_FIRST <= ord(ch) <= _HANGUL_LAST:
        return (ord(ch) - _HANGUL_FIRST) % 28
    if ch in _DIGIT_FINAL:
        return _DIGIT_FINAL[ch]
    if text[-2:].lower() == "ng":
        return 21
    return _LATIN_FINAL.get(ch.lower(), 0)


def particle(word: str, pair: str) -> str:
    """The form of ``pair`` (e.g. ``"이/가"``) that follows ``word``."""
    with_final, without = PAIRS[pair]
    final = final_consonant(word)
    if pair == "으로/로":
        return without if final in (0, _RIEUL) else with_final
    return with_final if final else without


def attach(word: str, pair: str) -> str:
    """``word`` followed by the right form of ``pair``: ``attach("회원", "은/는") == "회원은"``."""
    return word + particle(word, pair)
