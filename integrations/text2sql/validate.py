"""Static validation: is this text exactly one read-only SELECT?

The grammar already makes writes unsayable, but SQL also arrives from unconstrained decoding, from
upstream servers and from callers who hand SQL in directly, so every statement passes through here
before it reaches a database. The check is an allow-list at the top (the statement must be a query:
SELECT or a set operation of SELECTs) and a deny-list over the whole tree (no DML or DDL anywhere,
which catches ``WITH d AS (DELETE ... RETURNING *) SELECT ...``, ``SELECT ... INTO``, ``FOR UPDATE``
and functions that touch files or server state). The database's own read-only mode is the second,
independent line of defence (:mod:`.execute`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from integrations.text2sql.errors import InvalidSQL, Text2SQLError, UnsafeSQL

# Statement or clause node types that write, change schema or session state, or lock rows.
_FORBIDDEN_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name)
    for name in (
        "Insert", "Update", "Delete", "Merge", "Drop", "Create", "Alter", "TruncateTable", "Command",
        "Pragma", "Attach", "Detach", "Transaction", "Commit", "Rollback", "Into", "Lock", "Set",
        "Use", "Analyze", "Copy", "LoadData", "Grant", "Revoke", "Kill",
    )
    if hasattr(exp, name)
)

# Functions with side effects or file/server access, by lower-case name, across dialects.
FORBIDDEN_FUNCTIONS = frozenset({
    # SQLite
    "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
    # PostgreSQL
    "pg_sleep", "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
    "lo_unlink", "dblink", "dblink_exec", "pg_terminate_backend", "pg_cancel_backend", "set_config",
    "pg_reload_conf", "pg_rotate_logfile", "nextval", "setval", "pg_advisory_lock", "query_to_xml",
    # MySQL
    "sleep", "benchmark", "load_file", "get_lock", "release_lock",
    # SQL Server
    "xp_cmdshell", "openrowset", "opendatasource",
})

_TRAILING = re.compile(r"[\s;]+$")
# SQLAlchemy backend names that sqlglot spells differently; unknown ones parse as generic SQL.
_SQLGLOT_DIALECTS = {"postgresql": "postgres", "mssql": "tsql", "mariadb": "mysql", "sqlite": "sqlite"}
_LOG = logging.getLogger(__name__)


@dataclass
class Validation:
    """The verdict on one SQL text. ``sql`` is the statement as it will run (no trailing ``;``)."""

    ok: bool
    sql: str
    error: Text2SQLError | None = None
    tables: list[str] = field(default_factory=list)
    ordered: bool = False  # the outermost query has ORDER BY (row order is part of the answer)

    def raise_for_error(self) -> Validation:
        if self.error is not None:
            raise self.error
        return self

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "error": self.error.to_dict() if self.error else None,
            "tables": self.tables,
            "ordered": self.ordered,
        }


def _function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def sqlglot_dialect(dialect: str | None) -> str | None:
    """sqlglot's name for a SQLAlchemy backend name (None: sqlglot's generic dialect)."""
    if not dialect:
        return None
    name = _SQLGLOT_DIALECTS.get(dialect, dialect)
    try:
        sqlglot.Dialect.get_or_raise(name)
    except ValueError:
        return None
    return name


def _parse(sql: str, dialect: str) -> list[exp.Expression]:
    # sqlglot logs a warning when it falls back to a generic Command; the verdict below covers it.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return [s for s in sqlglot.parse(sql, read=sqlglot_dialect(dialect)) if s is not None]
    finally:
        logger.setLevel(level)


def validate_sql(sql: str, dialect: str = "sqlite") -> Validation:
    """Checks ``sql`` without raising; ``Validation.error`` says what is wrong."""
    text = _TRAILING.sub("", (sql or "").strip())
    if not text:
        return Validation(False, text, InvalidSQL("empty SQL"))
    try:
        statements = _parse(text, dialect)
    except (ParseError, TokenError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Validation(False, text, InvalidSQL(f"SQL does not parse: {first}"))
    if len(statements) != 1:
        kind = "no statement" if not statements else f"{len(statements)} statements"
        return Validation(False, text, UnsafeSQL(f"expected exactly one SELECT statement, got {kind}"))
    tree = statements[0]
    if not isinstance(tree, exp.Query) or isinstance(tree, exp.Values):
        # The first word names the statement better than sqlglot's fallback node (Command, Column).
        first = text.split(None, 1)[0].upper()
        return Validation(False, text, UnsafeSQL(f"only SELECT queries are allowed, got a {first} statement"))
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            what = node.key.upper()
            return Validation(False, text, UnsafeSQL(f"{what} is not allowed: only read-only SELECT queries run"))
        if isinstance(node, exp.Func) and _function_name(node) in FORBIDDEN_FUNCTIONS:
            return Validation(False, text, UnsafeSQL(f"function {_function_name(node)}() is not allowed"))
    cte_names = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    tables = sorted({t.name for t in tree.find_all(exp.Table) if t.name and t.name not in cte_names})
    ordered = tree.args.get("order") is not None
    return Validation(True, text, None, tables, ordered)


def check_sql(sql: str, dialect: str = "sqlite") -> Validation:
    """Like :func:`validate_sql` but raises :class:`InvalidSQL` / :class:`UnsafeSQL`."""
    return validate_sql(sql, dialect).raise_for_error()
