"""Rate limits per API key: each key's own requests and tokens per minute, the current minute's
counters shared by the replicas, and usage per key and hour (gateway/tables/rate_limits.py)."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("rpm", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("tpm", sa.Integer(), nullable=True))
    op.create_table(
        "rate_limit_windows",
        sa.Column("key_id", sa.Integer(), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True,
                  autoincrement=False),
        sa.Column("window", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
    )
    op.create_table(
        "key_usage",
        sa.Column("key_id", sa.Integer(), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True,
                  autoincrement=False),
        sa.Column("hour", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("key_usage")
    op.drop_table("rate_limit_windows")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("tpm")
        batch.drop_column("rpm")
