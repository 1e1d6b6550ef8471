"""Errors of the text-to-SQL core, each with a stable machine-readable ``code``.

The gateway maps them to HTTP responses (``code`` goes into the OpenAI-style error body), the
CLI prints ``message``. Every error a caller can cause is one of these, so nothing upstream has
to know about sqlite3, SQLAlchemy or sqlglot exception types.
"""

from __future__ import annotations


class Text2SQLError(Exception):
    """Base class: ``message`` for humans, ``code`` for programs."""

    code = "text2sql_error"
    # The HTTP status the gateway should answer with; a hint, the gateway decides.
    status = 400

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class UnknownSource(Text2SQLError):
    """No data source is registered under the requested name."""

    code = "unknown_source"
    status = 404


class DuplicateSource(Text2SQLError):
    """A source with that name exists and ``replace`` was not asked for."""

    code = "duplicate_source"
    status = 409


class BadSourceURL(Text2SQLError):
    """The SQLAlchemy URL does not parse, names a missing driver, or points at nothing."""

    code = "bad_source_url"


class SourceUnavailable(Text2SQLError):
    """The URL is well formed but the database could not be reached or introspected."""

    code = "source_unavailable"
    status = 503


class InvalidSQL(Text2SQLError):
    """The SQL does not parse, or the database rejected it (unknown column, bad function...)."""

    code = "invalid_sql"


class UnsafeSQL(Text2SQLError):
    """The SQL parses but is not a single read-only SELECT (a write, DDL, PRAGMA, ATTACH...)."""

    code = "unsafe_sql"


class QueryTimeout(Text2SQLError):
    """The query ran past its time limit and was interrupted."""

    code = "query_timeout"
    status = 408


class ExecutionError(Text2SQLError):
    """The database failed while running an accepted query (not a timeout)."""

    code = "execution_error"


class GenerationError(Text2SQLError):
    """The model call failed or returned no SQL at all."""

    code = "generation_error"
    status = 502
