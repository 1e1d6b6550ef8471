"""The grammar of a pythonic call list (`[f(a=1), g(b="x")]`, engine/chat/pythonic.py): an xgrammar
structural tag whose keyword values are each property's compact-JSON grammar, spelled the Python way."""

import json
import re
from typing import Any

from engine.chat.json_ebnf import compact_json_ebnf
from engine.chat.tools import FunctionTool

_LOOKAHEAD = re.compile(r" \(=\(\[[^)]*\]\)\)")  # xgrammar's "a string ends before , } ] :": `)` follows here


def _value_grammar(schema: dict[str, Any]) -> dict[str, Any]:
    ebnf = compact_json_ebnf(json.dumps(schema))
    for word, py in (("true", "True"), ("false", "False"), ("null", "None")):
        ebnf = ebnf.replace(f'("{word}")', f'("{py}")')
    return {"type": "grammar", "grammar": _LOOKAHEAD.sub("", ebnf)}


def _const(text: str) -> dict[str, Any]:
    return {"type": "const_string", "value": text}


def _seq(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sequence", "elements": list(elements)}


def _optional(element: dict[str, Any]) -> dict[str, Any]:
    return {"type": "optional", "content": element}


def _call(tool: FunctionTool) -> dict[str, Any]:
    """`name(k=v, ...)`: required keywords first (Python does not care about their order), then optional ones."""
    props: dict[str, Any] = tool.parameters.get("properties") or {}
    required = [k for k in tool.parameters.get("required") or [] if k in props]
    optional = [k for k in props if k not in required]

    def kw(key: str, lead: str) -> dict[str, Any]:
        return _seq(_const(f"{lead}{key}="), _value_grammar(props[key]))

    parts = [kw(k, ", " if i else "") for i, k in enumerate(required)]
    if required:
        parts += [_optional(kw(k, ", ")) for k in optional]
    elif optional:  # the first keyword written has no comma before it
        firsts = [_seq(kw(k, ""), *[_optional(kw(j, ", ")) for j in optional[i + 1:]]) for i, k in enumerate(optional)]
        parts.append(_optional(firsts[0] if len(firsts) == 1 else {"type": "or", "elements": firsts}))
    return _seq(_const(f"{tool.name}("), *parts, _const(")"))


def pythonic_tag(tools: list[FunctionTool], one: bool) -> dict[str, Any]:
    """A structural tag writing `[call, call, ...]` (one call when `one`) over the offered tools."""
    calls = [_call(t) for t in tools]
    call = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    body = call if one else _seq(call, {"type": "star", "content": _seq(_const(", "), call)})
    return {"type": "tag", "begin": "[", "content": body, "end": "]"}
