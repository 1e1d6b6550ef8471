"""Structured output as vLLM's extras ask for it (`guided_json`, `guided_regex`, `guided_grammar`,
`guided_choice`, `structured_outputs`) next to OpenAI's `response_format`: at most one per request."""

import json
from collections.abc import Mapping
from typing import Any

from engine.chat.constraints import guided_for_response_format, json_guided
from engine.errors import InvalidRequestError
from engine.guided_spec import Grammar, GuidedSpec, Regex

EXTRA_FIELDS = ("guided_json", "guided_regex", "guided_grammar", "guided_choice", "structured_outputs")


def _schema_guided(value: Any, param: str) -> GuidedSpec:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"{param} is not valid JSON: {exc}", param) from None
    try:
        guided = guided_for_response_format({"type": "json_schema", "schema": value}, param)
    except InvalidRequestError as exc:  # name the field the client sent, not our wrapping
        message = exc.message.replace(f"{param}.schema", param)
        raise InvalidRequestError(message, param) from None
    assert guided is not None
    return guided


def _check_compiles(kind: str, value: Any, param: str) -> None:
    """Regexes and grammars are compiled here, so a bad one is a 400 naming the field, not a
    failure inside the engine."""
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{param} must be a non-empty string", param)
    import xgrammar as xgr

    try:
        if kind == "regex":
            xgr.Grammar.from_regex(value)
        else:
            xgr.Grammar.from_ebnf(value)
    except Exception as exc:
        raise InvalidRequestError(f"{param} is not a valid "
                                  f"{'regular expression' if kind == 'regex' else 'EBNF grammar'}"
                                  f": {exc}", param) from None


def _choice_guided(choices: Any, param: str) -> GuidedSpec:
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise InvalidRequestError(f"{param} must be a non-empty list of non-empty strings", param)
    # JSON string escapes are EBNF string escapes too.
    return GuidedSpec(Grammar("root ::= " + " | ".join(json.dumps(c) for c in choices)))


def _extra_guided(key: str, value: Any, param: str) -> GuidedSpec | None:
    if key not in ("json", "regex", "grammar", "choice", "json_object"):  # a typo, even with a null value
        raise InvalidRequestError(f"{param}: unknown structured output kind {key!r} "
                                  "(expected json, regex, grammar, choice or json_object)", param)
    if value is None:
        return None
    if key == "json":
        return _schema_guided(value, param)
    if key in ("regex", "grammar"):
        _check_compiles(key, value, param)
        return GuidedSpec(Regex(value) if key == "regex" else Grammar(value))
    if key == "choice":
        return _choice_guided(value, param)
    return json_guided() if value else None  # json_object


def structured_output(response_format: Any, extras: Mapping[str, Any] | None = None,
                      format_param: str = "response_format") -> GuidedSpec | None:
    """The output constraint of a request (None: free text), from `response_format` (or `text.format`)
    or one of vLLM's extras (`guided_json`, ..., `structured_outputs`, by name in `extras`); more than
    one is a 400."""
    found: list[tuple[str, GuidedSpec]] = []
    guided = guided_for_response_format(response_format, format_param)
    if guided is not None:
        found.append((format_param, guided))
    if extras is not None:
        for key in ("json", "regex", "grammar", "choice"):
            param = f"guided_{key}"
            guided = _extra_guided(key, extras.get(param), param)
            if guided is not None:
                found.append((param, guided))
        so = extras.get("structured_outputs")
        if so is not None:
            if not isinstance(so, Mapping):
                raise InvalidRequestError("structured_outputs must be an object", "structured_outputs")
            for key, value in so.items():
                if key in ("disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                           "whitespace_pattern", "structural_tag"):
                    continue  # vLLM's backend knobs; our backend is fixed
                guided = _extra_guided(key, value, f"structured_outputs.{key}")
                if guided is not None:
                    found.append((f"structured_outputs.{key}", guided))
    if len(found) > 1:
        names = ", ".join(p for p, _ in found)
        raise InvalidRequestError(f"only one structured output constraint may be given, got {names}", found[1][0])
    return found[0][1] if found else None
