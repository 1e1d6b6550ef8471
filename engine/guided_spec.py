"""What a request's output is constrained to (`SamplingParams.guided`): one constraint, one small frozen
dataclass per kind, plus the texts the output is steered off (engine/avoid_texts.py).

The kinds are xgrammar's: a JSON schema, any JSON object, a regular expression, an EBNF grammar, or a
structural tag (free text until a trigger, then a tag whose content follows a grammar: how tool calls
are constrained). The offline API also takes the dict form (`{"json_schema": {...}}`, `{"regex": ...}`,
... with `strict`, `any_whitespace` and `avoid` beside it), read by `GuidedSpec.from_dict`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from engine.errors import InvalidRequestError
from engine.json_budget import CallFormat

GUIDED_KINDS = ("json_schema", "json_object", "regex", "grammar", "structural_tag")


@dataclass(frozen=True)
class JsonSchema:
    schema: dict[str, Any] | str  # a schema, or its JSON text
    strict: bool = True  # False: properties the schema does not name are allowed
    any_whitespace: bool = True  # False: compact JSON, `{"a": 1, "b": [2, 3]}`

    def schema_dict(self) -> dict[str, Any]:
        return json.loads(self.schema) if isinstance(self.schema, str) else self.schema


@dataclass(frozen=True)
class JsonObject:
    any_whitespace: bool = True


@dataclass(frozen=True)
class Regex:
    pattern: str


@dataclass(frozen=True)
class Grammar:
    ebnf: str  # xgrammar's EBNF


@dataclass(frozen=True)
class ToolCalls:
    """What budget-aware closing (engine/json_budget.py) needs to finish a call the budget would cut."""

    calls: tuple[CallFormat, ...]  # one per offered tool
    trigger: str
    at_least_one: bool


@dataclass(frozen=True)
class StructuralTag:
    tag: dict[str, Any] | str  # xgrammar's structural tag, or its JSON text
    tool_calls: ToolCalls | None = None  # set when the tag is tool calls: they can then be closed on budget

    def triggers(self) -> tuple[bytes, ...]:
        """The triggers of a top-level triggered tag (tool calls under tool_choice auto)."""
        fmt = self.tag.get("format") if isinstance(self.tag, dict) else None
        if not isinstance(fmt, dict) or fmt.get("type") != "triggered_tags":
            return ()
        return tuple(t.encode() for t in fmt.get("triggers", []) if isinstance(t, str) and t)


Constraint = JsonSchema | JsonObject | Regex | Grammar | StructuralTag
JSON_KINDS = (JsonSchema, JsonObject, StructuralTag)  # structural tags are tool calls, whose arguments are JSON


@dataclass(frozen=True)
class GuidedSpec:
    constraint: Constraint
    avoid: tuple[str, ...] = ()  # texts the output must not finish (engine/avoid_texts.py), per request

    def __post_init__(self) -> None:
        if not isinstance(self.avoid, tuple) or not all(isinstance(t, str) and t for t in self.avoid):
            raise InvalidRequestError("guided avoid must be a list of non-empty strings", "guided")

    def key(self) -> str:
        """The compile cache's key: the constraint, not the per-request texts to avoid."""
        return json.dumps([type(self.constraint).__name__, asdict(self.constraint)], sort_keys=True,
                          ensure_ascii=False)

    @property
    def is_json(self) -> bool:
        return isinstance(self.constraint, JSON_KINDS)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> GuidedSpec:
        """The dict form: exactly one of GUIDED_KINDS, with `strict`, `any_whitespace`, `avoid`."""
        kinds = [k for k in GUIDED_KINDS if spec.get(k) not in (None, False)]
        if len(kinds) != 1:
            raise InvalidRequestError(f"guided decoding takes exactly one of {GUIDED_KINDS}, got {sorted(spec)}",
                                      "guided")
        value = spec[kinds[0]]
        any_whitespace = bool(spec.get("any_whitespace", True))
        constraint: Constraint = {
            "json_schema": lambda: JsonSchema(value, bool(spec.get("strict", True)), any_whitespace),
            "json_object": lambda: JsonObject(any_whitespace),
            "regex": lambda: Regex(value),
            "grammar": lambda: Grammar(value),
            "structural_tag": lambda: StructuralTag(value),
        }[kinds[0]]()
        avoid = spec.get("avoid") or ()
        if not isinstance(avoid, list | tuple):
            raise InvalidRequestError("guided avoid must be a list of non-empty strings", "guided")
        return cls(constraint, tuple(avoid))
