"""Execution-guided selection: ask for k candidate queries, run each read-only, keep the answer most agree on.

Candidate 0 is the greedy query of ``generator``; the other ``k - 1`` are sampled by ``sampler`` (the
same model call at a temperature), all under the schema grammar when ``constrained``. Each goes
through the usual path (:func:`.ask.run_sql`: validation, EXPLAIN, time limit, row cap), so a bad
candidate is only outvoted, never run unchecked. Candidates that ran are grouped by their result
set (rows as a multiset, floats rounded, as the evaluation compares them); the largest group wins,
ties going to the group holding the earliest candidate, so the greedy answer wins whenever nothing
outvotes it. An empty answer (no rows, or one row of NULLs: an aggregate over nothing) loses to any
answer with data, whatever its votes: a question asked of a database is about rows it holds, and a
weak model's wrong filters agree on "nothing" easily. Next, a result set that some plausible candidate
produced beats one only implausible candidates did (:mod:`.plausibility`: ``SUM`` over an id, a column
compared with itself), and the answer is the group's earliest plausible candidate. With nothing
runnable (or ``execute=False``: no rows to compare) the greedy result stands.

With ``when="doubt"`` the greedy query is run first and the samples are drawn only when its answer is
:func:`doubtful` (it did not run, holds no data, or is implausible); otherwise it is the answer, at the
cost of one decode.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from integrations.text2sql.ask import AskResult, run_sql
from integrations.text2sql.errors import UnsafeSQL
from integrations.text2sql.execute import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S
from integrations.text2sql.generate import Generation, SQLGenerator
from integrations.text2sql.gold_order import normalise_row
from integrations.text2sql.plausibility import implausible
from integrations.text2sql.schema import Schema
from integrations.text2sql.sources import Source

MAX_CANDIDATES = 16
SAMPLE_TEMPERATURE = 0.7
# "always": k candidates for every question; "doubt": the greedy answer first, and the k - 1 samples only
# when it is doubtful (did not run, no data, implausible). Measured to keep selection's gain at a third
# of its decodes (README, "Selection on doubt").
SAMPLE_WHEN = ("always", "doubt")


def result_key(result: AskResult) -> Any:
    """What two candidates must share to agree: their rows as a multiset (None when it did not run)."""
    if not (result.ok and result.executed):
        return None
    rows = Counter(normalise_row(row) for row in result.rows)
    return frozenset(rows.items())


def has_data(result: AskResult) -> bool:
    """Whether a result holds a value: not empty, not a single row of NULLs."""
    return any(v is not None for row in result.rows for v in row)


def flag(results: Sequence[AskResult], schema: Schema) -> list[int]:
    """Indices of the candidates :func:`.plausibility.implausible` marks."""
    return [i for i, r in enumerate(results) if implausible(r.sql, schema, schema.dialect)]


def choose(results: Sequence[AskResult], flagged: Collection[int] = ()) -> tuple[int, int]:
    """(index of the chosen candidate, how many candidates share its result set); the ``flagged``
    candidates (see :func:`flag`) rank below the others."""
    groups: dict[Any, list[int]] = {}
    for i, res in enumerate(results):
        key = result_key(res)
        if key is not None:
            groups.setdefault(key, []).append(i)
    if not groups:  # nothing ran: answer with a candidate the validator let through, if any was
        return next((i for i, r in enumerate(results) if not isinstance(r.error, UnsafeSQL)), 0), 0
    best = max(groups.values(), key=lambda idx: (has_data(results[idx[0]]), any(i not in flagged for i in idx),
                                                 len(idx), -idx[0]))
    return min(best, key=lambda i: (i in flagged, i)), len(best)


def doubtful(result: AskResult, schema: Schema) -> bool:
    """Whether a greedy answer is worth a second opinion: it did not run, holds no data, or is implausible."""
    return not (result.ok and result.executed and has_data(result)) or bool(flag([result], schema))


def _finish(results: list[AskResult], gen_ms: float, k: int, schema: Schema, when: str) -> AskResult:
    flagged = flag(results, schema)
    index, votes = choose(results, flagged)
    chosen = results[index]
    chosen.selection = {"candidates": len(results), "requested": k, "when": when, "chosen": index, "votes": votes,
                        "runnable": sum(result_key(r) is not None for r in results), "implausible": flagged,
                        "sql": [r.sql for r in results]}
    db_ms = sum(r.timings.get("validation_ms", 0) + r.timings.get("execution_ms", 0) for r in results)
    chosen.timings = {**chosen.timings, "generation_ms": gen_ms, "total_ms": gen_ms + db_ms}
    return chosen


def _check(k: int, when: str) -> None:
    if not 1 <= k <= MAX_CANDIDATES:
        raise ValueError(f"candidates must be between 1 and {MAX_CANDIDATES}")
    if when not in SAMPLE_WHEN:
        raise ValueError(f"sample_when must be one of {', '.join(SAMPLE_WHEN)}")


def _run(source: Source, question: str, gens: Sequence[Generation], **limits: Any) -> list[AskResult]:
    return [run_sql(source, g.sql, question=question, generation=g, **limits) for g in gens]


def ask_selected(source: Source, question: str, generator: SQLGenerator, sampler: SQLGenerator, k: int, *,
                 constrained: bool = True, execute: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
                 timeout_s: float = DEFAULT_TIMEOUT_S, when: str = "always") -> AskResult:
    """:func:`.ask.ask` with k candidates (one batch for the sampled ones when ``sampler`` batches); with
    ``when="doubt"`` the samples are drawn only when the greedy answer is :func:`doubtful`."""
    _check(k, when)

    run = partial(_run, source, question, execute=execute, max_rows=max_rows, timeout_s=timeout_s)
    start = time.perf_counter()
    greedy = generator.generate(source, question, constrained=constrained)
    gen_ms = (time.perf_counter() - start) * 1000
    first = run([greedy]) if when == "doubt" else []
    if first and (k == 1 or not execute or not doubtful(first[0], source.schema())):
        return _finish(first, gen_ms, k, source.schema(), when)
    start = time.perf_counter()
    samples = sampler.generate_many([(source, question)] * (k - 1), constrained=constrained) if k > 1 else []
    gen_ms += (time.perf_counter() - start) * 1000
    results = first + run(samples) if first else run([greedy, *samples])
    return _finish(results, gen_ms, k, source.schema(), when)


async def aask_selected(source: Source, question: str, generator: SQLGenerator, sampler: SQLGenerator, k: int, *,
                        constrained: bool = True, execute: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
                        timeout_s: float = DEFAULT_TIMEOUT_S, when: str = "always") -> AskResult:
    """:func:`ask_selected` for an event loop: the model calls run concurrently (one engine batch); with
    ``when="doubt"`` the greedy call runs first and the k - 1 samples follow only when it is doubtful."""
    _check(k, when)

    run = partial(_run, source, question, execute=execute, max_rows=max_rows, timeout_s=timeout_s)
    def sample() -> list[asyncio.Future[Generation]]:
        return [asyncio.ensure_future(sampler.agenerate(source, question, constrained=constrained))
                for _ in range(k - 1)]

    start = time.perf_counter()
    if when == "doubt":
        greedy = await generator.agenerate(source, question, constrained=constrained)
        gen_ms = (time.perf_counter() - start) * 1000
        first = await asyncio.to_thread(run, [greedy])
        if k == 1 or not execute or not doubtful(first[0], source.schema()):
            return _finish(first, gen_ms, k, source.schema(), when)
        start = time.perf_counter()
        samples = await _drawn(sample())
        gen_ms += (time.perf_counter() - start) * 1000
        results = first + await asyncio.to_thread(run, samples)
    else:
        greedy_call = asyncio.ensure_future(generator.agenerate(source, question, constrained=constrained))
        pending = sample()  # started beside the greedy call: one engine batch
        try:
            greedy = await greedy_call
        except BaseException:
            for task in pending:
                task.cancel()
            raise
        gens = [greedy, *await _drawn(pending)]
        gen_ms = (time.perf_counter() - start) * 1000
        results = await asyncio.to_thread(run, gens)
    return _finish(results, gen_ms, k, source.schema(), when)


async def _drawn(samples: Sequence[asyncio.Future[Generation]]) -> list[Generation]:
    """The samples that came back. One whose model call failed (the server at capacity, an upstream's
    error) is a candidate fewer (``selection.candidates`` says how many there were), not a failed question:
    only the greedy call's failure is the question's."""
    done = await asyncio.gather(*samples, return_exceptions=True)
    return [g for g in done if isinstance(g, Generation)]
