"""In-process engines shared by every ChatSLLM, and a private event loop for the sync API.

Loading a model takes seconds and its KV cache hundreds of MB, so there is one AsyncEngine per
distinct engine configuration, however many ChatSLLM objects (bound, copied, with other sampling
settings) point at it. Continuous batching then serves them all together.

LangChain's sync methods (`invoke`, `stream`) may be called from a thread that already runs an event
loop (Jupyter, an async app calling sync code), where `asyncio.run` is refused; they run the engine's
async generators on one private loop thread instead."""

import asyncio
import json
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from engine import AsyncEngine, EngineConfig

T = TypeVar("T")

_engines: dict[str, AsyncEngine] = {}
_engines_lock = threading.Lock()


def engine_key(model: str, config: dict[str, Any]) -> str:
    return json.dumps({"model": model, **config}, sort_keys=True, default=str)


def shared_engine(model: str, config: dict[str, Any] | None = None) -> AsyncEngine:
    """The engine for this model and configuration, loaded on first use. A dead engine (its step
    loop crashed) is replaced rather than handed out again."""
    config = dict(config or {})
    key = engine_key(model, config)
    with _engines_lock:
        eng = _engines.get(key)
        if eng is None or not eng.is_running:
            eng = AsyncEngine(EngineConfig(model=model, **config))
            _engines[key] = eng
        return eng


def shutdown_engines() -> None:
    """Stops every shared engine (tests, or an application that wants its memory back)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for eng in engines:
        eng.shutdown()


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sllm-langchain-loop", daemon=True)
        self.thread.start()


_loop: _LoopThread | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = _LoopThread()
        return _loop.loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine on the private loop and waits for it from this (any) thread."""
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()


def iterate_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterates an async generator from sync code. Stopping early (the consumer breaks out of the
    loop) cancels the producer, and cancelling an engine stream aborts its request."""
    items: queue.Queue = queue.Queue()
    done = object()

    async def pump() -> None:
        try:
            async for item in agen:
                items.put((item, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            items.put((done, exc))
        else:
            items.put((done, None))

    future = asyncio.run_coroutine_threadsafe(pump(), _background_loop())
    try:
        while True:
            item, exc = items.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        if not future.done():
            future.cancel()
