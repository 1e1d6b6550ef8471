"""Where registered sources live: a small store interface and a registry of live :class:`Source`\\ s.

Storage is pluggable because the gateway owns the application database: it backs
:class:`SourceStore` with its own SQLAlchemy table (or passes plain functions to
:class:`FunctionSourceStore`). :class:`MemorySourceStore` serves tests and embedded use,
:class:`JsonFileSourceStore` the CLI.

The registry keeps one live :class:`Source` per stored spec so the schema is introspected once, and
rebuilds it when the stored URL changes. An async caller that loads specs itself (an async session)
skips the store and calls :meth:`SourceRegistry.source_for` with the spec it loaded.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from integrations.text2sql.errors import DuplicateSource, UnknownSource
from integrations.text2sql.sources import Source, SourceSpec, URLGuard


@runtime_checkable
class SourceStore(Protocol):
    """Persistence of :class:`SourceSpec` records by name."""

    def load(self, name: str) -> SourceSpec | None: ...

    def save(self, spec: SourceSpec) -> None: ...

    def delete(self, name: str) -> bool: ...

    def names(self) -> list[str]: ...


class MemorySourceStore:
    def __init__(self) -> None:
        self._specs: dict[str, SourceSpec] = {}
        self._lock = threading.Lock()

    def load(self, name: str) -> SourceSpec | None:
        return self._specs.get(name)

    def save(self, spec: SourceSpec) -> None:
        with self._lock:
            self._specs[spec.name] = spec

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._specs.pop(name, None) is not None

    def names(self) -> list[str]:
        return sorted(self._specs)


class FunctionSourceStore:
    """A store made of plain callables, e.g. closures over the gateway's session factory.

    Only ``load`` is required: a read-only store (sources managed elsewhere) leaves the rest out.
    """

    def __init__(
        self,
        load: Callable[[str], SourceSpec | None],
        save: Callable[[SourceSpec], None] | None = None,
        delete: Callable[[str], bool] | None = None,
        names: Callable[[], list[str]] | None = None,
    ):
        self._load, self._save, self._delete, self._names = load, save, delete, names

    def load(self, name: str) -> SourceSpec | None:
        return self._load(name)

    def save(self, spec: SourceSpec) -> None:
        if self._save is None:
            raise NotImplementedError("this source store is read-only")
        self._save(spec)

    def delete(self, name: str) -> bool:
        if self._delete is None:
            raise NotImplementedError("this source store is read-only")
        return self._delete(name)

    def names(self) -> list[str]:
        return self._names() if self._names is not None else []


class JsonFileSourceStore:
    """Specs in one JSON file, readable by the owner only (the URLs may hold passwords)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict]:
        if not self.path.is_file():
            return {}
        return json.loads(self.path.read_text(encoding="utf-8") or "{}")

    def _write(self, data: dict[str, dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False)
        os.replace(tmp, self.path)

    def load(self, name: str) -> SourceSpec | None:
        row = self._read().get(name)
        if row is None:
            return None
        return SourceSpec(name, row["url"], row.get("description", ""), row.get("db_schema"))

    def save(self, spec: SourceSpec) -> None:
        with self._lock:
            data = self._read()
            data[spec.name] = {"url": spec.url, "description": spec.description, "db_schema": spec.db_schema}
            self._write(data)

    def delete(self, name: str) -> bool:
        with self._lock:
            data = self._read()
            if data.pop(name, None) is None:
                return False
            self._write(data)
            return True

    def names(self) -> list[str]:
        return sorted(self._read())


def default_sources_path() -> Path:
    """``$SLLM_TEXT2SQL_SOURCES`` or ``~/.config/sllm/text2sql-sources.json`` (the CLI's store)."""
    env = os.environ.get("SLLM_TEXT2SQL_SOURCES")
    return Path(env).expanduser() if env else Path.home() / ".config" / "sllm" / "text2sql-sources.json"


class SourceRegistry:
    """Registers, looks up and caches sources by name over a :class:`SourceStore`."""

    def __init__(self, store: SourceStore | None = None,
                 guard_for: Callable[[SourceSpec], URLGuard | None] | None = None):
        """`guard_for`: the URL guard a source connects through (by its spec: a server may judge its owner)."""
        self.store: SourceStore = store if store is not None else MemorySourceStore()
        self._guard_for = guard_for or (lambda _spec: None)
        self._live: dict[str, Source] = {}
        self._lock = threading.Lock()

    def register(self, name: str, url: str, description: str = "", *, replace: bool = False,
                 db_schema: str | None = None, check: bool = True, extra: dict | None = None) -> Source:
        """Adds a source; with ``check`` it is opened and introspected first, so a broken URL is
        refused at registration (:class:`BadSourceURL` / :class:`SourceUnavailable`), not at first use."""
        spec = SourceSpec(name, url, description, db_schema, dict(extra or {}))
        source = spec.open(self._guard_for(spec))
        if not replace and self.store.load(name) is not None:
            raise DuplicateSource(f"a source named {name!r} already exists")
        if check:
            source.schema()
        self.store.save(source.spec())
        with self._lock:
            old = self._live.pop(name, None)
            self._live[name] = source
        if old is not None:
            old.close()
        return source

    def source_for(self, spec: SourceSpec) -> Source:
        """The live source of a spec the caller loaded itself; reused while name and URL match."""
        with self._lock:
            live = self._live.get(spec.name)
            if (live is not None and live.url == spec.url and live.db_schema == spec.db_schema
                    and live.extra == spec.extra):
                live.description = spec.description
                return live
            source = spec.open(self._guard_for(spec))
            self._live[spec.name] = source
        if live is not None:
            live.close()
        return source

    def get(self, name: str) -> Source:
        spec = self.store.load(name)
        if spec is None:
            known = self.store.names()
            hint = f"; registered: {', '.join(known)}" if known else "; none are registered"
            raise UnknownSource(f"no text-to-SQL source named {name!r}{hint}")
        return self.source_for(spec)

    def unregister(self, name: str) -> None:
        if not self.store.delete(name):
            raise UnknownSource(f"no text-to-SQL source named {name!r}")
        with self._lock:
            live = self._live.pop(name, None)
        if live is not None:
            live.close()

    def list(self) -> list[Source]:
        return [self.get(n) for n in self.store.names()]

    def refresh(self, name: str) -> Source:
        source = self.get(name)
        source.refresh()
        return source
