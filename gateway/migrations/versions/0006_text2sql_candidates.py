"""Schedules: how many candidate queries a run samples for execution-guided selection (1: greedy only)."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("text2sql_schedules") as batch:
        batch.add_column(sa.Column("candidates", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("text2sql_schedules") as batch:
        batch.drop_column("candidates")
