"""Evaluation on the shipped question set: valid-SQL rate and execution accuracy per decoding mode.

For each mode every prompt goes to the model in one batch (continuous batching makes that far
faster than asking one by one), then each output is validated and run on its demo database and its
rows are compared with the gold query's rows: as multisets, or as lists when the gold query has a
top-level ORDER BY (row order is then part of the answer, up to rows that tie on its keys:
``gold_order.py``). Column names are not compared, values are (floats rounded, so ``AVG`` computed in
another order still matches).

Rates reported:

* ``valid``: the output is one read-only SELECT that parses (the validator accepts it).
* ``executable``: it also compiled against the schema (EXPLAIN) and ran without error or timeout.
* ``exec_accuracy``: its rows equal the gold rows.
* ``reachable``: some candidate the mode drew had the gold rows (pass@k; the same as ``exec_accuracy`` for
  the one-candidate modes). The ceiling of execution-guided selection: no way of choosing among these
  candidates beats it, only a better model does.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from integrations.text2sql.ask import ask, run_sql
from integrations.text2sql.dataset import EvalItem
from integrations.text2sql.execute import run_query
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.gold_order import GoldOrder, gold_order, normalise_row
from integrations.text2sql.selection import ask_selected, choose, doubtful, flag
from integrations.text2sql.sources import Source, demo_source
from integrations.text2sql.validate import validate_sql

# constrained / unconstrained: the base model; adapter: constrained through the text-to-SQL LoRA adapter;
# adapter+select: that, plus execution-guided selection over k candidates (selection.py); adapter+doubt: the
# same, with the k - 1 samples drawn only for questions whose greedy answer is doubtful.
MODES = ("constrained", "unconstrained", "adapter", "adapter+select", "adapter+doubt")
SELECTING = {"adapter+select": "always", "adapter+doubt": "doubt"}  # mode -> selection's sample_when
EVAL_MAX_ROWS = 10_000
EVAL_TIMEOUT_S = 5.0


def results_match(pred: Sequence[Sequence[Any]], gold: Sequence[Sequence[Any]], ordered: bool) -> bool:
    """Execution match: same rows (as tuples of normalised values), in order when ``ordered``."""
    p = [normalise_row(row) for row in pred]
    g = [normalise_row(row) for row in gold]
    return p == g if ordered else Counter(p) == Counter(g)


@dataclass
class EvalRecord:
    id: str
    schema: str
    lang: str
    mode: str
    question: str
    gold_sql: str
    sql: str
    valid: bool
    executable: bool
    match: bool
    error: str | None = None
    retried: bool = False  # cut by max_tokens under the full grammar, answered under the compact one
    repaired: bool = False  # join_repair added the JOINs the model's query lacked


@dataclass
class ModeReport:
    mode: str
    n: int
    valid: int
    executable: int
    matched: int
    batch_s: float  # wall time of generating all n outputs in one batch
    p50_ask_ms: float | None = None  # median latency of one full ask (generate + validate + run)
    retried: int = 0
    repaired: int = 0
    reachable: int = 0  # questions where some drawn candidate matched (the chosen one or not)
    by_lang: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def valid_rate(self) -> float:
        return self.valid / self.n if self.n else 0.0

    @property
    def executable_rate(self) -> float:
        return self.executable / self.n if self.n else 0.0

    @property
    def exec_accuracy(self) -> float:
        return self.matched / self.n if self.n else 0.0

    @property
    def reachable_rate(self) -> float:
        return self.reachable / self.n if self.n else 0.0

    def summary(self) -> str:
        langs = ", ".join(f"{k} {v['matched']}/{v['n']}" for k, v in sorted(self.by_lang.items()))
        p50 = f"{self.p50_ask_ms:.0f} ms" if self.p50_ask_ms is not None else "-"
        return (f"{self.mode}: valid {self.valid_rate:.1%}, executable {self.executable_rate:.1%}, exec accuracy "
                f"{self.exec_accuracy:.1%} ({langs}), reachable {self.reachable_rate:.1%}, batch {self.batch_s:.1f} s, "
                f"p50 ask {p50}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(valid_rate=self.valid_rate, executable_rate=self.executable_rate, exec_accuracy=self.exec_accuracy,
                   reachable_rate=self.reachable_rate)
        return out


@dataclass
class EvalReport:
    modes: list[ModeReport]
    records: list[EvalRecord]
    total_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"modes": [m.to_dict() for m in self.modes], "records": [asdict(r) for r in self.records],
                "total_s": self.total_s}

    def table(self) -> str:
        head = (f"{'mode':<14}{'n':>5}{'valid SQL':>12}{'executable':>12}{'exec acc':>10}{'  ko acc':>9}"
                f"{'  en acc':>9}{'reachable':>11}{'batch s':>9}{'p50 ask ms':>12}{'retried':>9}{'repaired':>10}")
        lines = [head, "-" * len(head)]
        for m in self.modes:
            lang = {k: (v["matched"] / v["n"] if v["n"] else 0.0) for k, v in m.by_lang.items()}
            p50 = f"{m.p50_ask_ms:.0f}" if m.p50_ask_ms is not None else "-"
            lines.append(
                f"{m.mode:<14}{m.n:>5}{m.valid_rate:>12.1%}{m.executable_rate:>12.1%}{m.exec_accuracy:>10.1%}"
                f"{lang.get('ko', 0):>9.1%}{lang.get('en', 0):>9.1%}{m.reachable_rate:>11.1%}{m.batch_s:>9.1f}"
                f"{p50:>12}{m.retried:>9}{m.repaired:>10}"
            )
        return "\n".join(lines)


class _Gold:
    """Gold result sets and their row order, computed once per item."""

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[Any, ...]]] = {}
        self._order: dict[str, tuple[bool, GoldOrder | None]] = {}  # (ordered, its ties when they are known)

    def rows(self, item: EvalItem, source: Source) -> list[tuple[Any, ...]]:
        if item.id not in self._rows:
            self._rows[item.id] = run_query(source, item.sql, max_rows=EVAL_MAX_ROWS, timeout_s=30).rows
        return self._rows[item.id]

    def matches(self, item: EvalItem, source: Source, pred: Sequence[Sequence[Any]]) -> bool:
        """Execution match; with an ORDER BY, rows tied on its keys may come in any order."""
        gold = self.rows(item, source)
        if item.id not in self._order:
            ordered = validate_sql(item.sql, source.dialect).ordered
            ties = gold_order(item.sql, gold, lambda sql: run_query(source, sql, max_rows=EVAL_MAX_ROWS,
                                                                     timeout_s=30).rows,
                              source.dialect) if ordered else None
            self._order[item.id] = ordered, ties
        ordered, order = self._order[item.id]
        return order.matches(pred) if order is not None else results_match(pred, gold, ordered)


def evaluate(
    generator: SQLGenerator,
    items: Sequence[EvalItem],
    modes: Sequence[str] = MODES[:2],
    *,
    latency_samples: int = 5,
    progress: Any = None,
    adapter: SQLGenerator | None = None,
    sampler: SQLGenerator | None = None,
    k: int = 5,
    sources: Mapping[str, Source] | None = None,
) -> EvalReport:
    """Runs every mode over ``items``; ``progress(msg)`` is called between phases when given. The items'
    schemas are the shipped demo databases unless ``sources`` maps them.

    ``adapter`` is the generator through the adapter (modes ``adapter``, ``adapter+select``,
    ``adapter+doubt``) and ``sampler`` its sampling twin for the ``k - 1`` extra candidates of the latter two."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if mode.startswith("adapter") and adapter is None:
            raise ValueError(f"mode {mode!r} needs an adapter (none is configured)")
        if mode in SELECTING and sampler is None:
            raise ValueError(f"mode {mode!r} needs a sampler")
    say = progress or (lambda _msg: None)
    sources = sources or {name: demo_source(name) for name in sorted({i.schema for i in items})}
    gold = _Gold()
    reports, records = [], []
    t0 = time.perf_counter()
    for mode in modes:
        constrained = mode != "unconstrained"
        gen = adapter if mode.startswith("adapter") else generator
        assert gen is not None
        when = SELECTING.get(mode)
        say(f"{mode}: generating {len(items) * (k if when == 'always' else 1)} queries in one batch")
        start = time.perf_counter()
        requests = [(sources[i.schema], i.question) for i in items]
        gens = gen.generate_many(requests, constrained=constrained)
        run_start = time.perf_counter()
        firsts = [run_sql(sources[i.schema], g.sql, max_rows=EVAL_MAX_ROWS, timeout_s=EVAL_TIMEOUT_S, generation=g)
                  for i, g in zip(items, gens, strict=True)]
        # Only "doubt" must run its greedy answers before it knows what to sample; the other modes' batch
        # time stays the model's alone, as before.
        run_s = time.perf_counter() - run_start if when != "doubt" else 0.0
        ask_more = [n for n, (i, r) in enumerate(zip(items, firsts, strict=True))
                    if when == "always" or (when == "doubt" and doubtful(r, sources[i.schema].schema()))]
        if ask_more and k > 1:
            say(f"{mode}: sampling {len(ask_more) * (k - 1)} more queries for {len(ask_more)} questions")
        extra = sampler.generate_many([requests[n] for n in ask_more] * (k - 1), constrained=constrained) \
            if ask_more and k > 1 else []
        batch_s = time.perf_counter() - start - run_s
        report = ModeReport(mode, len(items), 0, 0, 0, batch_s)
        more = {n: extra[j::len(ask_more)] for j, n in enumerate(ask_more)}
        for n, (item, g) in enumerate(zip(items, gens, strict=True)):
            source = sources[item.schema]
            cands = [g, *more.get(n, [])]
            results = [firsts[n], *(run_sql(source, c.sql, max_rows=EVAL_MAX_ROWS, timeout_s=EVAL_TIMEOUT_S,
                                            generation=c) for c in cands[1:])]
            pick = choose(results, flag(results, source.schema()) if len(results) > 1 else ())[0]
            res, chosen = results[pick], cands[pick]
            hits = [r.ok and r.executed and gold.matches(item, source, r.rows) for r in results]
            valid = res.validation.ok
            executable = res.ok and res.executed
            match = hits[pick]
            report.reachable += any(hits)
            report.valid += valid
            report.executable += executable
            report.matched += match
            report.retried += chosen.retried
            report.repaired += res.repaired_from is not None
            lang = report.by_lang.setdefault(item.lang, {"n": 0, "matched": 0})
            lang["n"] += 1
            lang["matched"] += match
            records.append(EvalRecord(item.id, item.schema, item.lang, mode, item.question, item.sql, res.sql,
                                      valid, executable, match, res.error.message if res.error else None,
                                      chosen.retried, res.repaired_from is not None))
        if latency_samples > 0:
            say(f"{mode}: timing {latency_samples} single asks")
            lat = []
            for item in items[:latency_samples]:
                src = sources[item.schema]
                if when:
                    res = ask_selected(src, item.question, gen, sampler, k, max_rows=EVAL_MAX_ROWS,  # type: ignore[arg-type]
                                       timeout_s=EVAL_TIMEOUT_S, when=when)
                else:
                    res = ask(src, item.question, gen, constrained=constrained, max_rows=EVAL_MAX_ROWS,
                              timeout_s=EVAL_TIMEOUT_S)
                lat.append(res.timings["total_ms"])
            report.p50_ask_ms = statistics.median(lat)
        reports.append(report)
        say(report.summary())  # a long run stopped in a later mode still leaves this one's numbers
    return EvalReport(reports, records, time.perf_counter() - t0)
