"""The whole path for one question: generate, validate, EXPLAIN, execute; with timings.

:func:`ask` (and :func:`aask` for the gateway's event loop) never lets model output near a
database without validation, and reports SQL-level failures (refused, invalid, timed out) inside
the :class:`AskResult` rather than raising: a bad generation is an answer to show, not a server
error. Caller errors (unknown source, broken URL, failing model call) still raise.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from integrations.text2sql.errors import InvalidSQL, Text2SQLError
from integrations.text2sql.execute import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult, run_validated
from integrations.text2sql.generate import Generation, SQLGenerator
from integrations.text2sql.join_repair import repair_joins
from integrations.text2sql.sources import Source
from integrations.text2sql.validate import Validation, validate_sql


@dataclass
class AskResult:
    question: str | None
    source: str
    sql: str
    validation: Validation
    result: QueryResult | None = None  # rows when executed; plan only when ``execute=False``
    error: Text2SQLError | None = None
    executed: bool = False
    constrained: bool | None = None  # None when the SQL was handed in, not generated
    raw_output: str | None = None
    retried: bool = False  # the first constrained output ran out of tokens; see SQLGenerator
    repaired_from: str | None = None  # the model's SQL before join_repair added the JOINs it lacked
    timings: dict[str, float] = field(default_factory=dict)  # generation_ms, validation_ms, execution_ms, total_ms
    # Execution-guided selection (selection.py): candidates, chosen index, votes, runnable, every candidate's SQL.
    selection: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def columns(self) -> list[str]:
        return self.result.columns if self.result else []

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return self.result.rows if self.result else []

    def to_dict(self) -> dict[str, Any]:
        res = self.result.to_dict() if self.result else {}
        return {
            "question": self.question,
            "source": self.source,
            "sql": self.sql,
            "valid": self.validation.ok,
            "validation": self.validation.to_dict(),
            "executed": self.executed,
            "constrained": self.constrained,
            "columns": res.get("columns", []),
            "rows": res.get("rows", []),
            "row_count": res.get("row_count", 0),
            "truncated": res.get("truncated", False),
            "plan": res.get("plan", []),
            "error": self.error.to_dict() if self.error else None,
            "raw_output": self.raw_output,
            "retried": self.retried,
            "repaired_from": self.repaired_from,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "selection": self.selection,
        }


def run_sql(source: Source, sql: str, *, execute: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
            timeout_s: float = DEFAULT_TIMEOUT_S, question: str | None = None,
            generation: Generation | None = None) -> AskResult:
    """Validates and (optionally) runs SQL someone wrote or a model generated.

    Without ``execute`` the query is still EXPLAINed, so ``ok`` means "would run". A generated query that
    names a table it never joined gets that join when one foreign-key path leads there (:mod:`.join_repair`)."""
    start = time.perf_counter()
    validation = validate_sql(sql, source.dialect)
    repaired = repair_joins(validation.sql, source.schema(), source.dialect) if validation.ok and generation else None
    if repaired is not None:
        repaired, validation = validation.sql, validate_sql(repaired, source.dialect)
    timings = {"validation_ms": (time.perf_counter() - start) * 1000}
    if generation is not None:
        timings["generation_ms"] = generation.generation_ms
    out = AskResult(
        question=question,
        source=source.name,
        sql=validation.sql,
        validation=validation,
        constrained=generation.constrained if generation else None,
        raw_output=generation.raw if generation else None,
        retried=generation.retried if generation else False,
        repaired_from=repaired,
        timings=timings,
    )
    if not validation.ok:
        out.error = validation.error
    elif generation is not None and generation.truncated:
        out.error = InvalidSQL("the model ran out of tokens before the query ended (raise max_tokens)",
                               code="truncated_sql")
    else:
        run_start = time.perf_counter()
        try:
            out.result = run_validated(source, validation.sql, max_rows, timeout_s, explain_only=not execute)
            out.executed = execute
        except Text2SQLError as exc:
            out.error = exc
        timings["execution_ms"] = (time.perf_counter() - run_start) * 1000
    timings["total_ms"] = sum(v for k, v in timings.items() if k != "total_ms")
    return out


def ask(source: Source, question: str, generator: SQLGenerator, *, constrained: bool = True, execute: bool = True,
        max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> AskResult:
    """Question in, rows out (see :class:`AskResult`)."""
    generation = generator.generate(source, question, constrained=constrained)
    return run_sql(source, generation.sql, execute=execute, max_rows=max_rows, timeout_s=timeout_s,
                   question=question, generation=generation)


async def aask(source: Source, question: str, generator: SQLGenerator, *, constrained: bool = True,
               execute: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> AskResult:
    """:func:`ask` for an event loop: the model call is awaited, the database work runs in a thread."""
    generation = await generator.agenerate(source, question, constrained=constrained)
    return await asyncio.to_thread(run_sql, source, generation.sql, execute=execute, max_rows=max_rows,
                                   timeout_s=timeout_s, question=question, generation=generation)


async def arun_sql(source: Source, sql: str, **kwargs: Any) -> AskResult:
    """:func:`run_sql` off the event loop."""
    return await asyncio.to_thread(run_sql, source, sql, **kwargs)
