"""Offered function tools and `tool_choice`, checked in either wire shape (Chat Completions or
Responses); bad input raises `InvalidRequestError(message, param)`."""

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.errors import InvalidRequestError

# OpenAI's rule for function and response_format names.
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

ToolChoiceMode = Literal["none", "auto", "required"]


# -- tools and tool_choice -----------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionTool:
    """One offered function, whichever wire shape it came in (Chat Completions or Responses)."""

    name: str
    description: str | None
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def as_dict(value: Any) -> Any:
    """Pydantic request models (the gateway's) and plain dicts both work."""
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


def check_json_schema(schema: Any, param: str) -> None:
    """A schema jsonschema itself rejects is the client's error, named where it is."""
    import jsonschema

    if not isinstance(schema, dict):
        raise InvalidRequestError(f"{param} must be a JSON schema object", param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidRequestError(f"{param} is not a valid JSON schema: {exc.message}"
                                  + (f" (at {where})" if where else ""), param) from exc


def normalize_tools(tools: Iterable[Any] | None, param: str = "tools") -> list[FunctionTool]:
    """Validates `tools` in either shape: `{"type": "function", "function": {name, description,
    parameters}}` (Chat Completions) or `{"type": "function", name, description, parameters}` (Responses)."""
    result: list[FunctionTool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools or []):
        where = f"{param}[{i}]"
        tool = as_dict(raw)
        if not isinstance(tool, Mapping):
            raise InvalidRequestError(f"{where} must be an object", where)
        kind = tool.get("type", "function")
        if kind != "function":
            raise InvalidRequestError(f"{where}: tool type {kind!r} is not supported; only function tools are",
                                      f"{where}.type")
        fn = tool.get("function", tool)
        fn_where = f"{where}.function" if "function" in tool else where
        if not isinstance(fn, Mapping):
            raise InvalidRequestError(f"{fn_where} must be an object", fn_where)
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InvalidRequestError(f"{fn_where}.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r}",
                                      f"{fn_where}.name")
        if name in seen:
            raise InvalidRequestError(f"{fn_where}.name: the function {name!r} is defined twice", f"{fn_where}.name")
        seen.add(name)
        parameters = fn.get("parameters")
        parameters = EMPTY_PARAMETERS if parameters is None else parameters
        check_json_schema(parameters, f"{fn_where}.parameters")
        if parameters.get("type", "object") != "object":
            raise InvalidRequestError(f"{fn_where}.parameters must describe an object (type 'object'), "
                                      f"got type {parameters.get('type')!r}", f"{fn_where}.parameters")
        description = fn.get("description")
        result.append(FunctionTool(name, description if isinstance(description, str) else None, parameters))
    return result


def normalize_tool_choice(tool_choice: Any, tools: list[FunctionTool],
                          param: str = "tool_choice") -> ToolChoiceMode | FunctionTool:
    """`none | auto | required` or the named function. No choice means `auto` with tools, `none`
    without, as in OpenAI's API."""
    choice = as_dict(tool_choice)
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequestError(f"{param} must be 'none', 'auto', 'required' or a named function, "
                                      f"got {choice!r}", param)
        if choice == "required" and not tools:
            raise InvalidRequestError(f"{param} is 'required' but no tools were given", param)
        return choice  # type: ignore[return-value]
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        fn = choice.get("function", choice)  # Chat Completions nests the name, Responses does not
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            raise InvalidRequestError(f"{param} names no function: expected "
                                      '{"type": "function", "function": {"name": ...}}', param)
        for tool in tools:
            if tool.name == name:
                return tool
        known = ", ".join(t.name for t in tools) or "none"
        raise InvalidRequestError(f"{param} names the function {name!r}, which is not among the tools "
                                  f"(known: {known})", param)
    raise InvalidRequestError(f"{param} must be 'none', 'auto', 'required' or "
                              '{"type": "function", "function": {"name": ...}}', param)


def offered_tools(tools: list[FunctionTool], choice: ToolChoiceMode | FunctionTool) -> list[FunctionTool]:
    """The tools the prompt shows. A named choice shows only that function: the grammar forces it
    anyway, and a small model is less confused by one tool than by several it may not call."""
    if choice == "none":
        return []
    if isinstance(choice, FunctionTool):
        return [choice]
    return tools
