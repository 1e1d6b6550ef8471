"""The Hermes-style tool prompt format, the one most small open models were tuned on, for chat
templates that do not render tools themselves (SmolLM2's):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Seoul"}}
    </tool_call>
"""

import json
from collections.abc import Mapping
from typing import Any

from engine.chat.markup import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN
from engine.chat.tools import FunctionTool, ToolChoiceMode

HERMES_PREAMBLE = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def format_tool_call(name: str, arguments: str | Mapping[str, Any]) -> str:
    """One call in the exact text the grammar produces, so history and generation look alike."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # keep the client's text as it is; it is history, not something we parse again
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    name_json = json.dumps(name, ensure_ascii=False)
    return f'{TOOL_CALL_OPEN}\n{{"name": {name_json}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'


def format_tool_response(content: str) -> str:
    return f"{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}"



def tools_preamble(tools: list[FunctionTool], choice: ToolChoiceMode | FunctionTool) -> str:
    listing = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
    text = HERMES_PREAMBLE.format(tools=listing)
    if isinstance(choice, FunctionTool):
        text += f"\n\nYou must call the function {choice.name}."
    elif choice == "required":
        text += "\n\nYou must call at least one function."
    return text
