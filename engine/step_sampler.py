"""A step's logits to new tokens: one token for each sequence that reached its last token, the n
samples of a prompt just computed (forked here, sharing its blocks), and for a sequence with
speculative drafts, the drafts the target model accepts plus one token of its own."""

from collections.abc import Callable

import torch

from engine.sampler import Sampler
from engine.scheduler import SampledSeq, SchedulerOutput
from engine.sequence import Sequence

# Makes the k-th sample (k >= 1) of a parent sequence whose prompt was just computed.
Fork = Callable[[Sequence, int], Sequence]


class StepSampler:
    def __init__(self, sampler: Sampler, speculator=None):
        self.sampler = sampler
        self.speculator = speculator  # engine.speculative.Speculator, or None

    def sample(self, sched: SchedulerOutput, logits: torch.Tensor, fork: Fork) -> list[SampledSeq]:
        plain: list[Sequence] = []
        plain_rows: list[int] = []
        verify: list[tuple[Sequence, int]] = []
        row = 0
        for item in sched.scheduled:  # logits: one row per scheduled sequence, plus one per draft
            if not item.samples:
                continue
            k = len(item.seq.spec_tokens)
            if k:
                verify.append((item.seq, row))
            else:
                plain.append(item.seq)
                plain_rows.append(row)
            row += k + 1
        out: list[SampledSeq] = []
        if plain:
            # A decode step samples every row in order: no copy of the [rows, vocab] logits then.
            whole = len(plain_rows) == logits.shape[0]
            rows, seqs, parents = self._expand_forks(plain, logits if whole else logits[plain_rows], fork)
            tokens, lps = self.sampler(rows, seqs)
            out += [SampledSeq(seq, [t], [lp], forked_from=parent)
                    for seq, t, lp, parent in zip(seqs, tokens, lps, parents, strict=True)]
        for seq, r in verify:
            drafts = list(seq.spec_tokens)
            q = self.speculator.draft_probs.pop(seq.seq_id, None)
            tokens, lps = self.sampler.verify(logits[r : r + len(drafts) + 1], seq, drafts, q)
            out.append(SampledSeq(seq, tokens, lps, num_drafts=len(drafts)))
        return out

    @staticmethod
    def _expand_forks(seqs: list[Sequence], logits: torch.Tensor, fork: Fork
                      ) -> tuple[torch.Tensor, list[Sequence], list[Sequence | None]]:
        """n > 1: a sequence that just finished its prompt forks into n, each sampling from its row."""
        rows: list[int] = []
        out: list[Sequence] = []
        parents: list[Sequence | None] = []
        for i, seq in enumerate(seqs):
            rows.append(i)
            out.append(seq)
            parents.append(None)
            for k in range(1, seq.pending_forks + 1):
                rows.append(i)
                out.append(fork(seq, k))
                parents.append(seq)
            seq.pending_forks = 0
        return (logits[rows] if len(rows) > len(seqs) else logits), out, parents
