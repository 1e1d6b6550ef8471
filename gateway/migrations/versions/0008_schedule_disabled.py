"""Schedules: why a schedule stopped running (the key that made it was revoked); NULL while it runs."""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("text2sql_schedules") as batch:
        batch.add_column(sa.Column("disabled_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("text2sql_schedules") as batch:
        batch.drop_column("disabled_reason")
