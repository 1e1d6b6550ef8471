"""The synchronous engine: requests in, one scheduled forward pass per `step()`, outputs out."""

import logging
import threading
import time
from collections.abc import Hashable

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.input_check import RequestLimits, check_priority
from engine.loader import default_served_name, load_model_config, load_tokenizer, resolve_model
from engine.lora import LoRARequest
from engine.model_runner import ModelRunner
from engine.output_processor import OutputProcessor, Request
from engine.outputs import EngineStats, RequestMetrics, RequestOutput
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import SampledSeq, Scheduler, SchedulerOutput
from engine.sequence import Sequence

log = logging.getLogger(__name__)

MAX_DEFAULT_MODEL_LEN = 8192


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, **kwargs):
        config = config or EngineConfig(**kwargs)
        self.config = config
        t0 = time.perf_counter()
        self.model_path = resolve_model(config.model)
        self.served_model_name = config.served_model_name or default_served_name(config.model)
        self.model_config = load_model_config(self.model_path)
        self.tokenizer = load_tokenizer(self.model_path)
        limit = self.model_config.max_position_embeddings
        self.max_model_len = config.max_model_len or min(limit, MAX_DEFAULT_MODEL_LEN)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        torch.manual_seed(config.seed)
        self.runner = ModelRunner(config, self.model_config, self.model_path, self.max_model_len)
        self.scheduler = Scheduler(config, self.runner.num_blocks)
        self.eos_token_ids = self._eos_ids()
        self.sampler = Sampler(self.tokenizer, self.eos_token_ids)
        self.vocab_size = self.runner.model.vocab_size
        self.limits = RequestLimits(self.vocab_size, self.max_model_len, config.block_size, self.runner.num_blocks)
        self.processor = OutputProcessor(self.tokenizer, self.eos_token_ids, self.max_model_len)
        self.guided = None  # engine.guided.GuidedDecoding, built on the first constrained request
        self._guided_lock = threading.Lock()  # check_request compiles on the caller's thread
        self.speculator = None
        if config.speculative_config:
            from engine.speculative import SpeculativeConfig, Speculator

            spec = SpeculativeConfig.parse(config.speculative_config)
            self.speculator = Speculator(spec, config, self.tokenizer, self.max_model_len)
        for name, path in (config.lora_modules or {}).items():
            self.add_lora(name, path)
        self.load_seconds = time.perf_counter() - t0
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "steps": 0}
        log.info("loaded %s from %s in %.2fs", self.served_model_name, self.model_path, self.load_seconds)

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self.model_config.eos_token_id, getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, list | tuple):
                ids.update(int(x) for x in src)
        return ids

    @property
    def block_manager(self) -> BlockManager:
        """The scheduler's, read here by benchmarks and leak checks; only the scheduler changes it."""
        return self.scheduler.block_manager

    @property
    def requests(self) -> dict[str, Request]:
        return self.processor.requests

    # -- LoRA adapters (engine/lora.py) -------------------------------------------------------------
    def _loras(self):
        if self.runner.loras is None:
            raise InvalidRequestError("LoRA adapters are not enabled on this engine (enable_lora)", "model")
        return self.runner.loras

    def add_lora(self, name: str, path: str) -> LoRARequest:
        """Loads a PEFT adapter under `name` at run time; requests then select it by that name."""
        return self._loras().add(name, path)

    def remove_lora(self, name: str) -> None:
        """Unloads an adapter no request uses (KeyError when unknown, InvalidRequestError when in use).
        Its cached prefix blocks are keyed by its lora_int_id, which is never reused."""
        self._loras().remove(name)

    def list_loras(self) -> list[LoRARequest]:
        return list(self.runner.loras.registered.values()) if self.runner.loras is not None else []

    def _release(self, req: Request) -> None:
        if req.lora is not None:
            self.runner.loras.release(req.lora)
            req.lora = None

    # -- requests ------------------------------------------------------------------------------------
    def tokenize(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt, add_special_tokens=False)

    def check_request(self, prompt: str | list[int], params: SamplingParams, priority: int = 0) -> list[int]:
        """Refuses bad input (InvalidRequestError) before a request is queued, and returns the prompt's
        token ids. Safe on any thread, so a server can check on its event loop and then submit the ids;
        a long prompt or a new schema takes a while to tokenize or compile, so do it off that loop."""
        check_priority(priority)
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
            token_ids = self.tokenize(prompt)
        else:
            token_ids = list(prompt)
        self.limits.check(token_ids, params)
        if params.guided:
            with self._guided_lock:
                self.guided_decoding().compile(params.guided)  # a bad schema fails here, before queueing
        return token_ids

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        fairness_key: Hashable | None = None,
        lora_request: LoRARequest | str | None = None,
    ) -> Request:
        """`priority`: lower runs first, as vLLM's; `fairness_key` (an API key, say): requests of
        equal priority take turns by key (engine/scheduler.py); `lora_request`: a loaded adapter's name,
        or a LoRARequest (loaded under its name on first sight, as vLLM does)."""
        params = params or SamplingParams()
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        token_ids = self.check_request(prompt, params, priority)
        lora = None
        if lora_request is not None:
            loras = self._loras()
            if isinstance(lora_request, LoRARequest):
                if lora_request.lora_name not in loras.registered:
                    self.add_lora(lora_request.lora_name, lora_request.lora_path)
                lora_request = lora_request.lora_name
            lora = loras.acquire(lora_request)
        arrival = time.monotonic() if arrival_time is None else arrival_time
        metrics = RequestMetrics(arrival, prompt_tokens=len(token_ids), priority=priority)
        text = prompt if isinstance(prompt, str) else None
        req = Request(request_id, text, token_ids, params, metrics, fairness_key=fairness_key, lora=lora)
        seq = self._new_sequence(req, 0, list(token_ids))
        seq.pending_forks = params.n - 1
        self.requests[request_id] = req
        self.scheduler.add(seq)
        return req

    def guided_decoding(self):
        if self.guided is None:
            from engine.guided import GuidedDecoding

            self.guided = GuidedDecoding(self.tokenizer, self.vocab_size, self.eos_token_ids,
                                         loop_repeats=self.config.guided_loop_repeats,
                                         trigger_bias=self.config.tool_call_bias,
                                         budget_close=self.config.guided_budget_close)
            self.sampler.guided = self.guided
        return self.guided

    def _new_sequence(self, req: Request, index: int, token_ids: list[int]) -> Sequence:
        p = req.params
        gen = torch.Generator()
        if p.seed is not None:
            gen.manual_seed((p.seed + index) % 2**64)  # torch's own wrap-around, without its overflow error
        else:
            gen.seed()
        seq = Sequence(
            req.request_id, token_ids, len(req.prompt_token_ids), p, index=index, generator=gen,
            arrival_time=req.metrics.arrival_time, priority=req.metrics.priority,
            fairness_key=req.fairness_key, lora_int_id=req.lora.lora_int_id if req.lora else 0,
        )
        if p.guided:
            close = p.guided_budget_close and p.max_tokens is not None and not p.ignore_eos and not p.min_tokens
            with self._guided_lock:
                seq.matcher = self.guided_decoding().matcher(p.guided, budget_close=close)
        self.processor.add_sequence(req, seq)
        return seq

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stops a request at once; its blocks return to the pool before this returns."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return None
        req.aborted = True
        for st in req.states:
            if not st.seq.is_finished:
                st.seq.finish_reason = "abort"
                self._finish(st.seq)
        req.metrics.finished_time = time.monotonic()
        self._release(req)
        return self.processor.make_output(req)

    def stop_sequence(self, request_id: str, index: int = 0) -> RequestOutput | None:
        """Ends one of a request's samples now (finish reason `abort`), as its caller decided the
        rest of it is not wanted (a repeated tool call): its blocks return to the pool before this
        returns, its siblings run on. Returns the request's output then (`finished` once every
        sample is), or None when the request or that sample is already gone."""
        req = self.requests.get(request_id)
        st = next((s for s in req.states if s.seq.index == index), None) if req is not None else None
        if st is None or st.seq.is_finished:
            return None
        st.seq.finish_reason = "abort"
        self._finish(st.seq)
        out = self.processor.make_output(req)
        if req.finished:
            req.metrics.finished_time = time.monotonic()
            del self.requests[request_id]
        return out

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        if self.speculator is not None:
            self.speculator.release(seq)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def spec_stats(self) -> dict[str, float] | None:
        if self.speculator is None:
            return None
        sp = self.speculator
        return {**sp.stats, "acceptance_rate": sp.acceptance_rate, "mean_accepted_length": sp.mean_accepted_length}

    def snapshot_stats(self) -> EngineStats:
        """A consistent copy of the engine's counters; call it on the thread that steps."""
        sch, bm = self.scheduler, self.scheduler.block_manager
        running = {s.request_id for s in sch.running}
        return EngineStats(
            num_running=len(sch.running), num_waiting=len(sch.waiting), num_requests_running=len(running),
            num_requests_waiting=len({s.request_id for s in sch.waiting} - running),
            kv_usage=bm.usage, num_free_blocks=bm.num_free_blocks, num_blocks=bm.num_blocks,
            prefix_queries=bm.prefix_queries, prefix_hits=bm.prefix_hits, num_preemptions=sch.num_preemptions,
            preemptions_by_priority=dict(sch.preemptions_by_priority), spec=self.spec_stats, **self.stats)

    # -- the step --------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        if self.speculator is not None:
            self.speculator.propose(self.scheduler.running)
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        now = time.monotonic()
        for item in sched.scheduled:
            m = self.requests[item.seq.request_id].metrics
            if m.first_scheduled_time is None:
                m.first_scheduled_time = now
        logits = self.runner.execute(sched)
        self.stats["steps"] += 1
        sampled = self._sample(sched, logits)
        self.stats["prompt_tokens"] += self.scheduler.update_from_output(sched, sampled)
        if self.speculator is not None:
            for s in sampled:
                if s.seq.is_finished:
                    self.speculator.release(s.seq)
        outputs, finished = self.processor.outputs()
        for req in finished:
            self._release(req)
        return outputs

    def _sample(self, sched: SchedulerOutput, logits: torch.Tensor) -> list[SampledSeq]:
        """Samples a token for every sequence that reached its last token (verifying its drafts, if
        any) and hands the tokens to the output processor, which appends them up to a stop."""
        plain: list[Sequence] = []
        plain_rows: list[int] = []
        verify: list[tuple[Sequence, int]] = []
        row = 0
        for item in sched.scheduled:
            if not item.samples:
                continue
            k = len(item.seq.spec_tokens)
            if k:
                verify.append((item.seq, row))
            else:
                plain.append(item.seq)
                plain_rows.append(row)
            row += k + 1
        sampled: list[SampledSeq] = []
        if plain:
            rows, sampled_plain = self._expand_forks(plain, logits[plain_rows])
            tokens, lps = self.sampler(rows, [s.seq for s in sampled_plain])
            for s, token, lp in zip(sampled_plain, tokens, lps, strict=True):
                self.processor.append(s.seq, [token], [lp])
            sampled += sampled_plain
            self.stats["generation_tokens"] += len(tokens)
        for seq, r in verify:
            drafts = list(seq.spec_tokens)
            q = self.speculator.draft_probs.pop(seq.seq_id, None)
            tokens, lps = self.sampler.verify(logits[r : r + len(drafts) + 1], seq, drafts, q)
            n = self.processor.append(seq, tokens, lps)
            accepted = min(n, len(tokens) - 1)
            m = self.requests[seq.request_id].metrics
            m.spec_proposed += len(drafts)
            m.spec_accepted += accepted
            self.speculator.record(seq, len(drafts), accepted, n)
            sampled.append(SampledSeq(seq, accepted_drafts=accepted))
            self.stats["generation_tokens"] += n
        return sampled

    def _expand_forks(self, seqs: list[Sequence], logits: torch.Tensor) -> tuple[torch.Tensor, list[SampledSeq]]:
        """n > 1: a sequence that just finished its prompt forks into n, sharing every prompt block."""
        rows: list[int] = []
        out: list[SampledSeq] = []
        for i, seq in enumerate(seqs):
            rows.append(i)
            out.append(SampledSeq(seq))
            if seq.pending_forks:
                req = self.requests[seq.request_id]
                for k in range(1, seq.pending_forks + 1):
                    child = self._new_sequence(req, k, list(seq.token_ids))
                    self.scheduler.fork(seq, child)
                    rows.append(i)
                    out.append(SampledSeq(child, forked_from=seq))
                seq.pending_forks = 0
        return logits[rows] if len(rows) > len(seqs) else logits, out
