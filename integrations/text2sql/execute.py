"""Running a validated SELECT: EXPLAIN first, then execute read-only, under a time limit and a row cap.

SQLite (first-class) runs on its own sqlite3 connection opened with ``mode=ro`` plus an authorizer
that allows only reads, so even SQL that slipped past :mod:`.validate` cannot write, attach or
change pragmas. The time limit is a progress handler that aborts the VM once the deadline passes;
it fires every few thousand VM instructions, so a runaway cross join or recursive CTE stops within
milliseconds of the limit rather than at some later fetch.

Other backends run through SQLAlchemy inside a transaction that is always rolled back; PostgreSQL and
MySQL additionally get ``SET TRANSACTION READ ONLY`` and a server-side statement timeout.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from integrations.text2sql.errors import ExecutionError, InvalidSQL, QueryTimeout, UnsafeSQL
from integrations.text2sql.sources import Source
from integrations.text2sql.validate import check_sql

DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_S = 5.0
_PROGRESS_EVERY = 2000  # VM instructions between deadline checks (microseconds of work each)

# sqlite3 authorizer action codes a read-only query may need; everything else is denied.
_ALLOWED_ACTIONS = frozenset({
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
})
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than ``max_rows``
    plan: list[str] = field(default_factory=list)
    execution_ms: float = 0.0

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": [[jsonable(v) for v in row] for row in self.rows],
            "row_count": self.row_count,
            "truncated": self.truncated,
            "plan": self.plan,
            "execution_ms": round(self.execution_ms, 3),
        }


def jsonable(value: Any) -> Any:
    """A JSON-safe form of a database value (bytes as hex, decimals as float, dates as ISO)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, _dt.date | _dt.datetime | _dt.time):
        return value.isoformat()
    return str(value)


def _authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class _Deadline:
    """A progress handler that aborts the statement after ``timeout_s`` seconds."""

    def __init__(self, timeout_s: float):
        self.deadline = time.monotonic() + timeout_s
        self.hit = False

    def __call__(self) -> int:
        if time.monotonic() > self.deadline:
            self.hit = True
            return 1  # non-zero aborts the running statement with "interrupted"
        return 0


def _sqlite_error(exc: sqlite3.Error, deadline: _Deadline, timeout_s: float, phase: str) -> Exception:
    if deadline.hit or "interrupted" in str(exc):
        return QueryTimeout(f"query cancelled after the {timeout_s:g} s time limit")
    text = str(exc).lower()
    if "authoriz" in text or "readonly" in text or "read-only" in text or "query_only" in text:
        return UnsafeSQL(f"refused by the read-only connection: {exc}")
    if phase == "explain":
        return InvalidSQL(f"the database rejected the query: {exc}")
    return ExecutionError(f"query failed: {exc}")


def _run_sqlite(source: Source, sql: str, max_rows: int, timeout_s: float, explain_only: bool) -> QueryResult:
    con = source.connect_readonly(timeout_s)
    deadline = _Deadline(timeout_s)
    try:
        con.set_authorizer(_authorizer)
        con.set_progress_handler(deadline, _PROGRESS_EVERY)
        phase = "explain"
        try:
            # EXPLAIN QUERY PLAN compiles the statement against the live schema without running it:
            # unknown tables/columns, misused aggregates and wrong function arities fail here.
            plan = [str(row[-1]) for row in con.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()]
            if explain_only:
                return QueryResult([], [], False, plan)
            phase = "execute"
            start = time.perf_counter()
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description or ()]
            rows = cur.fetchmany(max_rows + 1)
            elapsed = (time.perf_counter() - start) * 1000
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, deadline, timeout_s, phase) from None
        truncated = len(rows) > max_rows
        return QueryResult(columns, [tuple(r) for r in rows[:max_rows]], truncated, plan, elapsed)
    finally:
        con.close()


def _run_sqlalchemy(source: Source, sql: str, max_rows: int, timeout_s: float, explain_only: bool) -> QueryResult:
    dialect = source.dialect
    timer: threading.Timer | None = None
    try:
        with source.engine.connect() as conn:
            # Read-only transaction and server-side timeout where the backend has them; the
            # transaction is rolled back whatever happens, so even a permissive backend keeps nothing.
            if dialect == "postgresql":
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(timeout_s * 1000)}")
            elif dialect in ("mysql", "mariadb"):
                conn.exec_driver_sql(f"SET SESSION max_execution_time = {int(timeout_s * 1000)}")
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            else:
                raw = conn.connection.dbapi_connection
                cancel = getattr(raw, "interrupt", None) or getattr(raw, "cancel", None)
                if cancel is not None:
                    timer = threading.Timer(timeout_s, cancel)
                    timer.daemon = True
                    timer.start()
            try:
                explain = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
                plan = [" ".join(str(v) for v in row) for row in conn.exec_driver_sql(explain + sql).all()]
            except sa.exc.DBAPIError as exc:
                raise InvalidSQL(f"the database rejected the query: {exc.orig}") from None
            if explain_only:
                conn.rollback()
                return QueryResult([], [], False, plan)
            start = time.perf_counter()
            result = conn.exec_driver_sql(sql)
            columns = list(result.keys())
            rows = result.fetchmany(max_rows + 1)
            elapsed = (time.perf_counter() - start) * 1000
            conn.rollback()
    except sa.exc.DBAPIError as exc:
        text = str(exc.orig).lower()
        if "timeout" in text or "cancel" in text or "interrupt" in text or "max_execution_time" in text:
            raise QueryTimeout(f"query cancelled after the {timeout_s:g} s time limit") from None
        if "read-only" in text or "readonly" in text or "read only" in text:
            raise UnsafeSQL(f"refused by the read-only transaction: {exc.orig}") from None
        raise ExecutionError(f"query failed: {exc.orig}") from None
    finally:
        if timer is not None:
            timer.cancel()
    truncated = len(rows) > max_rows
    return QueryResult(columns, [tuple(r) for r in rows[:max_rows]], truncated, plan, elapsed)


def run_validated(source: Source, sql: str, max_rows: int = DEFAULT_MAX_ROWS,
                  timeout_s: float = DEFAULT_TIMEOUT_S, *, explain_only: bool = False) -> QueryResult:
    """EXPLAINs and runs SQL that already passed :func:`validate_sql` (the caller's promise; the
    read-only connection still refuses writes if the promise is broken)."""
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    runner = _run_sqlite if source.is_sqlite else _run_sqlalchemy
    return runner(source, sql, max_rows, timeout_s, explain_only)


def run_query(source: Source, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
    """Validates, EXPLAINs and runs ``sql`` on ``source``.

    Raises :class:`UnsafeSQL`/:class:`InvalidSQL` for refused SQL, :class:`QueryTimeout` past the
    limit, :class:`ExecutionError` for other database failures.
    """
    return run_validated(source, check_sql(sql, source.dialect).sql, max_rows, timeout_s)


def explain(source: Source, sql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """The query plan of ``sql``; raises :class:`InvalidSQL` when the database rejects it."""
    return run_validated(source, check_sql(sql, source.dialect).sql, 0, timeout_s, explain_only=True).plan
