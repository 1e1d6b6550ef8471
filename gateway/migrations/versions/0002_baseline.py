"""The schema as of sllm's pre-Alembic schema version 2 (the baseline): background responses, files,
batches, idempotency keys, webhook deliveries, text-to-SQL sources, schedules and runs.

A database the pre-Alembic code made is stamped at 0001 and comes through here, whether it was at
version 1 or 2 and whichever tables that code had created by then: so every change checks first."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _inspector() -> sa.Inspector:
    return sa.inspect(op.get_bind())


def _create_table(name: str, *columns: sa.Column | sa.Constraint) -> bool:
    if _inspector().has_table(name):
        return False
    op.create_table(name, *columns)
    return True


def _create_index(name: str, table: str, columns: list[str], unique: bool = False) -> None:
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=unique)


def upgrade() -> None:
    columns = {c["name"] for c in _inspector().get_columns("responses")}
    with op.batch_alter_table("responses") as batch:
        if "background" not in columns:
            batch.add_column(sa.Column("background", sa.Boolean(), server_default=sa.false(), nullable=False))
        if "request" not in columns:
            batch.add_column(sa.Column("request", sa.JSON(), nullable=True))
    _create_index("ix_responses_status", "responses", ["status"])

    _create_table(
        "files",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("filename", sa.String(length=512), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _create_index("ix_files_created_at", "files", ["created_at"])
    _create_index("ix_files_purpose", "files", ["purpose"])
    _create_table(
        "file_contents",
        sa.Column("file_id", sa.String(length=64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("file_id"),
    )
    _create_table(
        "batches",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("input_file_id", sa.String(length=64), nullable=False),
        sa.Column("completion_window", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("output_file_id", sa.String(length=64), nullable=True),
        sa.Column("error_file_id", sa.String(length=64), nullable=True),
        *(sa.Column(f"{event}_at", sa.Float(), nullable=True) for event in (
            "in_progress", "expires", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in (
            "total", "completed", "failed", "input_tokens", "cached_tokens", "output_tokens")),
        sa.PrimaryKeyConstraint("id"),
    )
    _create_index("ix_batches_created_at", "batches", ["created_at"])
    _create_index("ix_batches_status", "batches", ["status"])
    _create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("custom_id", sa.String(length=512), nullable=False),
        sa.Column("url", sa.String(length=64), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "line"),
    )
    _create_table(
        "batch_results",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("custom_id", sa.String(length=512), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("batch_id", "line", name="uq_batch_results_line"),
    )
    _create_index("ix_batch_results_batch_id", "batch_results", ["batch_id"])
    _create_table(
        "idempotency_keys",
        sa.Column("route", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("object_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("route", "key"),
    )
    _create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _create_index("ix_webhook_deliveries_status", "webhook_deliveries", ["status"])
    _create_table(
        "text2sql_sources",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("db_schema", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    _create_table(
        "text2sql_schedules",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("execute", sa.Boolean(), nullable=False),
        sa.Column("max_rows", sa.Integer(), nullable=False),
        sa.Column("constrained", sa.Boolean(), nullable=False),
        sa.Column("webhook_url", sa.String(length=2048), nullable=True),
        sa.Column("next_run_at", sa.Float(), nullable=False),
        sa.Column("last_run_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    _create_index("ix_text2sql_schedules_next_run_at", "text2sql_schedules", ["next_run_at"])
    _create_table(
        "text2sql_runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("scheduled_for", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["text2sql_schedules.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_text2sql_runs_due"),
    )
    _create_index("ix_text2sql_runs_schedule_id", "text2sql_runs", ["schedule_id"])


def downgrade() -> None:
    for table in ("text2sql_runs", "text2sql_schedules", "text2sql_sources", "webhook_deliveries", "idempotency_keys",
                  "batch_results", "batch_lines", "batches", "file_contents", "files"):
        op.drop_table(table)
    op.drop_index("ix_responses_status", table_name="responses")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("request")
        batch.drop_column("background")
