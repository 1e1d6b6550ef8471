"""Text-to-SQL: from a question to rows, safely.

Modules, one concept each: ``sources`` (a named SQLAlchemy URL, opened read-only), ``registry``
(where sources are stored), ``schema`` (introspection to DDL), ``grammar`` (the SELECT-only EBNF for
constrained decoding), ``generate`` (prompt + model call), ``validate`` (sqlglot: one read-only
SELECT), ``execute`` (EXPLAIN, time limit, row cap), ``ask`` (the whole path), ``selection``
(execution-guided choice among candidates) and ``cli``. The kit that generated the adapter's training
data, trained it and evaluates it is :mod:`integrations.text2sql.training`: it imports this package,
never the reverse. The names below are re-exported lazily so that importing ``dataset`` (the benchmarks
do) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AskResult": "ask", "aask": "ask", "ask": "ask", "arun_sql": "ask", "run_sql": "ask",
    "Text2SQLError": "errors", "UnknownSource": "errors", "DuplicateSource": "errors", "BadSourceURL": "errors",
    "SourceUnavailable": "errors", "InvalidSQL": "errors", "UnsafeSQL": "errors", "QueryTimeout": "errors",
    "ExecutionError": "errors", "GenerationError": "errors",
    "QueryResult": "execute", "explain": "execute", "run_query": "execute",
    "Generation": "generate", "SQLGenerator": "generate", "extract_sql": "generate", "llm_complete": "generate",
    "llm_complete_batch": "generate", "async_engine_complete": "generate", "openai_complete": "generate",
    "openai_acomplete": "generate",
    "GrammarOptions": "grammar", "sql_grammar": "grammar", "matches_grammar": "grammar",
    "FunctionSourceStore": "registry", "JsonFileSourceStore": "registry", "MemorySourceStore": "registry",
    "SourceRegistry": "registry", "SourceStore": "registry",
    "Schema": "schema", "introspect": "schema",
    "Source": "sources", "SourceSpec": "sources", "demo_source": "sources", "redact_url": "sources",
    "Validation": "validate", "check_sql": "validate", "validate_sql": "validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
