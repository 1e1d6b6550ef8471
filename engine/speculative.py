"""Speculative decoding: a cheap drafter proposes K tokens per sequence, the target model verifies all
of them in the step's one forward pass, keeps the agreeing prefix and adds one token of its own.

Two drafters, configured as vLLM's `speculative_config`:
- `{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 1, "prompt_lookup_max": 4}`:
  prompt lookup. The continuation of the most recent earlier occurrence of the context's last n-gram.
  Free, and strong where output copies the prompt (SQL copying names from the DDL).
- `{"method": "draft", "model": PATH, "num_speculative_tokens": K}`: a small model with the same
  tokenizer and a paged KV cache of its own, kept in step with the target and rolled back on rejection.

Speculation pays where a step is memory-bound (few sequences); with many sequences a CPU step is
compute-bound and K extra tokens per sequence cost real time. So it switches itself off above
`max_batch` decoding sequences and, per sequence, while its acceptance rate stays low."""

from dataclasses import dataclass
from typing import Any

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sampler import Sampler
from engine.scheduler import ScheduledSeq, SchedulerOutput
from engine.sequence import Sequence


@dataclass
class SpeculativeConfig:
    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4
    model: str | None = None
    max_batch: int = 4  # no speculation when more sequences than this are decoding
    min_acceptance: float = 0.25  # per-sequence acceptance (moving average) below which it pauses
    probe_every: int = 8  # a paused sequence retries after this many steps

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> "SpeculativeConfig":
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown speculative_config keys: {sorted(unknown)}")
        cfg = cls(**raw)
        if cfg.method not in ("ngram", "draft"):
            raise ValueError(f"speculative method must be 'ngram' or 'draft', got {cfg.method!r}")
        if not 1 <= cfg.num_speculative_tokens <= 16:
            raise ValueError("num_speculative_tokens must be between 1 and 16")
        if not 1 <= cfg.prompt_lookup_min <= cfg.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if cfg.method == "draft" and not cfg.model:
            raise ValueError("speculative method 'draft' needs 'model' (a folder or .gguf with the same tokenizer)")
        return cfg


def ngram_propose(tokens: list[int], k: int, n_min: int, n_max: int) -> list[int]:
    """The k tokens that followed the most recent earlier occurrence of the longest suffix n-gram."""
    length = len(tokens)
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        suffix = tokens[length - n :]
        first = suffix[0]
        # Scan backwards so the most recent match wins; it predicts the local pattern best.
        for start in range(length - n - 1, -1, -1):
            if tokens[start] == first and tokens[start : start + n] == suffix:
                follow = tokens[start + n : start + n + k]
                if follow:
                    return follow
    return []


@dataclass(eq=False)
class _Track:
    """Per-sequence speculation state."""

    ema: float = 1.0
    paused_steps: int = 0


class DraftModel:
    """The draft method: a second, smaller model decoding K tokens ahead of each sequence."""

    def __init__(self, target_config: EngineConfig, spec: SpeculativeConfig, target_tokenizer, max_model_len: int):
        from engine.loader import open_model
        from engine.model_runner import ModelRunner

        source = open_model(spec.model or "")
        if source.tokenizer().get_vocab() != target_tokenizer.get_vocab():
            raise ValueError(f"the draft model {spec.model!r} does not share the target model's tokenizer")
        target_kv = target_config.kv_cache_bytes
        cfg = EngineConfig(model=spec.model or "default", block_size=target_config.block_size,
                           dtype=target_config.dtype, quantization=target_config.quantization,
                           device=target_config.device, kv_cache_bytes=target_kv and target_kv // 4,
                           enable_prefix_caching=False)
        self.runner = ModelRunner(cfg, source, max_model_len)
        if self.runner.recurrent is not None:  # its state could not take back the drafts the target rejects
            raise ValueError(f"the draft model {spec.model!r} has linear-attention layers; a draft needs a KV cache "
                             "only (engine/recurrent_state.py)")
        self.bm = BlockManager(self.runner.num_blocks, cfg.block_size, enable_prefix_caching=False)
        self.mirrors: dict[int, Sequence] = {}

    def _sync(self, seq: Sequence) -> Sequence:
        m = self.mirrors.get(seq.seq_id)
        if m is None:
            m = Sequence(seq.request_id, list(seq.token_ids), seq.num_prompt_tokens, seq.params)
            self.mirrors[seq.seq_id] = m
            return m
        common = 0
        for a, b in zip(m.token_ids, seq.token_ids, strict=False):
            if a != b:
                break
            common += 1
        m.token_ids = list(seq.token_ids)
        m.num_computed_tokens = min(m.num_computed_tokens, common, len(m.token_ids) - 1)
        self.bm.trim(m, m.num_computed_tokens + 1)
        return m

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[tuple[list[int], torch.Tensor | None]]:
        mirrors = [self._sync(s) for s in seqs]
        drafts: list[list[int]] = [[] for _ in seqs]
        probs: list[list[torch.Tensor]] = [[] for _ in seqs]
        active = list(range(len(seqs)))
        for _ in range(max(ks)):
            active = [i for i in active if len(drafts[i]) < ks[i]]
            sched = SchedulerOutput()
            for i in active:
                m = mirrors[i]
                n = len(m) - m.num_computed_tokens
                if not self.bm.can_append(m, n):
                    continue
                self.bm.append_slots(m, n)
                sched.scheduled.append(ScheduledSeq(m, n))
            if not sched.scheduled:
                break
            sched.blocks_to_copy = self.bm.take_pending_copies()
            logits = self.runner.execute(sched)
            still = []
            for row, item in zip(logits, sched.scheduled, strict=True):
                m = item.seq
                m.num_computed_tokens += item.num_new_tokens
                i = next(j for j in active if mirrors[j] is m)
                target = seqs[i]
                if target.params.greedy:
                    token = int(row.argmax())
                else:
                    q = Sampler.probs(row, target)
                    token = Sampler.draw(q, target)
                    probs[i].append(q)
                m.token_ids.append(token)
                drafts[i].append(token)
                still.append(i)
            active = still
        return [(d, torch.stack(p) if p else None) for d, p in zip(drafts, probs, strict=True)]

    def release(self, seq: Sequence) -> None:
        m = self.mirrors.pop(seq.seq_id, None)
        if m is not None:
            self.bm.free(m)


class Speculator:
    def __init__(self, spec: SpeculativeConfig, engine_config: EngineConfig, tokenizer, max_model_len: int):
        self.spec = spec
        self.max_model_len = max_model_len
        self.draft = DraftModel(engine_config, spec, tokenizer, max_model_len) if spec.method == "draft" else None
        self.tracks: dict[int, _Track] = {}
        self.draft_probs: dict[int, torch.Tensor | None] = {}
        self.stats = {"proposed": 0, "accepted": 0, "verified_seqs": 0, "emitted": 0}

    def _budget(self, seq: Sequence) -> int:
        p = seq.params
        left = (p.max_tokens if p.max_tokens is not None else self.max_model_len) - seq.num_output_tokens - 1
        return max(0, min(self.spec.num_speculative_tokens, left, self.max_model_len - len(seq) - 1))

    def propose(self, running: list[Sequence]) -> None:
        """Sets `spec_tokens` on the decoding sequences worth speculating for this step."""
        decoding = [s for s in running if s.num_uncomputed_tokens == 1 and s.matcher is None and not s.pending_forks
                    and s.pooling is None]
        if not decoding or len(decoding) > self.spec.max_batch:
            return
        chosen, ks = [], []
        for seq in decoding:
            track = self.tracks.setdefault(seq.seq_id, _Track())
            if track.ema < self.spec.min_acceptance:
                track.paused_steps += 1
                if track.paused_steps % self.spec.probe_every:
                    continue
            k = self._budget(seq)
            if k > 0:
                chosen.append(seq)
                ks.append(k)
        if not chosen:
            return
        if self.draft is None:
            for seq, k in zip(chosen, ks, strict=True):
                seq.spec_tokens = ngram_propose(seq.token_ids, k, self.spec.prompt_lookup_min,
                                                self.spec.prompt_lookup_max)
        else:
            for seq, (d, q) in zip(chosen, self.draft.propose(chosen, ks), strict=True):
                seq.spec_tokens = d
                self.draft_probs[seq.seq_id] = q

    def record(self, seq: Sequence, proposed: int, accepted: int, emitted: int) -> None:
        self.stats["proposed"] += proposed
        self.stats["accepted"] += accepted
        self.stats["verified_seqs"] += 1
        self.stats["emitted"] += emitted
        track = self.tracks.setdefault(seq.seq_id, _Track())
        if proposed:
            track.ema = 0.7 * track.ema + 0.3 * (accepted / proposed)

    def release(self, seq: Sequence) -> None:
        self.tracks.pop(seq.seq_id, None)
        self.draft_probs.pop(seq.seq_id, None)
        if self.draft is not None:
            self.draft.release(seq)

    @property
    def acceptance_rate(self) -> float:
        return self.stats["accepted"] / self.stats["proposed"] if self.stats["proposed"] else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verified sequence-step (1 = no gain)."""
        return self.stats["emitted"] / self.stats["verified_seqs"] if self.stats["verified_seqs"] else 0.0

    def summary(self) -> dict[str, float]:
        """The counters and the two rates, as the engine's stats publish them."""
        return {**self.stats, "acceptance_rate": self.acceptance_rate,
                "mean_accepted_length": self.mean_accepted_length}
