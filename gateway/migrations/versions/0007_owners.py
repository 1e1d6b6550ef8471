"""Tenancy: every stored object records the key that made it (gateway/security/tenancy.py). Rows made before
this revision had no owner on record: they go to the admin, the only one who could see them all."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OWNED = ("files", "batches", "responses", "text2sql_sources", "text2sql_schedules")


def upgrade() -> None:
    for table in OWNED:
        # The server default fills every existing row in the same statement (SQLite and PostgreSQL alike).
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("created_by", sa.String(64), nullable=False, server_default="admin"))
            batch.create_index(f"ix_{table}_created_by", ["created_by"])


def downgrade() -> None:
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_created_by")
            batch.drop_column("created_by")
