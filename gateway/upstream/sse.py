"""Relaying an upstream's server-sent events one by one as they arrive, with the model renamed to ours
in every JSON event. Framing is normalised to `\\n` line ends (what OpenAI's clients parse); comments
(`: ping`) pass through so idle proxies on our side stay open too."""

import json
from collections.abc import AsyncIterator


def rename_model(obj: object, name: str) -> bool:
    """Sets `model` to `name` where an OpenAI answer carries it: at the top level (chat and completion
    objects and chunks) and under `response` (the Responses API's streamed events). True if it changed."""
    changed = False
    for holder in (obj, obj.get("response") if isinstance(obj, dict) else None):
        if isinstance(holder, dict) and "model" in holder and holder["model"] != name:
            holder["model"] = name
            changed = True
    return changed


def _renamed_data(data: str, name: str) -> str:
    if data == "[DONE]" or not data.startswith("{"):
        return data
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if not rename_model(obj, name):
        return data  # unchanged events keep the upstream's exact bytes
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _event_bytes(lines: list[str], name: str) -> bytes:
    """One event's lines; its `data:` lines (the payload may span several) joined, renamed and written
    back as one line."""
    out: list[str] = []
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        else:
            out.append(line)
    if data:
        out.append("data: " + _renamed_data("\n".join(data), name).replace("\n", "\ndata: "))
    return ("\n".join(out) + "\n\n").encode()


async def relay_events(lines: AsyncIterator[str], name: str) -> AsyncIterator[bytes]:
    """Events from the upstream's lines (as `httpx.Response.aiter_lines` yields them), each as soon as
    its closing blank line arrives. A trailing event without one is passed on when the body ends."""
    event: list[str] = []
    async for line in lines:
        line = line.rstrip("\r\n")
        if line:
            event.append(line)
        elif event:
            yield _event_bytes(event, name)
            event = []
    if event:
        yield _event_bytes(event, name)
