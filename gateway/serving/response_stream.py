"""The Responses API's SSE events: output items (a message, function calls) as they stream, and
the lifecycle around them (`response.created` ... `response.completed`)."""

from collections.abc import AsyncIterator

from sse_starlette import ServerSentEvent

from engine import RequestOutput
from engine.chat import (
    ContentDelta,
    PreparedChat,
    ReasoningDelta,
    ToolCallStart,
)
from gateway.limits.usage import usage_of
from gateway.protocol.responses import (
    ContentPartEvent,
    ErrorEvent,
    Event,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    FunctionCallItem,
    IncompleteDetails,
    OutputItem,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseLifecycleEvent,
    ResponseObject,
    ResponseUsage,
    TextDeltaEvent,
    TextDoneEvent,
)
from gateway.serving.conversations import store
from gateway.serving.generation import Generation
from gateway.state import ServerState
from gateway.web.errors import as_api_error


class StreamedItems:
    """Output items as they stream: a message opened at the first text (or at once, without tools),
    a `function_call` item per call with its arguments as deltas, each closed when the next opens
    or the output ends."""

    def __init__(self) -> None:
        self.items: list[OutputItem] = []
        self._open: OutputItem | None = None
        self._text: list[str] = []

    @property
    def _index(self) -> int:
        return len(self.items) - 1

    def open_message(self) -> list[Event]:
        message = OutputMessage()
        self.items.append(message)
        self._open, self._text = message, []
        return [OutputItemEvent(type="response.output_item.added", output_index=self._index, item=message),
                ContentPartEvent(type="response.content_part.added", item_id=message.id, output_index=self._index,
                                 part=OutputText())]

    def text(self, delta: str) -> list[Event]:
        events = [] if isinstance(self._open, OutputMessage) else self._close("completed") + self.open_message()
        self._text.append(delta)
        assert self._open is not None
        return events + [TextDeltaEvent(item_id=self._open.id, output_index=self._index, delta=delta)]

    def feed(self, ev) -> list[Event]:
        """One parser event (engine/chat/parser.py) to stream events."""
        if isinstance(ev, ContentDelta):
            return self.text(ev.text)
        if isinstance(ev, ReasoningDelta):  # the thinking comes first: one reasoning item, closed by what follows
            if isinstance(self._open, ReasoningItem):
                self._text.append(ev.text)
                return []
            item = ReasoningItem(status="in_progress")
            self.items.append(item)
            self._open, self._text = item, [ev.text]
            return [OutputItemEvent(type="response.output_item.added", output_index=self._index, item=item)]
        if isinstance(ev, ToolCallStart):
            events = self._close("completed")
            call = FunctionCallItem(call_id=ev.id, name=ev.name, status="in_progress")
            self.items.append(call)
            self._open = call
            return events + [OutputItemEvent(type="response.output_item.added", output_index=self._index, item=call)]
        call = self._open
        assert isinstance(call, FunctionCallItem)
        call.arguments += ev.delta
        return [FunctionCallArgumentsDeltaEvent(item_id=call.id, output_index=self._index, delta=ev.delta)]

    def finish(self, truncated: bool) -> list[Event]:
        events = [] if self.items else self.open_message()  # an empty answer is still one message
        # A function call is streamed only once complete, so only a message can be cut.
        cut = truncated and isinstance(self._open, OutputMessage)
        return events + self._close("incomplete" if cut else "completed")

    def _close(self, status) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        item.status = status
        done = OutputItemEvent(type="response.output_item.done", output_index=self._index, item=item)
        if isinstance(item, FunctionCallItem):
            return [FunctionCallArgumentsDoneEvent(item_id=item.id, output_index=self._index, name=item.name,
                                                   arguments=item.arguments), done]
        if isinstance(item, ReasoningItem):
            item.content = [ReasoningText(text="".join(self._text))]
            return [done]
        part = OutputText(text="".join(self._text))
        item.content = [part]
        return [TextDoneEvent(item_id=item.id, output_index=self._index, text=part.text),
                ContentPartEvent(type="response.content_part.done", item_id=item.id, output_index=self._index,
                                 part=part), done]


async def stream_response(state: ServerState, gen: Generation, resp: ResponseObject, conversation: list[dict],
                  prepared: PreparedChat, owner: str) -> AsyncIterator[ServerSentEvent]:
    seq = 0

    def event(e: Event) -> ServerSentEvent:
        nonlocal seq
        e.sequence_number = seq
        seq += 1
        return ServerSentEvent(data=e.model_dump_json(), event=e.type)

    items = StreamedItems()
    parser = prepared.output_parser()
    yield event(ResponseLifecycleEvent(type="response.created", response=resp))
    yield event(ResponseLifecycleEvent(type="response.in_progress", response=resp))
    try:
        if not parser.parses_calls and prepared.thinking == "off":  # one message, open from the start
            for e in items.open_message():
                yield event(e)
        final = None
        async for _, out in gen.outputs():
            repeated_before = parser.ended_by_repeat
            for ev in parser.feed(out.outputs[0].delta_text, finished=out.finished):
                for e in items.feed(ev):
                    yield event(e)
            if parser.ended_by_repeat and not repeated_before and not out.finished:
                gen.stop_choice(0, 0)  # the rest would be dropped: end the engine's work here
            final = out
        assert final is not None and final.finished
        repeated = parser.ended_by_repeat
        for e in items.finish(final.outputs[0].finish_reason == "length" and not repeated):
            yield event(e)
        finish_response(resp, final, items.items, repeated)
        await store(state, resp, conversation, owner)
        # Always `response.completed` (a truncated answer says status "incomplete" inside it): the SDKs'
        # stream helpers and LangChain wait for that event to close the stream.
        yield event(ResponseLifecycleEvent(type="response.completed", response=resp))
    except Exception as exc:
        err = as_api_error(exc)
        resp.status = "failed"
        resp.error = {"code": err.code or err.info.type, "message": err.message}
        yield event(ErrorEvent(code=err.code or err.info.type, message=err.message, param=err.param))
        yield event(ResponseLifecycleEvent(type="response.failed", response=resp))


def finish_response(resp: ResponseObject, final: RequestOutput, items: list[OutputItem],
                    repeated: bool = False) -> None:
    """`items`: the output split into a message and function calls. `repeated`: a repeated call
    ended the answer, so a `length` finish cut nothing that is returned."""
    o = final.outputs[0]
    truncated = o.finish_reason == "length" and not repeated
    for item in items:
        item.status = "completed"
    # Only a message can be cut: a function call is returned only when its arguments are complete.
    if not items or not isinstance(items[-1], OutputMessage | FunctionCallItem):  # thinking and no answer
        items.append(OutputMessage(content=[OutputText()]))
    if isinstance(items[-1], OutputMessage):
        items[-1].status = "incomplete" if truncated else "completed"
    resp.status = "incomplete" if truncated else "completed"
    resp.incomplete_details = IncompleteDetails(reason="max_output_tokens") if truncated else None
    resp.output = items
    u = usage_of([final])
    resp.usage = ResponseUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                               total_tokens=u.total_tokens)
    resp.usage.input_tokens_details.cached_tokens = u.prompt_tokens_details.cached_tokens
