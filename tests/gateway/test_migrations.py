"""Schema migrations (Alembic, gateway/migrations/) on SQLite and on a real PostgreSQL server: a new
database comes out equal to the tables the code declares; databases made by the pre-Alembic code,
at its version 1 (before versions were recorded) and its version 2, upgrade in place keeping their
rows; a database newer than this code is refused; replicas starting together migrate once."""

import asyncio
import time
from datetime import datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Column, DateTime, Integer, MetaData, String, Table, insert, select, text

import gateway.tables  # noqa: F401  registers every table on Base.metadata
from gateway.db import Base, Database
from gateway.migrations import LEGACY_GUARD, alembic_config, head, upgrade
from gateway.tables.responses import StoredResponse
from gateway.tables.text2sql import Text2SQLSchedule


async def _run_sync(url: str, fn):
    """Runs `fn(sync_connection)` in one transaction of the gateway's own (async) engine."""
    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            return await conn.run_sync(fn)
    finally:
        await db.dispose()


def _v1_schema(conn) -> None:
    """The schema as first released (version 1), before versions were recorded, with one row."""
    meta = MetaData()
    Table("api_keys", meta, Column("id", Integer, primary_key=True), Column("name", String(200), nullable=False),
          Column("key_hash", String(64), nullable=False, unique=True, index=True),
          Column("created_at", DateTime, nullable=False), Column("revoked", gateway.tables.ApiKey.revoked.type,
                                                                 nullable=False))
    responses = Table("responses", meta, Column("id", String(64), primary_key=True),
                      Column("created_at", DateTime, nullable=False), Column("model", String(200), nullable=False),
                      Column("status", String(32), nullable=False),
                      Column("previous_response_id", String(64), index=True),
                      Column("conversation", JSON, nullable=False), Column("body", JSON, nullable=False))
    meta.create_all(conn)
    conn.execute(insert(responses).values(id="resp_old", created_at=datetime(2025, 1, 1), model="m",
                                          status="completed", conversation=[], body={"id": "resp_old"}))


def _v2_schema(conn) -> None:
    """The pre-Alembic code's version 2: today's tables, `schema_version` 2, no Alembic table."""
    from alembic import command

    command.upgrade(alembic_config(conn), "0002")
    conn.execute(text("DROP TABLE alembic_version"))
    conn.execute(text("CREATE TABLE schema_version (version INTEGER NOT NULL)"))
    conn.execute(text("INSERT INTO schema_version VALUES (2)"))
    # In SQL: the table declared today has columns (created_by) that version 2 did not.
    conn.execute(text("INSERT INTO text2sql_schedules (id, created_at, cron, source, question, execute, max_rows, "
                      "constrained, next_run_at) VALUES ('t2ssched_old', :t, '0 * * * *', 'demo_shop', 'q', true, 10, "
                      "true, :n)"), {"t": time.time(), "n": time.time() + 3600})


def _state(conn) -> dict:
    """Where the schema stands, and what differs from the tables the code declares."""
    context = MigrationContext.configure(conn, opts={"include_name": lambda name, kind, _p: name != "schema_version"})
    return {"heads": context.get_current_heads(), "diff": compare_metadata(context, Base.metadata),
            "schema_version": conn.execute(text("SELECT version FROM schema_version")).scalars().all()}


async def test_a_new_database_is_created_at_head_equal_to_the_declared_tables(db_url):
    for _ in range(2):  # the second start finds nothing to do
        db = Database(db_url)
        await db.create_all()
        await db.dispose()
    state = await _run_sync(db_url, _state)
    assert state == {"heads": (head(),), "diff": [], "schema_version": [LEGACY_GUARD]}


@pytest.mark.parametrize("legacy", [_v1_schema, _v2_schema], ids=["version-1", "version-2"])
async def test_a_pre_alembic_database_upgrades_in_place(db_url, legacy):
    await _run_sync(db_url, legacy)
    db = Database(db_url)
    await db.create_all()
    async with db.sessions() as session:
        if legacy is _v1_schema:
            old = await session.scalar(select(StoredResponse).where(StoredResponse.id == "resp_old"))
            assert old is not None and old.background is False and old.request is None and old.owner is None
        else:
            assert await session.get(Text2SQLSchedule, "t2ssched_old") is not None
    await db.dispose()
    state = await _run_sync(db_url, _state)
    assert state == {"heads": (head(),), "diff": [], "schema_version": [LEGACY_GUARD]}


def _v0006_rows(conn) -> None:
    """A database at revision 0006 (before owners were recorded) holding one object of each owned kind."""
    from alembic import command

    command.upgrade(alembic_config(conn), "0006")
    t = time.time()
    conn.execute(text("INSERT INTO files (id, created_at, filename, purpose, bytes) "
                      "VALUES ('file-old', :t, 'a.jsonl', 'batch', 1)"), {"t": t})
    conn.execute(text("INSERT INTO batches (id, created_at, endpoint, input_file_id, completion_window, status, "
                      "total, completed, failed, input_tokens, cached_tokens, output_tokens) VALUES ('batch_old', :t, "
                      "'/v1/chat/completions', 'file-old', '24h', 'completed', 0, 0, 0, 0, 0, 0)"), {"t": t})
    conn.execute(text("INSERT INTO text2sql_sources (name, url, description, created_at) "
                      "VALUES ('old', 'sqlite:///x.db', '', :t)"), {"t": t})
    conn.execute(text(
        "INSERT INTO text2sql_schedules (id, created_at, cron, source, question, execute, max_rows, constrained, "
        "candidates, next_run_at) VALUES ('t2ssched_old', :t, '0 * * * *', 'old', 'q', true, 10, true, 1, :n)"),
        {"t": t, "n": t + 3600})
    conn.execute(text("INSERT INTO responses (id, created_at, model, status, conversation, body, background) "
                      "VALUES ('resp_old', :d, 'm', 'completed', '[]', '{}', false)"), {"d": datetime(2025, 1, 1)})


async def test_revision_0007_gives_existing_objects_to_the_admin(db_url):
    await _run_sync(db_url, _v0006_rows)
    db = Database(db_url)
    await db.create_all()
    await db.dispose()

    def owners(conn) -> set:
        return {(table, conn.execute(text(f"SELECT created_by FROM {table}")).scalar_one()) for table in (
            "files", "batches", "responses", "text2sql_sources", "text2sql_schedules")}

    assert {owner for _, owner in await _run_sync(db_url, owners)} == {"admin"}
    state = await _run_sync(db_url, _state)
    assert state == {"heads": (head(),), "diff": [], "schema_version": [LEGACY_GUARD]}


async def test_a_newer_database_is_refused(db_url):
    db = Database(db_url)
    await db.create_all()
    async with db.engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_from_the_future'"))
    with pytest.raises(RuntimeError, match="newer than this sllm"):
        await db.create_all()
    await db.dispose()


async def test_a_newer_pre_alembic_version_is_refused(tmp_path):
    path = str(tmp_path / "sllm.db")

    def future(conn) -> None:
        conn.execute(text("CREATE TABLE schema_version (version INTEGER NOT NULL)"))
        conn.execute(text(f"INSERT INTO schema_version VALUES ({LEGACY_GUARD + 1})"))

    await _run_sync(path, future)
    with pytest.raises(RuntimeError, match="newer than this sllm"):
        await _run_sync(path, upgrade)


async def test_replicas_starting_together_migrate_once(postgres):
    url = postgres.new_database()
    databases = [Database(url) for _ in range(4)]
    try:
        # Without the advisory lock, all four would create the same tables and three would fail.
        await asyncio.gather(*(db.create_all() for db in databases))
    finally:
        for db in databases:
            await db.dispose()
    state = await _run_sync(url, _state)
    assert state["heads"] == (head(),) and state["diff"] == []


def test_the_migrations_ship_inside_the_package():
    from importlib.resources import files

    folder = files("gateway.migrations")
    assert folder.joinpath("env.py").is_file() and folder.joinpath("script.py.mako").is_file()
    assert sorted(p.name for p in folder.joinpath("versions").iterdir() if p.name[0].isdigit()) == [
        "0001_first_release.py", "0002_baseline.py", "0003_leases.py", "0004_rate_limits.py",
        "0005_run_attempts.py", "0006_text2sql_candidates.py", "0007_owners.py",
        "0008_schedule_disabled.py"]


def test_database_urls_get_the_async_drivers(tmp_path):
    from gateway.db import database_url

    assert database_url(str(tmp_path / "a.db")) == f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"
    assert database_url("sqlite:////tmp/x.db") == "sqlite+aiosqlite:////tmp/x.db"
    assert database_url("postgresql://u:p@db:5432/sllm") == "postgresql+asyncpg://u:p@db:5432/sllm"
    assert database_url("postgres://u@db/sllm") == "postgresql+asyncpg://u@db/sllm"
    assert database_url("postgresql+asyncpg://u@db/sllm") == "postgresql+asyncpg://u@db/sllm"
