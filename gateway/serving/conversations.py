"""The Responses API's conversation store: a stored response keeps its conversation (chat messages,
its calls and their results included), so `previous_response_id` continues it in one lookup."""

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.chat import content_text
from gateway.jobs import webhooks
from gateway.protocol.responses import (
    FunctionCallItem,
    InputItem,
    ResponseObject,
)
from gateway.security.tenancy import Caller
from gateway.state import ServerState
from gateway.tables.responses import StoredResponse
from gateway.web.errors import APIError


def input_messages(items: str | list[InputItem]) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict] = []
    for i, item in enumerate(items):
        if item.type == "function_call":
            if not item.call_id or not item.name:
                raise APIError(400, f"input[{i}]: a function_call item needs call_id and name", param=f"input[{i}]")
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one assistant turn: its text, then its calls
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            continue
        if item.type == "reasoning":  # past thinking: chat templates leave it out of earlier turns
            continue
        if item.type == "function_call_output":
            if not item.call_id:
                raise APIError(400, f"input[{i}]: a function_call_output item needs call_id",
                               param=f"input[{i}].call_id")
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": content_text(item.output, f"input[{i}].output")})
            continue
        if item.type != "message" or item.role is None:
            raise APIError(400, f"input[{i}]: items of type {item.type!r} are not supported yet",
                           param=f"input[{i}]", code="unsupported_parameter")
        messages.append({"role": item.role, "content": content_text(item.content, f"input[{i}].content")})
    return messages


async def previous_conversation(session: AsyncSession, response_id: str | None, caller: Caller) -> list[dict]:
    """The conversation a response continues: the caller's own responses only (another key's id is
    refused as an unknown one, so a conversation never reaches past the key that had it)."""
    if response_id is None:
        return []
    stored = await session.get(StoredResponse, response_id)
    if stored is None or not caller.sees(stored):
        raise APIError(400, f"Previous response with id '{response_id}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    if stored.status not in ("completed", "incomplete"):  # a background response not done (or failed)
        raise APIError(400, f"Previous response with id '{response_id}' is {stored.status}: only a finished "
                       "response can be continued.", param="previous_response_id", code="previous_response_not_ready")
    conversation = list(stored.conversation)
    # End the read: the session's pooled connection must not stay held while the answer generates
    # (more such requests than the pool's connections, interactive or jobs, would starve the rest).
    await session.commit()
    return conversation


# A background response still to be finished (queued, or running on some replica).
ACTIVE = ("queued", "in_progress")


async def finish(session: AsyncSession, resp: ResponseObject, conversation: list[dict] | None) -> bool:
    """Stores a background response's final state, and queues its webhook, in the caller's
    transaction, unless it was cancelled or deleted meanwhile (then False, nothing changes)."""
    values = {"status": resp.status, "body": resp.model_dump(mode="json")}
    if conversation is not None:
        values["conversation"] = conversation
    result = await session.execute(update(StoredResponse).where(
        StoredResponse.id == resp.id, StoredResponse.status.in_(ACTIVE)).values(**values))
    if result.rowcount:
        webhooks.enqueue(session, resp.metadata.get(webhooks.WEBHOOK_URL_KEY), f"response.{resp.status}", resp.id)
    return bool(result.rowcount)


async def store(state: ServerState, resp: ResponseObject, conversation: list[dict], owner: str) -> None:
    """Stores a finished response as `owner`'s (a background one's row has its owner since it was queued)."""
    if not resp.store:
        return
    conversation = conversation + [assistant_turn(resp)]
    async with state.db.sessions() as session:
        if resp.background:  # its row exists since it was queued; unless cancelled meanwhile, it ends here
            await finish(session, resp, conversation)
        else:
            session.add(StoredResponse(id=resp.id, model=resp.model, status=resp.status,
                                       previous_response_id=resp.previous_response_id,
                                       conversation=conversation, body=resp.model_dump(mode="json"),
                                       created_by=owner))
        await session.commit()


def assistant_turn(resp: ResponseObject) -> dict:
    """The response as a chat message of the stored conversation, its calls included."""
    turn: dict = {"role": "assistant", "content": resp.output_text}
    calls = [{"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
             for item in resp.output if isinstance(item, FunctionCallItem)]
    if calls:
        turn["tool_calls"] = calls
    return turn


def as_input_items(conversation: list[dict]) -> list[dict]:
    """A stored conversation (chat messages) as Responses input items, for a server that never saw it."""
    items: list[dict] = []
    for m in conversation:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m["content"]})
            continue
        if m.get("content") or not m.get("tool_calls"):
            items.append({"role": m["role"], "content": m.get("content") or ""})
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            items.append({"type": "function_call", "call_id": call["id"], "name": fn["name"],
                          "arguments": fn["arguments"]})
    return items
