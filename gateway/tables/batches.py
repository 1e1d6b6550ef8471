"""Batches: the batch row with its counters, its input lines (copied from the input file when the
batch is created, so deleting that file changes nothing), and one result row per line that ran.

A result is written in one transaction with the batch's counters; the unique (batch_id, line)
constraint makes recording exactly-once, whatever restarts and retries happen around it."""

import time
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base, Owned


class Batch(Owned, Base):
    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time, index=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(200))
    input_file_id: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    metadata_: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON)
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)  # validation errors, line by line
    output_file_id: Mapped[str | None] = mapped_column(String(64))
    error_file_id: Mapped[str | None] = mapped_column(String(64))
    in_progress_at: Mapped[float | None] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)
    finalizing_at: Mapped[float | None] = mapped_column(Float)
    completed_at: Mapped[float | None] = mapped_column(Float)
    failed_at: Mapped[float | None] = mapped_column(Float)
    expired_at: Mapped[float | None] = mapped_column(Float)
    cancelling_at: Mapped[float | None] = mapped_column(Float)
    cancelled_at: Mapped[float | None] = mapped_column(Float)
    total: Mapped[int] = mapped_column(Integer, default=0)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)


class BatchLine(Base):
    """One request of the input file; `line` is its 1-based line number there."""

    __tablename__ = "batch_lines"

    batch_id: Mapped[str] = mapped_column(String(64), ForeignKey("batches.id", ondelete="CASCADE"),
                                          primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    custom_id: Mapped[str] = mapped_column(String(512))
    url: Mapped[str] = mapped_column(String(64))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Who runs it and until when (gateway/jobs/leases.py); revision 0003.
    owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)


class BatchResult(Base):
    """What one line returned: `body` is the endpoint's answer, or its error body when
    `status_code` is not 200."""

    __tablename__ = "batch_results"
    __table_args__ = (UniqueConstraint("batch_id", "line", name="uq_batch_results_line"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # batch_req_...
    batch_id: Mapped[str] = mapped_column(String(64), ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    line: Mapped[int] = mapped_column(Integer)
    custom_id: Mapped[str] = mapped_column(String(512))
    status_code: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(64))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
