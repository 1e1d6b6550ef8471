"""A JSON schema as the compact-JSON grammar that tool arguments and structured output are written in."""

from functools import lru_cache


@lru_cache(maxsize=256)
def compact_json_ebnf(schema_json: str, strict: bool = True) -> str:
    """A JSON schema as an EBNF grammar for compact JSON (separators ", " and ": ", no newlines or
    indentation), for structural-tag content: xgrammar's structural-tag `json_schema` content allows
    any whitespace, and a 135M model spends tokens on (or loops in) indentation. Compact JSON is also
    what the preamble shows."""
    import xgrammar as xgr

    return str(xgr.Grammar.from_json_schema(schema_json, any_whitespace=False, strict_mode=strict))
