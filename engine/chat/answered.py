"""Tool calls whose results are already in the conversation, as texts the next answer is steered off
(issue 17, case 3: an agent calling the same tool with the same arguments turn after turn). Opt-in
(`ChatRequest.avoid_repeated_calls`); the engine leaves such a text at its last structural choice
(engine/avoid_texts.py), so the model answers or calls another tool instead.

The text is the call's head, up to its arguments: the exact call cannot be steered off where it
matters. The grammar forces a call's last characters, and the choices inside its arguments are
the values themselves: leaving the path there made the default model call `get_weather` with
`{"city": "<city_name>"}` instead of `{"city": "Seoul"}`, a worse call, not an answer. So with the
steering on, a tool whose call was answered is not called again where the grammar offers something
else at the call's start (the formatted answer, another tool); where it offers nothing else
(`required` with that one tool, or free text under `auto`) the model is left alone."""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from engine.chat.tool_formats import HERMES, ToolFormat
from engine.chat.tools import as_dict


def answered_calls(messages: Sequence[Any]) -> list[tuple[str, Any]]:
    """(name, parsed arguments) of the assistant calls that a later `tool` message answers (by
    `tool_call_id`; a call without an id counts once any tool result follows it)."""
    msgs = [as_dict(m) for m in messages]
    answered_ids = {m.get("tool_call_id") for m in msgs if isinstance(m, Mapping) and m.get("role") == "tool"}
    out: list[tuple[str, Any]] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping) or m.get("role") != "assistant":
            continue
        later_result = any(isinstance(n, Mapping) and n.get("role") == "tool" for n in msgs[i + 1:])
        for raw in m.get("tool_calls") or []:
            call = as_dict(raw)
            fn = call.get("function", call) if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                continue
            call_id = call.get("id")
            if not (call_id in answered_ids if call_id else later_result):
                continue
            args = fn.get("arguments") or "{}"
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                continue  # not something the grammar could write again as it is
            if (fn["name"], parsed) not in out:
                out.append((fn["name"], parsed))
    return out


def repeated_call_texts(messages: Sequence[Any], fmt: ToolFormat = HERMES) -> list[str]:
    """The answered calls' heads as the grammar writes them in `fmt`, up to their arguments, once per tool."""
    heads = []
    for name, _ in answered_calls(messages):
        head = fmt.begin(name)
        if head not in heads:
            heads.append(head)
    return heads
