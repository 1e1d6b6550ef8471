"""The synchronous engine: requests in, one scheduled forward pass per `step()`, outputs out."""

import dataclasses
import logging
import time
from collections.abc import Hashable

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.guided import EngineGuidedDecoding, GuidedDecoding
from engine.input_check import InputCheck, RequestLimits
from engine.loader import default_served_name, open_model
from engine.lora import LoRARequest
from engine.model_runner import ModelRunner
from engine.output_processor import OutputProcessor, Request, eos_token_ids
from engine.outputs import EngineStats, RequestMetrics, RequestOutput
from engine.pooling import PoolingOutput, PoolingParams, PoolingState, pooled_sequences
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import SampledSeq, Scheduler
from engine.sequence import Sequence
from engine.state_snapshots import StateSnapshots, snapshot_capacity
from engine.step_sampler import StepSampler

log = logging.getLogger(__name__)

MAX_DEFAULT_MODEL_LEN = 8192


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, **kwargs):
        config = config or EngineConfig(**kwargs)
        self.config = config
        t0 = time.perf_counter()
        self.source = open_model(config.model)
        self.model_path = self.source.path
        self.served_model_name = config.served_model_name or default_served_name(config.model)
        self.model_config = self.source.config
        self.tokenizer = self.source.tokenizer()
        if config.chat_template:
            from engine.chat.template import load_chat_template

            self.tokenizer.chat_template = load_chat_template(config.chat_template)
        from engine.chat.options import ChatOptions

        self.chat_options = ChatOptions(config.tool_call_parser, config.reasoning_parser, config.max_thinking_tokens)
        from engine.generation_config import generation_defaults

        self.sampling_defaults = generation_defaults(config.generation_config, self.model_path)
        limit = self.model_config.max_position_embeddings
        self.max_model_len = config.max_model_len or min(limit, MAX_DEFAULT_MODEL_LEN)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        torch.manual_seed(config.seed)
        self.runner = ModelRunner(config, self.source, self.max_model_len)
        self.scheduler = Scheduler(self._scheduler_config(config), self.runner.num_blocks)
        self.scheduler.long_rope_from = self.runner.model.long_rope_from
        self.scheduler.recurrent = self.runner.recurrent
        if self.runner.recurrent is not None and config.enable_prefix_caching:
            self._keep_state_snapshots()
        self.eos_token_ids = eos_token_ids(self.model_config, self.tokenizer)
        self.sampler = Sampler(self.tokenizer, self.eos_token_ids)
        self.vocab_size = self.runner.model.vocab_size
        self.limits = RequestLimits(self.vocab_size, self.max_model_len, config.block_size, self.runner.num_blocks,
                                    self.sampling_defaults.get("max_tokens"))
        # Refuses bad input before a request is queued and returns its token ids; safe on any thread, so
        # a server checks first, then submits the ids (tokenizing or compiling may take a while).
        self.guided = EngineGuidedDecoding(self.tokenizer, self.vocab_size, self.eos_token_ids, config, self.sampler)
        self.check_request = InputCheck(self.tokenizer, self.limits, self.guided.compile)
        self.processor = OutputProcessor(self.tokenizer, self.eos_token_ids, self.max_model_len)
        self.speculator = None
        if config.speculative_config:
            from engine.speculative import SpeculativeConfig, Speculator

            spec = SpeculativeConfig.parse(config.speculative_config)
            self.speculator = Speculator(spec, config, self.tokenizer, self.max_model_len)
        self.step_sampler = StepSampler(self.sampler, self.speculator)
        for name, path in (config.lora_modules or {}).items():
            self.add_lora(name, path)
        self.load_seconds = time.perf_counter() - t0
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "steps": 0}
        log.info("loaded %s from %s in %.2fs", self.served_model_name, self.model_path, self.load_seconds)

    def _scheduler_config(self, config: EngineConfig) -> EngineConfig:
        """A hybrid model's recurrent state (engine/recurrent_state.py) cannot forget the rejected drafts of
        speculative decoding, which is refused."""
        if self.runner.recurrent is not None and config.speculative_config:
            arch = self.model_config.architecture
            raise ValueError(f"speculative decoding is not supported for {arch} (linear-attention layers)")
        return config

    def _keep_state_snapshots(self) -> None:
        """Prefix caching for a hybrid model: a cached prefix serves only up to a kept recurrent state
        (engine/state_snapshots.py), in a pool of its own beside the KV cache."""
        states, bm = self.runner.recurrent, self.scheduler.block_manager
        capacity = snapshot_capacity(states.bytes_per_slot, self.runner.kv_cache_bytes, self.config.max_state_snapshots)
        states.snapshots = bm.state_cache = StateSnapshots(states, bm, capacity, self.config.mamba_block_size)
        log.info("prefix caching for %s: recurrent states kept every %d prompt tokens, up to %d (%.1f MiB each)",
                 self.model_config.architecture, states.snapshots.every, capacity, states.bytes_per_slot / 2**20)

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

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        fairness_key: Hashable | None = None,
        lora_request: LoRARequest | str | None = None,
        pooling: PoolingParams | None = None,
    ) -> Request:
        """`priority`: lower runs first, as vLLM's; `fairness_key` (an API key, say): requests of
        equal priority take turns by key (engine/scheduler.py); `lora_request`: a loaded adapter's name,
        or a LoRARequest (loaded under its name on first sight, as vLLM does); `pooling`: an embedding
        request (engine/pooling.py), answered by one PoolingOutput once its prompt is computed."""
        params = params or SamplingParams()
        if pooling is not None:
            params = SamplingParams(max_tokens=1)  # prefill only: nothing is sampled
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        token_ids = self.check_request(prompt, params, priority)
        if params.max_tokens is None and self.limits.card_max_tokens:
            # The model card's max_new_tokens within the context left; a copy, since callers share one
            # params object between prompts.
            params = dataclasses.replace(params, max_tokens=self.limits.max_tokens(params, len(token_ids)))
        lora = self._loras().acquire(lora_request) if lora_request is not None else None
        arrival = time.monotonic() if arrival_time is None else arrival_time
        metrics = RequestMetrics(arrival, prompt_tokens=len(token_ids), priority=priority)
        text = prompt if isinstance(prompt, str) else None
        req = Request(request_id, text, token_ids, params, metrics, fairness_key=fairness_key, lora=lora)
        try:
            seq = self._new_sequence(req, 0, list(token_ids))
        except BaseException:
            self._release(req)  # a refused grammar must not pin the adapter
            raise
        seq.pending_forks = params.n - 1
        seq.pooling = PoolingState(pooling) if pooling is not None else None
        self.requests[request_id] = req
        self.scheduler.add(seq)
        return req

    def guided_decoding(self) -> GuidedDecoding:
        return self.guided.get()

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
        seq.matcher = self.guided.matcher(p)
        self.processor.add_sequence(req, seq)
        return seq

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stops a request at once; its blocks return to the pool before this returns."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        req.aborted = True
        for st in req.states:
            if not st.seq.is_finished:
                st.seq.finish_reason = "abort"
                self._finish(st.seq)
        self._retire(req)
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
            self._retire(req)
        return out

    def _retire(self, req: Request) -> None:
        """A request that ended between steps (aborted, its last sample stopped), as a step retires the
        ones it finishes (OutputProcessor.outputs, then _release): forgotten, its adapter let go."""
        del self.requests[req.request_id]
        req.metrics.finished_time = time.monotonic()
        self._release(req)

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
        return self.speculator.summary() if self.speculator is not None else None

    def snapshot_stats(self) -> EngineStats:
        """A consistent copy of the engine's counters; call it on the thread that steps."""
        return self.scheduler.snapshot_stats(spec=self.spec_stats, **self.stats)

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
        sampled = self.step_sampler.sample(sched, logits, self._fork)
        self._append(sampled)
        self.stats["prompt_tokens"] += self.scheduler.update_from_output(sched, sampled)
        if self.speculator is not None:
            for s in sampled:
                if s.seq.is_finished:
                    self.speculator.release(s.seq)
        outputs, finished = self.processor.outputs()
        for req in finished:
            self._release(req)
        return outputs + self._pooled(sched)

    def _pooled(self, sched) -> list[PoolingOutput]:
        """Embedding requests whose prompt this step completed: finished here, their blocks freed."""
        outs = []
        for seq in pooled_sequences(sched.scheduled):
            seq.finish_reason = "stop"
            self._finish(seq)
            req = self.requests[seq.request_id]
            self._retire(req)
            outs.append(PoolingOutput(req.request_id, req.prompt_token_ids, seq.pooling.result(), req.metrics))
        return outs

    def _append(self, sampled: list[SampledSeq]) -> None:
        """Hands each sequence's new tokens to the output processor, which appends them up to a stop."""
        for s in sampled:
            n = self.processor.append(s.seq, s.tokens, s.logprobs)
            self.stats["generation_tokens"] += n
            if s.num_drafts is not None:
                s.accepted_drafts = min(n, len(s.tokens) - 1)
                m = self.requests[s.seq.request_id].metrics
                m.spec_proposed += s.num_drafts
                m.spec_accepted += s.accepted_drafts
                self.speculator.record(s.seq, s.num_drafts, s.accepted_drafts, n)

    def _fork(self, parent: Sequence, index: int) -> Sequence:
        child = self._new_sequence(self.requests[parent.request_id], index, list(parent.token_ids))
        self.scheduler.fork(parent, child)
        return child
