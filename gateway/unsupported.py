"""What the server refuses, clearly, until the tools issue lands: tools, tool_choice, and
response_format other than text. Silence would let a client believe it got a tool call."""

from typing import Any

from gateway.errors import APIError


def reject_tools(tools: list | None, tool_choice: Any, response_format: dict | None) -> None:
    if tools:
        raise APIError(400, "tool calling is not supported by this server yet", param="tools",
                       code="unsupported_parameter")
    if tool_choice not in (None, "none", "auto"):
        raise APIError(400, "tool_choice is not supported by this server yet", param="tool_choice",
                       code="unsupported_parameter")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if response_format is not None and kind != "text":
        raise APIError(400, f"response_format {kind!r} is not supported by this server yet",
                       param="response_format", code="unsupported_parameter")
