"""Alembic's environment: the server passes its open connection (gateway/migrations/__init__.py);
the `alembic` command line (alembic.ini at the repository root) connects to `sqlalchemy.url`."""

from alembic import context
from sqlalchemy import create_engine

import gateway.tables  # noqa: F401  registers every table on Base.metadata
from gateway.tables.base import Base


def _run(connection) -> None:
    # Batch mode: SQLite alters a table by copying it, which Alembic does for us.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                      include_name=lambda name, kind, _parent: not (kind == "table" and name == "schema_version"))
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    # A sync URL: the command line has no event loop (sqlite:///..., postgresql+psycopg://...).
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as conn:
        _run(conn)
