"""The gateway's database: SQLAlchemy 2.0 typed ORM over SQLite (WAL) or any async SQLAlchemy URL.

Tables live in `gateway/tables/`, one module per concept, all on `Base` (gateway/tables/base.py); the schema
itself is made and changed by Alembic revisions (`gateway/migrations/`), which `Database.create_all` applies.
Routes get a session per request through the `db_session` dependency; background work opens its own with
`database.sessions()`."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_core import to_json
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from gateway.tables.base import Base

__all__ = ["Base", "Database", "JSONText", "database_url", "json_in_pieces"]


def database_url(path_or_url: str) -> str:
    """`--db` takes a file path (SQLite) or a SQLAlchemy URL; plain SQLite and PostgreSQL URLs get
    the async drivers (aiosqlite, asyncpg)."""
    if "://" not in path_or_url:
        path = Path(path_or_url).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{path}"
    if path_or_url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + path_or_url[len("sqlite://"):]
    for plain in ("postgresql://", "postgres://"):  # the server is async: asyncpg is the driver we ship
        if path_or_url.startswith(plain):
            return "postgresql+asyncpg://" + path_or_url[len(plain):]
    return path_or_url


class JSONText(str):
    """A value already written as JSON (json_in_pieces): a JSON column stores it as it is."""


def _json_serializer(value: Any) -> str:
    # SQLAlchemy writes JSON columns with json.dumps when the statement runs, on the event loop.
    return str(value) if isinstance(value, JSONText) else json.dumps(value)


def json_in_pieces(value: Any) -> JSONText:
    """`value` as JSON for a JSON column, written in a worker thread (asyncio.to_thread) so a large value
    does not stall the event loop. One serializer call holds the GIL until it returns (json.dumps: 0.6 s
    for a batch line of 1,024 384-float vectors), so the loop would wait just the same, whichever thread
    ran it; here each list item and dict value is its own call, and between calls the loop gets the GIL.
    pydantic-core writes the pieces (8x json.dumps's speed on floats); a NaN or an infinity as null, as an
    output file has them anyway (and PostgreSQL's json refuses json.dumps's NaN)."""

    def write(v: Any) -> str:
        if isinstance(v, list) and len(v) > 1 and isinstance(v[0], dict | list):
            return "[" + ",".join(write(x) for x in v) + "]"
        if isinstance(v, dict) and len(v) > 1 and all(isinstance(k, str) for k in v):
            return "{" + ",".join(to_json(k).decode() + ":" + write(x) for k, x in v.items()) + "}"
        return to_json(v, inf_nan_mode="null").decode()

    return JSONText(write(value))


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets readers (GET /v1/responses/{id}) proceed while a writer commits; NORMAL sync is
    # durable across a process crash, which is the failure we guard against.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


class Database:
    def __init__(self, path_or_url: str):
        self.url = database_url(path_or_url)
        # A server database (PostgreSQL): connections checked before use, so a database restart costs
        # no failed request; more of them than the default 5 + 10, as jobs, their heartbeats and the
        # requests each hold one at times.
        server = {} if self.url.startswith("sqlite") else {"pool_pre_ping": True, "pool_size": 10, "max_overflow": 30}
        self.engine: AsyncEngine = create_async_engine(self.url, json_serializer=_json_serializer, **server)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    async def create_all(self) -> None:
        """Creates or upgrades the schema to the latest Alembic revision (gateway/migrations/)."""
        from gateway.migrations import upgrade

        async with self.engine.begin() as conn:
            await conn.run_sync(upgrade)

    async def session(self) -> AsyncIterator[AsyncSession]:
        async with self.sessions() as session:
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()
