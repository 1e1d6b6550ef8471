"""Anthropic's Messages API on an embedded engine: the request turned into the chat layer's terms
(engine/chat: system, text, tool_use and tool_result blocks as OpenAI-style messages; tools and tool_choice
grammar-constrained as on /v1/chat/completions), the answer as content blocks, streamed as Anthropic's
event sequence (message_start, content_block_start/delta/stop, message_delta, message_stop)."""

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request, Response
from sse_starlette import ServerSentEvent

from engine import AsyncEngine, SamplingParams
from engine.chat import (
    ChatRequest,
    ContentDelta,
    PreparedChat,
    RepeatWatch,
    ToolCallArguments,
    ToolCallStart,
    finish_reason,
    prepare_chat,
    read_whole,
)
from gateway.protocol.common import random_id
from gateway.protocol.messages import (
    AnthropicUsage,
    CountTokensRequest,
    MessageResponse,
    MessagesRequest,
    error_body,
)
from gateway.serving.generation import Generation
from gateway.state import ServerState
from gateway.web.errors import APIError, as_api_error
from gateway.web.sse import sse_response


def _text(content: str | list[dict[str, Any]], where: str) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for i, block in enumerate(content):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise APIError(400, f"{where}[{i}]: only text blocks are supported here, got {block.get('type')!r}")
        parts.append(block["text"])
    return "\n".join(parts)


def to_chat(body: CountTokensRequest) -> ChatRequest:
    """The request in OpenAI's chat terms (what engine/chat takes)."""
    messages: list[dict[str, Any]] = []
    if body.system:
        messages.append({"role": "system", "content": _text(body.system, "system")})
    for k, m in enumerate(body.messages):
        blocks = [{"type": "text", "text": m.content}] if isinstance(m.content, str) else m.content
        text, calls = [], []
        for i, b in enumerate(blocks):
            kind, where = b.get("type"), f"messages[{k}].content[{i}]"
            if kind == "text":
                text.append(str(b.get("text", "")))
            elif kind == "tool_use" and m.role == "assistant":
                calls.append({"id": b.get("id"), "type": "function", "function": {
                    "name": b.get("name"), "arguments": json.dumps(b.get("input", {}), ensure_ascii=False)}})
            elif kind == "tool_result" and m.role == "user":
                result = b.get("content", "")
                messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                                 "content": _text(result, f"{where}.content") if result else ""})
            else:
                raise APIError(400, f"{where}: a {kind!r} block is not supported in a {m.role} message")
        if m.role == "assistant":
            messages.append({"role": "assistant", "content": "\n".join(text) or None, **({"tool_calls": calls}
                                                                                          if calls else {})})
        elif text:
            messages.append({"role": "user", "content": "\n".join(text)})
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                               "parameters": t.input_schema}} for t in body.tools or []]
    choice, parallel = _tool_choice(body.tool_choice)
    return ChatRequest(messages, tools or None, choice if tools else None, parallel)


def _tool_choice(choice: dict[str, Any] | None) -> tuple[Any, bool | None]:
    if choice is None:
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}, parallel
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if mapped is None:
        raise APIError(400, f"tool_choice.type must be auto, any, tool or none, got {kind!r}")
    return mapped, parallel


def _stop_reason(reason: str | None, stop: str | int | None) -> tuple[str, str | None]:
    if reason == "tool_calls":
        return "tool_use", None
    if reason == "length":
        return "max_tokens", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    return "end_turn", None


def _prepare(body: MessagesRequest, engine: AsyncEngine) -> PreparedChat:
    params = SamplingParams(max_tokens=body.max_tokens, temperature=1.0 if body.temperature is None else
                            body.temperature, top_p=body.top_p or 1.0, top_k=body.top_k or -1,
                            stop=body.stop_sequences or None)
    return prepare_chat(engine.tokenizer, to_chat(body), params)


def count_tokens(body: CountTokensRequest, engine: AsyncEngine) -> int:
    prepared = prepare_chat(engine.tokenizer, to_chat(body), SamplingParams(max_tokens=1))
    return len(engine.tokenizer.encode(prepared.prompt, add_special_tokens=False))


async def run_messages(body: MessagesRequest, state: ServerState, engine: AsyncEngine, model: str,
                       request: Request | None = None) -> MessageResponse | Response:
    prepared = _prepare(body, engine)
    gen = Generation(state, engine, request)
    await gen.start([prepared.prompt], prepared.params)
    if body.stream:
        return sse_response(_stream(gen, prepared, model), gen.close)
    (final,) = await gen.finals(RepeatWatch(gen.stop_choice) if prepared.parses_calls else None)
    o = final.outputs[0]
    content, calls, repeated = read_whole(o.text, prepared.parses_calls, prepared.strips_markup)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)} for c in calls]
    reason, stop = _stop_reason(finish_reason(o.finish_reason, calls, repeated), o.stop_reason)
    return MessageResponse(id=random_id("msg_"), model=model, content=blocks, stop_reason=reason, stop_sequence=stop,
                           usage=AnthropicUsage(input_tokens=len(final.prompt_token_ids),
                                                output_tokens=len(o.token_ids)))


def _event(kind: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(event=kind, data=json.dumps({"type": kind, **data}, ensure_ascii=False))


async def _stream(gen: Generation, prepared: PreparedChat, model: str) -> AsyncIterator[ServerSentEvent]:
    parser = prepared.output_parser()
    index, open_kind = -1, None  # the content block being written

    def close() -> list[ServerSentEvent]:
        return [_event("content_block_stop", index=index)] if open_kind else []

    try:
        started = False
        async for _, out in gen.outputs():
            if not started:
                started = True
                yield _event("message_start", message={
                    "id": random_id("msg_"), "type": "message", "role": "assistant", "content": [], "model": model,
                    "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": len(out.prompt_token_ids), "output_tokens": 0}})
                yield _event("ping")
            o = out.outputs[0]
            for ev in parser.feed(o.delta_text, finished=bool(o.finish_reason)):
                if isinstance(ev, ContentDelta):
                    if open_kind != "text":
                        for e in close():
                            yield e
                        index, open_kind = index + 1, "text"
                        yield _event("content_block_start", index=index, content_block={"type": "text", "text": ""})
                    yield _event("content_block_delta", index=index, delta={"type": "text_delta", "text": ev.text})
                elif isinstance(ev, ToolCallStart):
                    for e in close():
                        yield e
                    index, open_kind = index + 1, "tool_use"
                    yield _event("content_block_start", index=index, content_block={
                        "type": "tool_use", "id": ev.id, "name": ev.name, "input": {}})
                elif isinstance(ev, ToolCallArguments):
                    yield _event("content_block_delta", index=index,
                                 delta={"type": "input_json_delta", "partial_json": ev.delta})
            if parser.ended_by_repeat and not o.finish_reason:
                gen.stop_choice(0, 0)  # a repeated call ends the answer, and its engine sequence
            if o.finish_reason or parser.ended_by_repeat:
                for e in close():
                    yield e
                open_kind = None
                reason, stop = _stop_reason(parser.finish_reason(o.finish_reason), o.stop_reason)
                yield _event("message_delta", delta={"stop_reason": reason, "stop_sequence": stop},
                             usage={"output_tokens": len(o.token_ids)})
                yield _event("message_stop")
                return
    except Exception as exc:  # after the 200: the error as Anthropic's stream sends one
        err = as_api_error(exc)
        yield ServerSentEvent(event="error", data=json.dumps(error_body(err.status, err.message)))
