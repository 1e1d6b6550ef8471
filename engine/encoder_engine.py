"""The engine for encoder models (engine/models/bert.py): embedding models and cross-encoders.

An encoder takes no KV cache and generates nothing, so it does not go through the paged scheduler:
requests queue up, and a worker thread takes the requests waiting, sorts them by length and runs them
in padded batches (at most `max_batch_tokens` padded tokens each), so concurrent requests share forward
passes (dynamic batching). Inputs are tokenized as sentence-transformers does (special tokens added,
truncated to the model's `max_seq_length`); a cross-encoder reads (query, document) pairs.

Priority follows the paged scheduler's rule (engine/scheduler.py): lower runs first, and a request's
effective priority improves by 1 for every `priority_aging_s` seconds it has waited, so none starves.
A round is every request waiting at the best effective priority, run batch by batch; before each batch
the worker looks at what arrived meanwhile, and a request of strictly better effective priority ends
the round there (the rest wait again, keeping their age). So an interactive request waits for one
forward pass, not for a batch job's thousands of inputs; requests of the round's priority that arrive
during it wait for the next round, so a stream of short ones cannot hold back a long one."""

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.encoder_folder import EncoderSpec, read_encoder_spec
from engine.errors import EngineDeadError, InvalidRequestError
from engine.matryoshka import Matryoshka, read_matryoshka
from engine.models.bert import BertEncoder
from engine.models.modernbert import ModernBertEncoder
from engine.models.nomic_bert import NomicBertEncoder
from engine.outputs import RequestMetrics
from engine.pooling import PoolingOutput, PoolingParams, finish_vector, pool_padded

log = logging.getLogger(__name__)

# Each family's forward pass (EncoderConfig.family), one file each under engine/models/.
_MODELS = {"bert": BertEncoder, "roberta": BertEncoder, "modernbert": ModernBertEncoder, "nomic_bert": NomicBertEncoder}
_ACTIVATE = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "identity": lambda x: x}


@dataclass
class _Job:
    ids: list[int]
    type_ids: list[int] | None
    pooling: PoolingParams | None  # None: a cross-encoder score
    priority: int = 0
    arrived: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)


class EncoderEngine:
    model: BertEncoder | ModernBertEncoder | NomicBertEncoder

    def __init__(self, model: str | Path, served_model_name: str | None = None, max_batch_tokens: int = 16384,
                 max_batch_size: int = 128, num_threads: int | None = None, priority_aging_s: float = 10.0,
                 hf_overrides: dict[str, Any] | None = None,
                 run_torch: Callable[[Callable[[], Any]], Future] | None = None):
        """`run_torch`: where this model's torch work runs (its load and forward passes), as
        AsyncEngine.call_soon takes it: a server gives the step thread of the model it serves beside, so
        the process keeps one OpenMP pool; None: this engine's own worker thread."""
        from transformers import AutoTokenizer

        folder = Path(model).expanduser()
        if num_threads:
            torch.set_num_threads(num_threads)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        self.spec: EncoderSpec = read_encoder_spec(folder, tok_max if tok_max and tok_max < 10**6 else None)
        self.served_model_name = served_model_name or folder.name
        self.max_batch_tokens, self.max_batch_size = max_batch_tokens, max_batch_size
        self.priority_aging_s = priority_aging_s
        self.matryoshka: Matryoshka = read_matryoshka(folder, hf_overrides)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.error: BaseException | None = None
        self._run_torch = run_torch
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._pending: list[_Job] = []  # taken off the queue by the worker, in no round yet
        self._round: deque[list[_Job]] = deque()  # the round in progress: its batches not run yet
        self._round_left = 0  # the requests in them
        self._round_priority = 0  # the effective priority the round was formed at
        self._closed = False  # the worker took shutdown's None
        self._counts = {"requests": 0, "batches": 0, "tokens": 0}
        built: Future = Future()
        self._thread = threading.Thread(target=self._start, args=(folder, built), name="sllm-encoder", daemon=True)
        self._thread.start()
        self.model = built.result()  # the load's error, if any, is raised here

    # -- what the gateway reads ------------------------------------------------------------------------
    @property
    def task(self) -> str:
        """"embed" (pooled states) or "score" (a cross-encoder's head)."""
        return self.spec.config.task

    @property
    def hidden_size(self) -> int:
        return self.model.hidden_size

    @property
    def max_model_len(self) -> int:
        return self.spec.max_seq_length

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def stats(self) -> dict[str, Any]:
        # A round's requests wait too until their batch runs: left out, the count fell to 0 as soon as a
        # round took the whole backlog (the /metrics gauge with it) while thousands still waited.
        return {**self._counts, "num_waiting": self._jobs.qsize() + len(self._pending) + self._round_left}

    def list_loras(self) -> list:
        return []

    # -- input -----------------------------------------------------------------------------------------
    def check_request(self, prompt: str | list[int], params: Any = None, priority: int = 0) -> list[int]:
        """Token ids of one input: text tokenized with special tokens and truncated to max_seq_length;
        token ids taken as given, within the vocabulary and the position table."""
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt, truncation=True, max_length=self.max_model_len)["input_ids"]
        else:
            ids = list(prompt)
            vocab = self.spec.config.vocab_size
            if not ids or any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
                raise InvalidRequestError(f"token ids must be in [0, {vocab})", "input")
            if len(ids) > self.spec.config.max_positions:
                raise InvalidRequestError(f"{len(ids)} tokens; this model reads at most "
                                          f"{self.spec.config.max_positions}", "input")
        if not ids:
            raise InvalidRequestError("the input is empty", "input")
        return ids

    def check_pair(self, query: str, document: str) -> tuple[list[int], list[int]]:
        """A cross-encoder's input: the pair as its tokenizer joins them, truncated longest first."""
        enc = self.tokenizer(query, document, truncation=True, max_length=self.max_model_len)
        return enc["input_ids"], enc.get("token_type_ids") or [0] * len(enc["input_ids"])

    # -- requests --------------------------------------------------------------------------------------
    def _submit(self, job: _Job) -> Future:
        if not self.is_running:
            raise EngineDeadError(f"the encoder has stopped: {self.error}")
        self._jobs.put(job)
        return job.future

    async def embed(self, prompt: str | list[int], pooling: PoolingParams, request_id: str | None = None,
                    priority: int = 0, fairness_key: Hashable | None = None) -> PoolingOutput:
        """One input's pooled vector, run by `priority` (lower first; `fairness_key` is accepted for the
        AsyncEngine's signature: a round takes every key's requests at once)."""
        ids = prompt if isinstance(prompt, list) else self.check_request(prompt)
        if self.task != "embed":
            raise InvalidRequestError(f"{self.served_model_name} is a cross-encoder: it scores pairs", "model")
        arrived = time.time()
        vector = await asyncio.wrap_future(self._submit(_Job(ids, None, pooling, priority)))
        metrics = RequestMetrics(arrival_time=arrived, finished_time=time.time(), prompt_tokens=len(ids))
        return PoolingOutput(request_id or "", ids, vector, metrics)

    async def score(self, ids: list[int], type_ids: list[int], priority: int = 0) -> float:
        """A cross-encoder's relevance score of one tokenized pair (check_pair), activation applied."""
        assert self.task == "score", "scores come from cross-encoders"
        return await asyncio.wrap_future(self._submit(_Job(ids, type_ids, None, priority)))

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)
        if self.error is None:
            self.error = EngineDeadError("the encoder was shut down")

    # -- the worker thread ------------------------------------------------------------------------------
    def _start(self, folder: Path, built: Future) -> None:
        """Loads the weights on the thread that does all of this model's torch work: the worker, or the
        one `run_torch` names (libgomp gives every thread that opens parallel regions a pool of its own)."""
        try:
            self.model = self._torch(lambda: _MODELS[self.spec.config.family].from_folder(folder))
        except BaseException as exc:
            built.set_exception(exc)
            return
        built.set_result(self.model)
        self._loop()

    def _effective(self, job: _Job, now: float) -> int:
        if self.priority_aging_s <= 0:
            return job.priority
        return job.priority - int((now - job.arrived) // self.priority_aging_s)

    def _take_waiting(self, block: bool) -> list[_Job]:
        """Moves the queued requests to `_pending` (waiting for one when `block`) and returns them; notes
        a shutdown."""
        taken: list[_Job] = []
        try:
            job = self._jobs.get() if block else self._jobs.get_nowait()
            while job is not None:
                taken.append(job)
                self._pending.append(job)
                job = self._jobs.get_nowait()
            self._closed = True
        except queue.Empty:
            pass
        return taken

    def _start_round(self) -> None:
        now = time.monotonic()
        waiting = [(self._effective(j, now), j) for j in self._pending]
        best = min(e for e, _ in waiting)
        round_ = [j for e, j in waiting if e == best]
        self._round, self._round_left, self._round_priority = deque(self._batches(round_)), len(round_), best
        self._pending = [j for e, j in waiting if e != best]

    def _end_round(self) -> None:
        """The round's requests not run yet wait again (keeping their age)."""
        self._pending.extend(j for batch in self._round for j in batch)
        self._round.clear()
        self._round_left = 0

    def _overtakes(self, arrived: list[_Job]) -> bool:
        """Whether a request that arrived during the round has a strictly better effective priority than
        every request the round has left. Arrivals are looked at once, as they come: a request waiting when
        the round began was worse than all of it and ages no faster, so it never gets ahead. Every request
        of the round stays at or better than the priority the round began at, so the round is scanned only
        for an arrival better than that (an interactive request), not before every batch: that scan made
        a round of n requests O(n^2), seconds of the GIL for a batch job's backlog."""
        now = time.monotonic()
        best = min(self._effective(j, now) for j in arrived)
        return best < self._round_priority and best < min(self._effective(j, now)
                                                           for batch in self._round for j in batch)

    def _loop(self) -> None:
        while True:
            if not self._closed:
                arrived = self._take_waiting(block=not (self._pending or self._round))
                if arrived and self._round and self._overtakes(arrived):
                    self._end_round()  # the better request runs first, in a round of its own
            if self._closed:
                break
            if not self._round:
                self._start_round()
            batch = self._round.popleft()
            self._round_left -= len(batch)
            try:
                self._run(batch)
            except BaseException as exc:  # a bug: fail these requests, keep serving the next ones
                log.exception("encoder batch failed")
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(exc)
        self._end_round()
        for j in self._pending:
            if j.future.set_running_or_notify_cancel():
                j.future.set_exception(EngineDeadError("the encoder was shut down"))

    def _batches(self, jobs: list[_Job]) -> list[list[_Job]]:
        batches: list[list[_Job]] = []
        current: list[_Job] = []
        for job in sorted(jobs, key=lambda j: len(j.ids)):
            width = len(job.ids)  # sorted: the longest so far
            if current and (width * (len(current) + 1) > self.max_batch_tokens or len(current) >= self.max_batch_size):
                batches.append(current)
                current = []
            current.append(job)
        if current:
            batches.append(current)
        return batches

    def _run(self, batch: list[_Job]) -> None:
        # A request whose caller went away (its future cancelled) is dropped here; the others can no longer
        # be cancelled, so setting their results cannot fail.
        batch = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not batch:
            return
        for j, result in zip(batch, self._torch(lambda: self._forward(batch)), strict=True):
            j.future.set_result(result)

    def _torch(self, fn: Callable[[], Any]) -> Any:
        return fn() if self._run_torch is None else self._run_torch(fn).result()

    def _forward(self, batch: list[_Job]) -> list:
        """The batch's scores or vectors, in its order: all of its torch work."""
        width = max(len(j.ids) for j in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        types = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, j in enumerate(batch):
            ids[i, : len(j.ids)] = torch.tensor(j.ids)
            mask[i, : len(j.ids)] = 1
            if j.type_ids is not None:
                types[i, : len(j.ids)] = torch.tensor(j.type_ids)
        states = self.model.forward(ids, mask, types)
        self._counts["batches"] += 1
        self._counts["requests"] += len(batch)
        self._counts["tokens"] += int(mask.sum())
        if batch[0].pooling is None:  # a batch is all scores or all vectors: the two never share a model
            return _ACTIVATE[self.spec.activation](self.model.classify(states, mask)[:, 0].float()).tolist()
        pooled = {kind: pool_padded(states, mask, kind) for kind in {j.pooling.pooling for j in batch if j.pooling}}
        return [finish_vector(pooled[j.pooling.pooling][i].float(), j.pooling).clone()
                for i, j in enumerate(batch)]
