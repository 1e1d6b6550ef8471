"""Leases: which replica holds a batch line, a background response or a schedule run, and until
when (gateway/jobs/leases.py). Expired or never claimed work is taken over by any replica."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = ("batch_lines", "responses", "text2sql_runs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("owner", sa.String(length=64), nullable=True))
            batch.add_column(sa.Column("lease_expires_at", sa.Float(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("lease_expires_at")
            batch.drop_column("owner")
