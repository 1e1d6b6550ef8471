"""The grammar of a Gemma 4 call (`<|tool_call>call:f{a:<|"|>x<|"|>,b:2}<tool_call|>`,
engine/chat/gemma4_calls.py): an xgrammar structural tag built from the tool's JSON schema, since xgrammar
writes schemas as JSON or as XML styles but not in Gemma 4's syntax.

What it keeps of the schema: objects' properties (in the alphabetical order the template writes keys in,
the required ones always, no others), arrays' items, `enum` and `const`, a string's `pattern`, `anyOf` /
`oneOf` / a list of types, and numbers, integers, booleans and null through xgrammar's own JSON grammar
(their syntax is JSON's, bounds included). A part it does not know (`$ref`, `allOf`, an object without
properties...) is any Gemma 4 value there, so the call still parses. A string is `<|"|>`, any text without
that mark, `<|"|>`; where the tokenizer holds the mark as a special token (Gemma 4's does) the grammar
writes that token, as the model was trained to."""

import json
from typing import Any

from engine.chat.gemma4_calls import CALL_CLOSE, CALL_OPEN, QUOTE, render_value
from engine.chat.json_ebnf import compact_json_ebnf
from engine.chat.tools import FunctionTool

# Any Gemma 4 value. A string's text is anything without the quote mark: s0..s4 count how much of the mark
# was just written (a "<" always restarts it, as the mark has no other "<").
ANY_VALUE_EBNF = r"""root ::= value
value ::= string | object | array | number | "true" | "false" | "null"
string ::= "<|\"|>" s0
s0 ::= [^<] s0 | "<" s1
s1 ::= "|" s2 | "<" s1 | [^<|] s0
s2 ::= "\"" s3 | "<" s1 | [^<\"] s0
s3 ::= "|" s4 | "<" s1 | [^<|] s0
s4 ::= ">" | "<" s1 | [^<>] s0
object ::= "{" (member ("," member)*)? "}"
member ::= key ":" value
key ::= [^:{}\[\],<\" \t\r\n]+
array ::= "[" (value ("," value)*)? "]"
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+\-]? [0-9]+)?
"""
_ANY = {"type": "grammar", "grammar": ANY_VALUE_EBNF}
_ANY_OBJECT = {"type": "grammar", "grammar": ANY_VALUE_EBNF.replace("root ::= value", "root ::= object")}
_JSON_SCALARS = {"integer", "number", "boolean", "null"}


def _const(text: str) -> dict[str, Any]:
    return {"type": "const_string", "value": text}


def _seq(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sequence", "elements": list(elements)}


def _either(elements: list[dict[str, Any]]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


class _Builder:
    """One tool's argument grammar; `quote_token`: the quote mark is a special token, written as it."""

    def __init__(self, quote_token: bool) -> None:
        self.quote: Any = {"type": "token", "token": QUOTE} if quote_token else QUOTE

    def _literal(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str) and not isinstance(self.quote, str):
            return {"type": "tag", "begin": self.quote, "content": _const(value), "end": self.quote}
        if isinstance(value, str):
            return _const(render_value(value))
        if isinstance(value, dict | list):  # a quote inside would be spelled out: rare enough
            return _const(render_value(value))
        return _const(json.dumps(value))

    def _string(self, schema: dict[str, Any]) -> dict[str, Any]:
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            content: dict[str, Any] = {"type": "regex", "pattern": pattern.removeprefix("^").removesuffix("$")}
        else:
            content = {"type": "any_text", "excludes": [QUOTE]}
        return {"type": "tag", "begin": self.quote, "content": content, "end": self.quote}

    def _array(self, schema: dict[str, Any]) -> dict[str, Any]:
        items = schema.get("items")
        item = self.value(items) if isinstance(items, dict) else _ANY
        least = schema.get("minItems", 0)
        more = {"type": "star", "content": _seq(_const(","), item)}
        body = _seq(item, more)
        if not (isinstance(least, int) and least > 0):
            body = {"type": "optional", "content": body}
        return _seq(_const("["), body, _const("]"))

    def _object(self, schema: dict[str, Any]) -> dict[str, Any]:
        props = schema.get("properties")
        if not isinstance(props, dict):
            return _ANY_OBJECT
        if not props:
            return _const("{}")
        keys = sorted(props)
        required = {k for k in schema.get("required") or () if k in props}
        values = {k: self.value(props[k]) for k in keys}

        def after(i: int) -> list[dict[str, Any]]:
            """The keys after the i-th written one: each with its comma, the optional ones optional."""
            out = []
            for k in keys[i + 1:]:
                member = _seq(_const(f",{k}:"), values[k])
                out.append(member if k in required else {"type": "optional", "content": member})
            return out

        # Which key is written first: any up to the first required one (all of them if none is required).
        firsts = []
        for i, k in enumerate(keys):
            firsts.append(_seq(_const(f"{k}:"), values[k], *after(i)))
            if k in required:
                break
        members = _either(firsts)
        if not required:
            members = {"type": "optional", "content": members}
        return _seq(_const("{"), members, _const("}"))

    def value(self, schema: Any) -> dict[str, Any]:
        if not isinstance(schema, dict) or any(k in schema for k in ("$ref", "allOf", "not", "if")):
            return _ANY
        if "const" in schema:
            return self._literal(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return _either([self._literal(v) for v in schema["enum"]])
        options = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(options, list) and options:
            return _either([self.value({**{k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}, **o})
                            for o in options])
        kind = schema.get("type")
        if isinstance(kind, list):
            return _either([self.value({**schema, "type": t}) for t in kind]) if kind else _ANY
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if kind == "string":
            return self._string(schema)
        if kind == "object":
            return self._object(schema)
        if kind == "array":
            return self._array(schema)
        if kind in _JSON_SCALARS:  # JSON's own syntax: xgrammar's grammar keeps the schema's bounds
            return {"type": "grammar", "grammar": compact_json_ebnf(json.dumps(schema))}
        return _ANY


def gemma4_tag(tool: FunctionTool, special: frozenset[str], forced: bool) -> dict[str, Any]:
    """One tool's call as a structural tag. `special`: the marks the tokenizer holds as special tokens;
    `forced` (tool_choice required or named): the call marks are written as those tokens too (under auto
    the trigger is read as text, which the special token's text matches)."""
    args = _Builder(QUOTE in special).value(tool.parameters or {"type": "object", "properties": {}})
    if forced and {CALL_OPEN, CALL_CLOSE} <= special:
        return {"type": "tag", "begin": {"type": "token", "token": CALL_OPEN},
                "content": _seq(_const(f"call:{tool.name}"), args), "end": {"type": "token", "token": CALL_CLOSE}}
    return {"type": "tag", "begin": f"{CALL_OPEN}call:{tool.name}", "content": args, "end": CALL_CLOSE}
