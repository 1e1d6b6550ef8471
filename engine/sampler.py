"""Turns a batch of logits into next tokens, one row per sequence, each with its own settings.

Rows are processed together where the settings allow (penalties, temperature, filtering) and per row
only where they must be (each sequence draws from its own torch.Generator, so a seeded request
samples the same tokens whatever else shares its batch)."""

import torch

from engine.outputs import Logprob, TokenLogprobs
from engine.sequence import Sequence

NEG_INF = float("-inf")


def _apply_penalties(logits: torch.Tensor, seqs: list[Sequence], rows: list[int]) -> None:
    vocab = logits.shape[-1]
    for r in rows:
        p = seqs[r].params
        out_ids = torch.tensor(seqs[r].output_token_ids, dtype=torch.long)
        row = logits[r]
        if p.repetition_penalty != 1.0:
            seen = torch.zeros(vocab, dtype=torch.bool)
            seen[torch.tensor(seqs[r].token_ids, dtype=torch.long)] = True
            vals = row[seen]
            row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if out_ids.numel() and (p.presence_penalty or p.frequency_penalty):
            counts = torch.bincount(out_ids, minlength=vocab)[:vocab].to(row.dtype)
            row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(row.dtype)


def _filter(logits: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """Masks one row's logits outside top-k / top-p / min-p with -inf."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the smallest prefix reaching top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), NEG_INF)
    if min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < min_p * probs.max(), NEG_INF)
    return logits


class Sampler:
    def __init__(self, tokenizer=None, eos_token_ids: set[int] | None = None):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids or set()
        self.guided = None  # engine.guided.GuidedDecoding, set by the engine on the first constrained request

    def _token_str(self, token_id: int) -> str:
        if self.tokenizer is None:
            return str(token_id)
        return self.tokenizer.decode([token_id])

    def _logprobs(self, lp_row: torch.Tensor, token: int, k: int) -> TokenLogprobs:
        chosen = Logprob(token, float(lp_row[token]), self._token_str(token))
        top: list[Logprob] = []
        if k > 0:
            vals, ids = torch.topk(lp_row, k)
            top = [Logprob(int(i), float(v), self._token_str(int(i))) for v, i in zip(vals, ids, strict=True)]
        return TokenLogprobs(chosen, top)

    @torch.inference_mode()
    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence]
    ) -> tuple[list[int], list[TokenLogprobs | None]]:
        """logits [N, V] float32, one row per sequence. Returns tokens and, where asked, logprobs."""
        want_lp = [s.params.logprobs is not None for s in seqs]
        raw_lp = torch.log_softmax(logits, dim=-1) if any(want_lp) else None
        penal = [
            i
            for i, s in enumerate(seqs)
            if s.params.repetition_penalty != 1.0 or s.params.presence_penalty or s.params.frequency_penalty
        ]
        if penal:
            logits = logits.clone()
            _apply_penalties(logits, seqs, penal)
        for i, s in enumerate(seqs):
            if s.num_output_tokens < s.params.min_tokens:
                banned = set(s.params.stop_token_ids) | (set() if s.params.ignore_eos else self.eos_token_ids)
                if banned:
                    if not penal:
                        logits, penal = logits.clone(), [i]
                    logits[i, list(banned)] = NEG_INF
        if self.guided is not None:
            bitmask = self.guided.bitmask([s.matcher for s in seqs])
            if bitmask is not None:
                logits = logits.clone() if not penal else logits
                self.guided.apply(logits, bitmask)
        tokens = logits.argmax(dim=-1).tolist()
        for i, s in enumerate(seqs):
            p = s.params
            if p.greedy:
                continue
            row = _filter(logits[i] / p.temperature, p.top_k, p.top_p, p.min_p)
            probs = row.softmax(-1)
            # Exponential race: argmax(p / E) with E ~ Exp(1) samples from p; one draw per row from
            # the sequence's own generator keeps seeded requests independent of their neighbours.
            noise = torch.empty_like(probs).exponential_(generator=s.generator)
            tokens[i] = int((probs / noise).argmax())
        lps: list[TokenLogprobs | None] = [None] * len(seqs)
        if raw_lp is not None:
            for i, s in enumerate(seqs):
                if want_lp[i]:
                    lps[i] = self._logprobs(raw_lp[i], tokens[i], s.params.logprobs or 0)
        return tokens, lps
