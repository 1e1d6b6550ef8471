"""Chat messages as a chat template takes them: text content, past calls and tool results in the
shape of a template with tool support or as our markup in the text of one without."""

import json
from collections.abc import Mapping
from typing import Any

from engine.chat.tool_prompt import format_tool_call, format_tool_response
from engine.chat.tools import as_dict
from engine.errors import InvalidRequestError

TEXT_PARTS = {"text", "input_text", "output_text"}
MEDIA_PARTS = {"image_url", "input_image", "image", "input_audio", "audio", "file", "input_file"}


def content_text(content: Any, param: str) -> str:
    """A message's content as plain text: a string as is, text parts joined by newlines. Image, audio
    and file parts are refused, naming the part: the served models are text-only."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequestError(f"{param} must be a string or a list of content parts", param)
    texts = []
    for j, raw in enumerate(content):
        part, where = as_dict(raw), f"{param}[{j}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        if kind in MEDIA_PARTS:
            raise InvalidRequestError(f"{where}: {kind} content is not supported; the served model is text-only",
                                      where, code="unsupported_content")
        if not isinstance(part, Mapping) or (kind is not None and kind not in TEXT_PARTS):
            raise InvalidRequestError(f"{where}: unknown content part type {kind!r}", where)
        if not isinstance(part.get("text"), str):
            raise InvalidRequestError(f"{where}: a {kind or 'text'} part needs a string `text`", where)
        texts.append(part["text"])
    return "\n".join(texts)


def _history_calls(message: Mapping[str, Any], param: str) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of an assistant message's `tool_calls`."""
    calls = []
    for j, raw in enumerate(message.get("tool_calls") or []):
        call = as_dict(raw)
        fn = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidRequestError(f"{param}.tool_calls[{j}] needs function.name", f"{param}.tool_calls[{j}]")
        calls.append((call.get("id") or "", fn["name"], fn.get("arguments") or "{}"))
    return calls


def native_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template with tool support, in the shape HF templates expect: arguments as a
    dict (most templates `tojson` them) and the tool's name on tool results where it is known."""
    names_by_id: dict[str, str] = {}
    out = []
    for i, m in enumerate(messages):
        role = m["role"]
        msg: dict[str, Any] = {"role": role, "content": content_text(m.get("content"), f"messages[{i}].content")}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for call_id, name, args in _history_calls(m, f"messages[{i}]"):
                names_by_id[call_id] = name
                try:
                    parsed = json.loads(args) if isinstance(args, str) else args
                except json.JSONDecodeError:
                    parsed = args
                calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": parsed}})
            msg["tool_calls"] = calls
        elif role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            name = m.get("name") or names_by_id.get(m.get("tool_call_id") or "")
            if name:
                msg["name"] = name
        out.append(msg)
    return out


def text_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template without tool support: calls become `<tool_call>` blocks in the
    assistant's text and consecutive tool results one user turn of `<tool_response>` blocks (user,
    not a `tool` role, because templates that enforce role order know only system/user/assistant)."""
    out: list[dict[str, Any]] = []
    in_tool_turn = False
    for i, m in enumerate(messages):
        role = m["role"]
        text = content_text(m.get("content"), f"messages[{i}].content")
        if role == "tool":
            block = format_tool_response(text)
            if in_tool_turn:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            in_tool_turn = True
            continue
        in_tool_turn = False
        if role == "assistant" and m.get("tool_calls"):
            blocks = [format_tool_call(name, args) for _, name, args in _history_calls(m, f"messages[{i}]")]
            text = "\n".join(([text] if text else []) + blocks)
        out.append({"role": role, "content": text})
    return out


# Said in the system message when the reply is constrained to some JSON object (`json_object`), whose
# keys only the conversation names. Measured on the default model, 30 prompts that each ask for named
# keys: replies with every key asked for 16/30 without it, 19/30 with it at temperature 0 (20/60 and
# 25/60 over two seeds at 0.7; "Respond with a JSON object." gave 18/30 and 19/60).
JSON_REPLY_NOTE = "You reply in JSON."


def with_system_note(messages: list[Any], note: str) -> list[dict[str, Any]]:
    """`messages` with `note` appended to the leading system (or developer) message, or in a new one."""
    msgs = [as_dict(m) for m in messages]
    first = msgs[0] if msgs else None
    if isinstance(first, Mapping) and first.get("role") in ("system", "developer"):
        text = content_text(first.get("content"), "messages[0].content")
        return [{**first, "content": f"{text}\n\n{note}" if text else note}, *msgs[1:]]
    return [{"role": "system", "content": note}, *msgs]
