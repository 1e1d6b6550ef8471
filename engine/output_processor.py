"""From sampled token ids to what callers see: detokenizing, stop checks and output deltas.

The scheduler decides what runs and owns the KV blocks; this module owns each request's text. It
appends sampled tokens one at a time, so a stop (a stop string, a stop token, EOS, a finished
grammar, the length limit) ends a sequence at the token that caused it, even in the middle of a
run of accepted speculative drafts. It only marks the sequence finished (`finish_reason`); the
scheduler frees its blocks when the step's results are applied (Scheduler.update_from_output)."""

import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

from engine.detokenizer import DetokenizerState, detokenize_incrementally, find_stop, new_state, stop_holdback
from engine.lora import LoRARequest
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput, TokenLogprobs
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

log = logging.getLogger(__name__)


def eos_token_ids(model_config, tokenizer) -> set[int]:
    """Every id that ends a sequence: the model config's (one or a list) and the tokenizer's."""
    ids: set[int] = set()
    for src in (model_config.eos_token_id, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, list | tuple):
            ids.update(int(x) for x in src)
    return ids


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

    def state_of(self, seq: Sequence) -> SeqState:
        return next(s for s in self.states if s.seq is seq)


class OutputProcessor:
    def __init__(self, tokenizer, eos_token_ids: set[int], max_model_len: int):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.requests: dict[str, Request] = {}
        self._touched: dict[str, Request] = {}  # requests with new tokens since the last outputs()

    def add_sequence(self, req: Request, seq: Sequence) -> None:
        req.states.append(SeqState(seq, new_state(len(req.prompt_token_ids))))

    def append(self, seq: Sequence, tokens: list[int], lps: list[TokenLogprobs | None]) -> int:
        """Appends sampled tokens until the sequence stops; returns how many were appended."""
        req = self.requests[seq.request_id]
        self._touched[req.request_id] = req
        n = 0
        for token, lp in zip(tokens, lps, strict=True):
            self._append_token(req, seq, token, lp)
            n += 1
            if seq.finish_reason is not None:
                break
        return n

    def _append_token(self, req: Request, seq: Sequence, token: int, lp: TokenLogprobs | None) -> None:
        p = req.params
        seq.token_ids.append(token)
        st = req.state_of(seq)
        if lp is not None:
            st.logprobs.append(lp)
        new_text = detokenize_incrementally(self.tokenizer, seq.token_ids, st.detok, p.skip_special_tokens,
                                            p.keep_special_token_ids)
        st.text += new_text
        grammar_done = False
        if seq.matcher is not None:
            if not seq.matcher.accept_token(token):
                log.warning("request %s: token %d rejected by its grammar", req.request_id, token)
                grammar_done = True
            grammar_done = grammar_done or seq.matcher.is_terminated()
            if seq.matcher.idle:  # a thinking budget alone, spent or not needed: nothing left to mask
                seq.matcher = None
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

    def outputs(self) -> tuple[list[RequestOutput], list[Request]]:
        """The outputs of the requests that got tokens since the last call, and of those, the ones
        now finished (forgotten here; their caller releases what else they hold)."""
        now = time.monotonic()
        outputs, finished = [], []
        for req in self._touched.values():
            m = req.metrics
            m.first_token_time = m.first_token_time or now
            m.last_token_time = now
            outputs.append(self.make_output(req))
            if req.finished:
                m.finished_time = now
                del self.requests[req.request_id]
                finished.append(req)
        self._touched = {}
        return outputs, finished

    def make_output(self, req: Request) -> RequestOutput:
        """The request's output now: full text and tokens, and what is new since the previous one.
        Text that may be the start of a stop string is held back until it is known not to be."""
        outs = []
        total_out = 0
        logprobs = req.params.logprobs is not None
        for st in req.states:
            seq = st.seq
            end = len(st.text)
            if not seq.is_finished and req.params.stop:
                end -= stop_holdback(st.text, req.params.stop)
            end = max(end, st.emitted_chars)
            ids = seq.output_token_ids
            outs.append(CompletionOutput(
                index=seq.index,
                text=st.text[:end],
                token_ids=list(ids),
                delta_text=st.text[st.emitted_chars : end],
                delta_token_ids=ids[st.emitted_tokens :],
                logprobs=list(st.logprobs) if logprobs else None,
                delta_logprobs=st.logprobs[st.emitted_logprobs :] if logprobs else None,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
            ))
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
