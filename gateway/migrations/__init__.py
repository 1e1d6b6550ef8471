"""Schema migrations with Alembic, applied by the server itself on start (and by every command that
opens the database), inside the package so they work from the wheel: revisions in `versions/`,
the environment in `env.py`.

- A new table or a change to an existing one is a revision (`alembic revision --autogenerate -m ...`
  from the repository root, against a database at head, see `alembic.ini`), checked in.
- A database from before Alembic (sllm's own numbered versions: `schema_version` 1 or 2) is
  stamped at revision 0001, the schema first released, and upgraded from there; revision 0002 checks
  before it changes, so it fits both versions and any table the old code had not created yet.
- A database newer than this code (a revision it does not know) is refused rather than half
  understood; `schema_version` is kept and set past what the pre-Alembic code knows, so that code
  refuses a migrated database too.
- On PostgreSQL the whole upgrade runs in one transaction under an advisory lock, so replicas that
  start together migrate one after the other (the later ones find nothing to do)."""

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, Integer, MetaData, Table, inspect, select, text

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
LEGACY_FIRST = "0001"  # the revision equal to schema_version 1, the schema first released
# What `schema_version` says once Alembic manages the database: past the pre-Alembic code's last
# version (2), so that code refuses it ("newer than this sllm").
LEGACY_GUARD = 3
_LOCK_KEY = 0x736C6C6D  # "sllm": the advisory lock replicas take to migrate one at a time

schema_version = Table("schema_version", MetaData(), Column("version", Integer, nullable=False))


def alembic_config(conn: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(HERE))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def head() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _legacy_version(conn: Connection) -> int | None:
    """The pre-Alembic version: the recorded one, 1 for a database from before versions, None
    for an empty database."""
    tables = set(inspect(conn).get_table_names())
    if "schema_version" in tables:
        version = conn.execute(select(schema_version.c.version)).scalar()
        if version is not None:
            return version
    return 1 if tables & {"api_keys", "responses"} else None


def upgrade(conn: Connection) -> str | None:
    """Brings the database to the head revision in the caller's transaction; returns where it
    started (a revision, `schema_version N`, or None for an empty database)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    config = alembic_config(conn)
    script = ScriptDirectory.from_config(config)
    found = MigrationContext.configure(conn).get_current_heads()
    started: str | None
    if found:
        unknown = set(found) - {r.revision for r in script.walk_revisions()}
        if unknown:
            raise RuntimeError(f"the database's schema is at revision {', '.join(sorted(unknown))}, newer than this "
                               "sllm knows: upgrade sllm or point --db elsewhere")
        started = found[0]
    else:
        legacy = _legacy_version(conn)
        if legacy is not None and legacy > LEGACY_GUARD:
            raise RuntimeError(f"the database's schema is version {legacy}, newer than this sllm knows: "
                               "upgrade sllm or point --db elsewhere")
        if legacy is not None:
            log.info("the database is at sllm's pre-Alembic schema version %d: upgrading it in place", legacy)
            command.stamp(config, LEGACY_FIRST)
        started = None if legacy is None else f"schema_version {legacy}"
    if found != (script.get_current_head(),):
        command.upgrade(config, "head")
    schema_version.create(conn, checkfirst=True)
    if conn.execute(select(schema_version.c.version)).first() is None:
        conn.execute(schema_version.insert().values(version=LEGACY_GUARD))
    else:
        conn.execute(schema_version.update().values(version=LEGACY_GUARD))
    return started
