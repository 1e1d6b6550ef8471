"""Data sources: a named SQLAlchemy URL with a cached schema, opened read-only.

SQLite is first-class: its file is opened with ``mode=ro`` (the OS-level guarantee that nothing is
written) for introspection and execution alike. Any other backend SQLAlchemy has a driver for works
through the same interface; its read-only-ness is the transaction's (see :mod:`.execute`).

The URL can hold credentials, so it is never echoed: :meth:`Source.redacted_url` and
:meth:`Source.to_dict` are what an API may return.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import NullPool

from integrations.text2sql.errors import BadSourceURL, SourceUnavailable
from integrations.text2sql.grammar import GrammarOptions, sql_grammar
from integrations.text2sql.schema import Schema, introspect
from integrations.text2sql.value_hints import ValueIndex

log = logging.getLogger(__name__)

MAX_VALUE_BYTES = 16 * 1024 * 1024  # the largest string or blob a text-to-SQL query may build or read (SQLite)

# What a source connects to in place of its URL: the same URL, or one pinned to checked addresses and
# paths; it raises BadSourceURL for a target a server's policy refuses (gateway/security/source_policy.py).
URLGuard = Callable[[URL], URL]

# Query-string keys that carry secrets in some drivers' URLs (``?password=...``, tokens for cloud DBs).
_SECRET_KEYS = ("password", "passwd", "pwd", "secret", "token", "key", "credential")


def redact_url(url: str | URL) -> str:
    """The URL with its password and secret-looking query parameters replaced by ``***``."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except Exception:
        return "<unparseable url>"
    query = {
        k: ("***" if any(s in k.lower() for s in _SECRET_KEYS) else v) for k, v in parsed.query.items()
    }
    return parsed.set(query=query).render_as_string(hide_password=True)


def parse_url(url: str) -> URL:
    """Parses a SQLAlchemy URL, refusing the ones that cannot work before anything connects."""
    if not isinstance(url, str) or not url.strip():
        raise BadSourceURL("the source URL is empty")
    try:
        parsed = make_url(url.strip())
    except Exception as exc:  # ArgumentError for garbage, ValueError for a bad port
        raise BadSourceURL(f"not a SQLAlchemy URL ({redact_url(url)}): {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or db.startswith("file::memory:"):
            raise BadSourceURL("an in-memory SQLite database has no data to query; give a file path")
    return parsed


def _sqlite_file(url: URL) -> tuple[str, bool]:
    """(path or ``file:`` URI, is_uri) of a SQLite URL."""
    db = url.database or ""
    return db, db.startswith("file:")


def sqlite_readonly_uri(url: URL) -> str:
    """A ``file:...?mode=ro`` URI for the SQLite database of ``url``; ``mode`` is forced to ``ro``."""
    db, is_uri = _sqlite_file(url)
    if is_uri:
        base, _, query = db[len("file:"):].partition("?")
        params = [p for p in query.split("&") if p and not p.startswith("mode=")]
        return "file:" + base + "?" + "&".join([*params, "mode=ro"])
    path = Path(db).expanduser().resolve()
    return "file:" + quote(str(path)) + "?mode=ro"


def connect_sqlite_readonly(url: URL, timeout_s: float = 5.0) -> sqlite3.Connection:
    """A read-only sqlite3 connection: ``mode=ro`` at open, ``query_only`` on top, no ATTACH.

    ``mode=ro`` makes SQLite refuse every write with "attempt to write a readonly database";
    ``query_only`` also covers what ``mode=ro`` lets through (e.g. a temp table); an ATTACH limit of
    0 stops a statement from opening another file."""
    uri = sqlite_readonly_uri(url)
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False)
        con.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise BadSourceURL(f"cannot open SQLite database {redact_url(url)} read-only: {exc}") from None
    con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    # SQLite's own cap is 1 GB a value, and one call (randomblob, zeroblob, replace) builds it without the
    # progress handler that enforces the time limit ever running: a query could take a second and a GB.
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    return con


class Source:
    """One queryable database: name, URL (secret), cached schema and grammar.

    Thread-safe: the gateway may introspect and run queries for one source from several threads.
    """

    def __init__(self, name: str, url: str, description: str = "", *, db_schema: str | None = None,
                 native_ddl: bool = True, guard: URLGuard | None = None, extra: dict[str, Any] | None = None):
        if not name or not isinstance(name, str):
            raise BadSourceURL("a source needs a non-empty name", code="bad_source_name")
        self.name = name
        self.description = description
        self.db_schema = db_schema  # the database-side schema (PostgreSQL namespace), not ours
        self.native_ddl = native_ddl
        self._url = parse_url(url)
        self._guard = guard
        self.extra = dict(extra or {})  # what the store keeps beside the URL (the gateway: who made it)
        self._engine: Engine | None = None
        self._schema: Schema | None = None
        self._grammars: dict[GrammarOptions | None, str] = {}
        self._values: tuple[float, ValueIndex] | None = None  # (read at, index)
        self._lock = threading.RLock()

    # -- identity ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The full URL, credentials included: for connecting and storing, never for responses."""
        return self._url.render_as_string(hide_password=False)

    def redacted_url(self) -> str:
        return redact_url(self._url)

    @property
    def dialect(self) -> str:
        return self._url.get_backend_name()

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def __repr__(self) -> str:
        return f"Source({self.name!r}, {self.redacted_url()!r})"

    # -- connections -------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (read-only sqlite3 connections for SQLite); created on first use."""
        with self._lock:
            if self._engine is None:
                self._engine = self._create_engine()
            return self._engine

    def _target(self) -> URL:
        """The URL connections go to: the guard's answer, asked before anything connects."""
        return self._guard(self._url) if self._guard is not None else self._url

    def _create_engine(self) -> Engine:
        url = self._target()
        try:
            if self.is_sqlite:
                return sa.create_engine("sqlite://", creator=lambda: connect_sqlite_readonly(url),
                                        poolclass=NullPool)
            return sa.create_engine(url, pool_pre_ping=True)
        except (ImportError, sa.exc.NoSuchModuleError) as exc:
            raise BadSourceURL(
                f"no driver for {self.redacted_url()}: {exc} (install the DBAPI package for this dialect)"
            ) from None
        except sa.exc.ArgumentError as exc:
            raise BadSourceURL(f"bad source URL {self.redacted_url()}: {exc}") from None

    def connect_readonly(self, timeout_s: float = 5.0) -> sqlite3.Connection:
        """A fresh read-only sqlite3 connection (SQLite sources only)."""
        assert self.is_sqlite, "connect_readonly is for SQLite sources"
        return connect_sqlite_readonly(self._target(), timeout_s)

    # -- schema ------------------------------------------------------------------------------------
    def schema(self, refresh: bool = False) -> Schema:
        """The introspected schema, cached until ``refresh`` (call it after migrations)."""
        with self._lock:
            if self._schema is None or refresh:
                self._schema = self._introspect()
                self._grammars.clear()
                self._values = None
            return self._schema

    def refresh(self) -> Schema:
        return self.schema(refresh=True)

    def _introspect(self) -> Schema:
        engine = self.engine
        try:
            schema = introspect(engine, schema=self.db_schema)
        except BadSourceURL:  # raised by the read-only creator (a missing SQLite file); SQLAlchemy passes it on
            raise
        except sa.exc.DBAPIError as exc:
            raise SourceUnavailable(f"cannot read the schema of {self.name!r}: {exc.orig}") from None
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            raise SourceUnavailable(f"cannot read the schema of {self.name!r}: {exc}") from None
        if not schema.tables:
            raise SourceUnavailable(f"source {self.name!r} ({self.redacted_url()}) has no tables")
        return schema

    def ddl(self, refresh: bool = False) -> str:
        """The schema as prompt text (CREATE TABLE statements)."""
        return self.schema(refresh).to_ddl(native=self.native_ddl)

    def grammar(self, options: GrammarOptions | None = None) -> str:
        """The EBNF for constrained decoding over this source's live schema (cached with it)."""
        with self._lock:
            schema = self.schema()
            if options not in self._grammars:
                self._grammars[options] = sql_grammar(schema, options)
            return self._grammars[options]

    VALUES_TTL_S = 600.0  # stored values change faster than a schema: re-read them now and then

    def values(self) -> ValueIndex:
        """The text values of the source's tables, for value hints (:mod:`.value_hints`); cached for
        :attr:`VALUES_TTL_S`. A database that refuses the reads gives an empty index: hints are a help,
        never a reason for a question to fail."""
        with self._lock:
            schema = self.schema()
            if self._values is None or time.monotonic() - self._values[0] > self.VALUES_TTL_S:
                try:
                    index = ValueIndex.from_engine(self.engine, schema, self.db_schema)
                except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
                    log.warning("text2sql: no value hints for source %r: %s", self.name, exc)
                    index = ValueIndex({})
                self._values = (time.monotonic(), index)
            return self._values[1]

    # -- serialisation -----------------------------------------------------------------------------
    def spec(self) -> SourceSpec:
        return SourceSpec(self.name, self.url, self.description, self.db_schema, self.extra)

    def to_dict(self, with_schema: bool = False) -> dict[str, Any]:
        """A JSON-ready description without credentials."""
        out: dict[str, Any] = {
            "name": self.name,
            "url": self.redacted_url(),
            "dialect": self.dialect,
            "description": self.description,
        }
        if with_schema:
            schema = self.schema()
            out["tables"] = {t.name: t.column_names for t in schema.tables}
            out["ddl"] = self.ddl()
        return out

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


@dataclass(frozen=True)
class SourceSpec:
    """What a registry stores for one source: plain data, credentials included (store it safely)."""

    name: str
    url: str
    description: str = ""
    db_schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def open(self, guard: URLGuard | None = None) -> Source:
        return Source(self.name, self.url, self.description, db_schema=self.db_schema, guard=guard, extra=self.extra)


def demo_source(schema: str) -> Source:
    """A source over one of the shipped demo databases (built into the cache on first use)."""
    from integrations.text2sql.dataset import demo_database

    try:
        path = demo_database(schema)
    except KeyError as exc:
        raise BadSourceURL(str(exc.args[0]), code="unknown_demo_schema") from None
    return Source(f"demo-{schema}", f"sqlite:///{path}", f"demo database {schema!r}")
