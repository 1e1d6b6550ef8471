"""The synchronous engine: requests in, one scheduled forward pass per `step()`, outputs out."""

import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import DetokenizerState, detokenize_incrementally, find_stop, new_state, stop_holdback
from engine.errors import InvalidRequestError
from engine.loader import default_served_name, load_model_config, load_tokenizer, resolve_model
from engine.lora import LoRARequest
from engine.model_runner import ModelRunner
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput, TokenLogprobs
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence

log = logging.getLogger(__name__)

MAX_DEFAULT_MODEL_LEN = 8192


@dataclass(eq=False)
class SeqState:
    """Per-sequence output bookkeeping: text, what was already emitted, logprobs."""

    seq: Sequence
    detok: DetokenizerState
    text: str = ""
    emitted_chars: int = 0
    emitted_tokens: int = 0
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    emitted_logprobs: int = 0


@dataclass(eq=False)
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    metrics: RequestMetrics
    states: list[SeqState] = field(default_factory=list)
    aborted: bool = False
    fairness_key: Hashable | None = None
    lora: LoRARequest | None = None

    @property
    def finished(self) -> bool:
        return len(self.states) == self.params.n and all(s.seq.is_finished for s in self.states)


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
        self.block_manager = BlockManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        self.eos_token_ids = self._eos_ids()
        self.sampler = Sampler(self.tokenizer, self.eos_token_ids)
        self.vocab_size = self.runner.model.vocab_size
        self.requests: dict[str, Request] = {}
        self.guided = None  # engine.guided.GuidedDecoding, built on the first constrained request
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

    def _validate(self, token_ids: list[int], params: SamplingParams) -> None:
        if not token_ids:
            raise InvalidRequestError("the prompt is empty", "prompt")
        if any(not isinstance(t, int) or t < 0 or t >= self.vocab_size for t in token_ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {self.vocab_size})", "prompt")
        bad = [t for t in params.stop_token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidRequestError(f"unknown stop_token_ids {bad}: vocabulary size is {self.vocab_size}", "stop_token_ids")
        bad = [t for t in params.logit_bias if t >= self.vocab_size]
        if bad:
            raise InvalidRequestError(f"logit_bias has unknown token ids {bad[:5]}: vocabulary size is {self.vocab_size}",
                                      "logit_bias")
        n = len(token_ids)
        if n >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {n} tokens, but this model's maximum context length is {self.max_model_len}",
                "prompt",
            )
        if params.max_tokens is not None and n + params.max_tokens > self.max_model_len:
            raise InvalidRequestError(
                f"this model's maximum context length is {self.max_model_len} tokens; the request asks for "
                f"{n + params.max_tokens} ({n} in the prompt and {params.max_tokens} to generate)",
                "max_tokens",
            )
        total = n + (params.max_tokens or self.max_model_len - n)
        if (total + self.config.block_size - 1) // self.config.block_size > self.block_manager.num_blocks:
            raise InvalidRequestError(
                f"the request needs {total} tokens of KV cache but the cache holds "
                f"{self.block_manager.num_blocks * self.config.block_size}",
                "max_tokens",
            )

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
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidRequestError(f"priority must be an integer, got {priority!r}", "priority")
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        if isinstance(prompt, str):
            text, token_ids = prompt, self.tokenize(prompt)
            if not prompt:
                raise InvalidRequestError("the prompt is empty", "prompt")
        else:
            text, token_ids = None, list(prompt)
        self._validate(token_ids, params)
        if params.guided:
            self.guided_decoding().compile(params.guided)  # a bad schema fails here, before queueing
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
            seq.matcher = self.guided_decoding().matcher(p.guided, budget_close=close)
        req.states.append(SeqState(seq, new_state(len(req.prompt_token_ids))))
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
        return self._make_output(req)

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
        out = self._make_output(req)
        if req.finished:
            req.metrics.finished_time = time.monotonic()
            del self.requests[request_id]
        return out

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

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
        plain: list[Sequence] = []
        plain_rows: list[int] = []
        verify: list[tuple[Sequence, int]] = []
        row = 0
        for item in sched.scheduled:
            seq = item.seq
            samples = item.samples  # before num_computed_tokens moves
            k = len(seq.spec_tokens)
            real = item.num_new_tokens - k
            if seq.num_computed_tokens < seq.num_prompt_tokens:
                self.stats["prompt_tokens"] += min(real, seq.num_prompt_tokens - seq.num_computed_tokens)
            seq.num_computed_tokens += real
            if not samples:
                self.block_manager.register_full_blocks(seq)
            elif k:
                verify.append((seq, row))
                row += k + 1
            else:
                plain.append(seq)
                plain_rows.append(row)
                row += 1
        touched: dict[str, Request] = {}
        emitted = 0
        if plain:
            rows, row_seqs = self._expand_forks(plain, logits[plain_rows])
            tokens, lps = self.sampler(rows, row_seqs)
            for seq, token, lp in zip(row_seqs, tokens, lps, strict=True):
                self._emit(seq, [token], [lp], touched)
            emitted += len(tokens)
        for seq, r in verify:
            emitted += self._verify(seq, logits[r : r + len(seq.spec_tokens) + 1], touched)
        for seq in plain + [s for s, _ in verify]:
            if not seq.is_finished:
                self.block_manager.register_full_blocks(seq)
        self.stats["generation_tokens"] += emitted
        now = time.monotonic()
        outputs = []
        for req in touched.values():
            m = req.metrics
            m.first_token_time = m.first_token_time or now
            m.last_token_time = now
            out = self._make_output(req)
            if req.finished:
                m.finished_time = now
                del self.requests[req.request_id]
                self._release(req)
            outputs.append(out)
        return outputs

    def _emit(self, seq: Sequence, tokens: list[int], lps: list, touched: dict[str, "Request"]) -> int:
        """Appends sampled tokens until the sequence finishes; returns how many were appended."""
        req = self.requests[seq.request_id]
        touched[req.request_id] = req
        n = 0
        for token, lp in zip(tokens, lps, strict=True):
            self._append_token(req, seq, token, lp)
            n += 1
            if seq.is_finished:
                break
        return n

    def _verify(self, seq: Sequence, rows: torch.Tensor, touched: dict[str, "Request"]) -> int:
        drafts, seq.spec_tokens = seq.spec_tokens, []
        q = self.speculator.draft_probs.pop(seq.seq_id, None)
        tokens, lps = self.sampler.verify(rows, seq, drafts, q)
        n = self._emit(seq, tokens, lps, touched)
        accepted = min(n, len(tokens) - 1)
        m = self.requests[seq.request_id].metrics
        m.spec_proposed += len(drafts)
        m.spec_accepted += accepted
        self.speculator.record(seq, len(drafts), accepted, n)
        if not seq.is_finished:
            # KV of the accepted drafts is valid; the rejected drafts' slots are released.
            seq.num_computed_tokens += accepted
            self.block_manager.trim(seq, len(seq))
        return n

    def _expand_forks(self, sampling: list[Sequence], logits: torch.Tensor) -> tuple[torch.Tensor, list[Sequence]]:
        """n > 1: a sequence that just finished its prompt forks into n, sharing every prompt block."""
        if not any(s.pending_forks for s in sampling):
            return logits, sampling
        rows, seqs = [], []
        for i, seq in enumerate(sampling):
            rows.append(i)
            seqs.append(seq)
            if seq.pending_forks:
                req = self.requests[seq.request_id]
                for k in range(1, seq.pending_forks + 1):
                    child = self._new_sequence(req, k, list(seq.token_ids))
                    child.num_computed_tokens = seq.num_computed_tokens
                    child.num_cached_tokens = seq.num_cached_tokens
                    self.block_manager.fork(seq, child)
                    self.scheduler.fork(seq, child)
                    rows.append(i)
                    seqs.append(child)
                seq.pending_forks = 0
        return logits[rows], seqs

    def _append_token(self, req: Request, seq: Sequence, token: int, lp: TokenLogprobs | None) -> None:
        p = req.params
        seq.token_ids.append(token)
        st = next(s for s in req.states if s.seq is seq)
        if lp is not None:
            st.logprobs.append(lp)
        new_text = detokenize_incrementally(self.tokenizer, seq.token_ids, st.detok, p.skip_special_tokens)
        st.text += new_text
        grammar_done = False
        if seq.matcher is not None:
            if not seq.matcher.accept_token(token):
                log.warning("request %s: token %d rejected by its grammar", req.request_id, token)
                grammar_done = True
            grammar_done = grammar_done or seq.matcher.is_terminated()
        if grammar_done:
            seq.finish_reason = "stop"
        elif seq.num_output_tokens >= p.min_tokens:
            if token in p.stop_token_ids:
                seq.finish_reason, seq.stop_reason = "stop", token
            elif not p.ignore_eos and token in self.eos_token_ids:
                seq.finish_reason = "stop"
            elif p.stop and new_text:
                hit = find_stop(st.text, len(new_text), p.stop)
                if hit is not None:
                    idx, stop = hit
                    st.text = st.text[: idx + len(stop)] if p.include_stop_str_in_output else st.text[:idx]
                    seq.finish_reason, seq.stop_reason = "stop", stop
        if seq.finish_reason is None:
            limit = p.max_tokens if p.max_tokens is not None else self.max_model_len - seq.num_prompt_tokens
            if seq.num_output_tokens >= limit or len(seq) >= self.max_model_len:
                seq.finish_reason = "length"
        if seq.finish_reason is not None:
            self._finish(seq)

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        if self.speculator is not None:
            self.speculator.release(seq)

    @property
    def spec_stats(self) -> dict[str, float] | None:
        if self.speculator is None:
            return None
        sp = self.speculator
        return {**sp.stats, "acceptance_rate": sp.acceptance_rate, "mean_accepted_length": sp.mean_accepted_length}

    def _make_output(self, req: Request) -> RequestOutput:
        outs = []
        total_out = 0
        for st in req.states:
            seq = st.seq
            text = st.text
            end = len(text)
            if not seq.is_finished and req.params.stop:
                end -= stop_holdback(text, req.params.stop)
            end = max(end, st.emitted_chars)
            ids = seq.output_token_ids
            outs.append(
                CompletionOutput(
                    index=seq.index,
                    text=text[:end],
                    token_ids=list(ids),
                    delta_text=text[st.emitted_chars : end],
                    delta_token_ids=ids[st.emitted_tokens :],
                    logprobs=list(st.logprobs) if req.params.logprobs is not None else None,
                    delta_logprobs=st.logprobs[st.emitted_logprobs :] if req.params.logprobs is not None else None,
                    finish_reason=seq.finish_reason,
                    stop_reason=seq.stop_reason,
                )
            )
            st.emitted_chars, st.emitted_tokens, st.emitted_logprobs = end, len(ids), len(st.logprobs)
            total_out += len(ids)
        req.metrics.output_tokens = total_out
        req.metrics.cached_tokens = req.states[0].seq.num_cached_tokens if req.states else 0
        return RequestOutput(
            request_id=req.request_id,
            prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids,
            outputs=outs,
            finished=req.finished or req.aborted,
            metrics=req.metrics,
        )
