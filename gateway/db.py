"""The gateway's database: SQLAlchemy 2.0 typed ORM over SQLite (WAL) or any async SQLAlchemy URL.

Tables live in `gateway/tables/`, one module per concept, all on `Base` (gateway/tables/base.py); the schema
itself is made and changed by Alembic revisions (`gateway/migrations/`), which `Database.create_all` applies.
Routes get a session per request through the `db_session` dependency; background work opens its own with
`database.sessions()`."""

from collections.abc import AsyncIterator
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from gateway.tables.base import Base

__all__ = ["Base", "Database", "database_url"]


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
        self.engine: AsyncEngine = create_async_engine(self.url, **server)
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
