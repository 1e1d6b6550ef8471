"""The engine for servers: requests stream their outputs to asyncio while steps run on a thread.

The step loop lives on its own thread so the event loop stays responsive while the engine is
saturated (torch releases the GIL inside its kernels). Requests cross over through a command queue;
outputs come back through one asyncio.Queue per request, fed with call_soon_threadsafe."""

import asyncio
import functools
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Hashable
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

from engine.config import EngineConfig
from engine.errors import EngineDeadError
from engine.llm_engine import LLMEngine
from engine.lora import LoRARequest
from engine.matryoshka import Matryoshka, read_matryoshka
from engine.outputs import EngineStats, RequestOutput
from engine.pooling import PoolingOutput, PoolingParams
from engine.sampling_params import SamplingParams

log = logging.getLogger(__name__)


# -- messages to the step thread --------------------------------------------------------------------
@dataclass(frozen=True)
class AddRequest:
    request_id: str
    prompt: str | list[int]
    params: SamplingParams
    priority: int
    fairness_key: Hashable | None
    lora_request: LoRARequest | str | None
    pooling: PoolingParams | None = None


@dataclass(frozen=True)
class AbortRequest:
    request_id: str


@dataclass(frozen=True)
class StopSequence:
    request_id: str
    index: int


@dataclass(frozen=True)
class Call:
    """Engine state the step thread owns (LoRA adapters), changed between two steps."""

    fn: Callable[[], Any]
    future: Future


Command = AddRequest | AbortRequest | StopSequence | Call


class AsyncEngine:
    def __init__(self, config: EngineConfig | None = None, engine: LLMEngine | None = None, **kwargs):
        config = None if engine is not None else config or EngineConfig(**kwargs)
        self._commands: queue.Queue[Command] = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self.error: BaseException | None = None
        self._stats = EngineStats()  # replaced whole by the step thread, never changed in place
        built: Future[LLMEngine] = Future()
        self._thread = threading.Thread(target=self._run, args=(engine, config, built), name="sllm-engine",
                                        daemon=True)
        self._thread.start()
        self.engine = built.result()  # the constructor's error, if any, is raised here

    # -- properties the gateway reads ---------------------------------------------------------
    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def chat_options(self):
        """engine.chat.ChatOptions: the served model's tool-call and reasoning formats, thinking budget."""
        return self.engine.chat_options

    @property
    def sampling_defaults(self) -> dict:
        """The model card's sampling values for fields a request leaves out (engine/generation_config.py)."""
        return self.engine.sampling_defaults

    @property
    def served_model_name(self) -> str:
        return self.engine.served_model_name

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def hidden_size(self) -> int:
        """The width of the final hidden states an embedding request pools."""
        return self.engine.runner.model.hidden_size

    @functools.cached_property
    def matryoshka(self) -> Matryoshka:
        """Whether `dimensions` may shorten this model's embeddings, and to which sizes."""
        return read_matryoshka(self.engine.model_path, self.engine.config.hf_overrides)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def check_request(self, prompt: str | list[int], params: SamplingParams, priority: int = 0) -> list[int]:
        """LLMEngine.check_request on the caller's thread: bad input is refused before it is queued;
        submit the returned token ids."""
        return self.engine.check_request(prompt, params, priority)

    def stats(self) -> dict[str, Any]:
        """The counters as of the last step (EngineStats), as a dict for the metrics endpoint."""
        return asdict(self._stats)

    # -- the step thread -------------------------------------------------------------------------
    def _deliver(self, request_id: str, item: RequestOutput | BaseException, last: bool) -> None:
        with self._lock:
            entry = self._streams.pop(request_id, None) if last else self._streams.get(request_id)
        if entry is not None:
            loop, q = entry
            loop.call_soon_threadsafe(q.put_nowait, item)

    def _drain_commands(self) -> bool:
        """Applies the queued commands; True when there was any."""
        drained = False
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return drained
            drained = True
            match cmd:
                case AddRequest():
                    try:
                        self.engine.add_request(cmd.request_id, cmd.prompt, cmd.params, priority=cmd.priority,
                                                fairness_key=cmd.fairness_key, lora_request=cmd.lora_request,
                                                pooling=cmd.pooling)
                    except Exception as exc:  # bad input: reported to that request only
                        self._deliver(cmd.request_id, exc, last=True)
                case Call():
                    try:
                        cmd.future.set_result(cmd.fn())
                    except Exception as exc:
                        cmd.future.set_exception(exc)
                case AbortRequest():
                    out = self.engine.abort_request(cmd.request_id)
                    if out is not None:
                        self._deliver(cmd.request_id, out, last=True)
                case StopSequence():
                    out = self.engine.stop_sequence(cmd.request_id, cmd.index)
                    if out is not None:
                        self._deliver(cmd.request_id, out, last=out.finished)

    def _run(self, engine: LLMEngine | None, config: EngineConfig | None, built: Future) -> None:
        """Builds the engine on the step thread, so that one thread does all of its torch work. With
        libgomp, every thread that opens OpenMP regions gets its own worker pool; once two pools exist
        (loading on one thread, stepping on another) it counts more threads than cores and makes workers
        sleep instead of spin, and each parallel region then waits for a wake-up: the default model's
        decode step measured 37 ms against 25 ms on one thread, on 2 cores."""
        try:
            engine = engine or LLMEngine(config)
        except BaseException as exc:
            built.set_exception(exc)
            return
        self.engine = engine
        self._stats = engine.snapshot_stats()
        built.set_result(engine)
        self._loop()

    def _loop(self) -> None:
        try:
            while not self._stop:
                if self._drain_commands():  # otherwise the last step's snapshot still holds
                    self._stats = self.engine.snapshot_stats()
                if not self.engine.has_unfinished_requests():
                    self._wake.wait(timeout=0.5)
                    self._wake.clear()
                    continue
                outputs = self.engine.step()
                self._stats = self.engine.snapshot_stats()
                if not outputs and not self._stats.num_running:
                    self._wake.wait(timeout=0.002)  # dynamic batching window, nothing runnable yet
                    self._wake.clear()
                for out in outputs:
                    self._deliver(out.request_id, out, last=out.finished)
        except BaseException as exc:  # an engine bug: fail every request rather than hang them
            log.exception("engine step loop died")
            self.error = exc
            self._fail_calls()
            with self._lock:
                streams, self._streams = self._streams, {}
            for loop, q in streams.values():
                loop.call_soon_threadsafe(q.put_nowait, EngineDeadError(str(exc)))

    # -- the asyncio side ------------------------------------------------------------------------
    async def generate(
        self, prompt: str | list[int], params: SamplingParams | None = None, request_id: str | None = None,
        priority: int = 0, fairness_key: Hashable | None = None, lora_request: LoRARequest | str | None = None,
        pooling: PoolingParams | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Streams the request's outputs; the last one has `finished` set. Cancelling the consumer
        (a client that disconnects) aborts the request and frees its KV blocks. `priority`,
        `fairness_key`, `lora_request` and `pooling` as LLMEngine.add_request takes them (an embedding
        request's one output is a PoolingOutput)."""
        if self.error is not None:
            raise EngineDeadError(f"the engine has stopped: {self.error}")
        request_id = request_id or uuid.uuid4().hex
        q: asyncio.Queue = asyncio.Queue()
        with self._lock:
            self._streams[request_id] = (asyncio.get_running_loop(), q)
        self._commands.put(AddRequest(request_id, prompt, params or SamplingParams(), priority, fairness_key,
                                      lora_request, pooling))
        self._wake.set()
        finished = False
        try:
            while True:
                item = await q.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                # Coalesce outputs that piled up while the consumer was busy: the latest holds everything.
                while not item.finished and not q.empty():
                    nxt = q.get_nowait()
                    if isinstance(nxt, BaseException):
                        finished = True
                        raise nxt
                    item = _merge(item, nxt)
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        self._commands.put(AbortRequest(request_id))
        self._wake.set()

    def stop_sequence(self, request_id: str, index: int = 0) -> None:
        """Ends sample `index` of a request between two steps (LLMEngine.stop_sequence): its stream
        then ends, or for n > 1 goes on with the other samples."""
        self._commands.put(StopSequence(request_id, index))
        self._wake.set()

    async def generate_full(self, prompt, params=None, request_id=None, priority: int = 0,
                            fairness_key: Hashable | None = None,
                            lora_request: LoRARequest | str | None = None) -> RequestOutput:
        last = None
        async for out in self.generate(prompt, params, request_id, priority, fairness_key, lora_request):
            last = out
        assert last is not None
        return last

    async def embed(self, prompt: str | list[int], pooling: PoolingParams, request_id: str | None = None,
                    priority: int = 0, fairness_key: Hashable | None = None) -> PoolingOutput:
        """An embedding request (engine/pooling.py): its prompt's pooled final hidden states."""
        last = None
        async for out in self.generate(prompt, None, request_id, priority, fairness_key, pooling=pooling):
            last = out
        assert isinstance(last, PoolingOutput), last
        return last

    def call_soon(self, fn: Callable[[], Any]) -> Future:
        """Runs fn on the step thread between two steps; its future. Other models of the process (an
        EncoderEngine) do their torch work here: every thread that opens OpenMP regions gets a libgomp
        pool of its own, and with a second pool libgomp counts more threads than cores and makes the
        workers sleep at every parallel region (see _run). Served beside the bundled embedding model's
        own thread, the default model's 32-stream throughput was 223-261 tok/s against 273-308 without
        it (2 cores, AMD EPYC)."""
        if self.error is not None:
            raise EngineDeadError(f"the engine has stopped: {self.error}")
        fut: Future = Future()
        self._commands.put(Call(fn, fut))
        self._wake.set()
        return fut

    async def _call(self, fn):
        """Runs fn on the step thread between two steps; returns its result or raises its error."""
        return await asyncio.wrap_future(self.call_soon(fn))

    def _fail_calls(self) -> None:
        """Calls still queued when the step thread is gone get its error instead of waiting forever."""
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(cmd, Call) and not cmd.future.done():
                cmd.future.set_exception(EngineDeadError(f"the engine has stopped: {self.error}"))

    async def add_lora(self, name: str, path: str) -> LoRARequest:
        return await self._call(lambda: self.engine.add_lora(name, path))

    async def remove_lora(self, name: str) -> None:
        await self._call(lambda: self.engine.remove_lora(name))

    def list_loras(self) -> list[LoRARequest]:
        return self.engine.list_loras()

    def shutdown(self) -> None:
        """Stops the step thread; requests still streaming get EngineDeadError instead of hanging."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        if self.error is None:
            self.error = EngineDeadError("the engine was shut down")
        self._fail_calls()
        with self._lock:
            streams, self._streams = self._streams, {}
        for loop, q in streams.values():
            if not loop.is_closed():
                loop.call_soon_threadsafe(q.put_nowait, EngineDeadError("the engine was shut down"))


def _merge(a: RequestOutput, b: RequestOutput) -> RequestOutput:
    """Joins two consecutive outputs of one request so no delta is lost when they are coalesced."""
    by_index = {o.index: o for o in a.outputs}
    for o in b.outputs:
        prev = by_index.get(o.index)
        if prev is not None:
            o.delta_text = prev.delta_text + o.delta_text
            o.delta_token_ids = prev.delta_token_ids + o.delta_token_ids
            if o.delta_logprobs is not None and prev.delta_logprobs is not None:
                o.delta_logprobs = prev.delta_logprobs + o.delta_logprobs
    missing = [o for i, o in by_index.items() if i not in {x.index for x in b.outputs}]
    b.outputs = sorted(b.outputs + missing, key=lambda o: o.index)
    return b
