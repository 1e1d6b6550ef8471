"""Schedule runs count their attempts: a run whose replica died is taken over and run once more
(gateway/jobs/schedules.py); one cut short again is marked interrupted."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("text2sql_runs") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("text2sql_runs") as batch:
        batch.drop_column("attempts")
