"""Text-to-SQL: registered sources, schedules and their runs.

A source's URL may carry a password, so it is stored as given (the server needs it to connect) and
only ever returned redacted. A schedule keeps `next_run_at`: the scheduler claims a due schedule by
moving that forward past now in the same transaction that adds the run row, and the unique
(schedule_id, scheduled_for) constraint makes a due time run at most once, whatever restarts and
races happen around it. Times are Unix seconds (UTC)."""

import time
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base, Owned


class Text2SQLSource(Owned, Base):
    __tablename__ = "text2sql_sources"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(Text)  # credentials included: never returned as is
    description: Mapped[str] = mapped_column(Text, default="")
    db_schema: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class Text2SQLSchedule(Owned, Base):
    __tablename__ = "text2sql_schedules"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    cron: Mapped[str] = mapped_column(String(200))  # five-field cron expression, in UTC
    source: Mapped[str] = mapped_column(String(64))
    question: Mapped[str] = mapped_column(Text)
    execute: Mapped[bool] = mapped_column(Boolean, default=True)
    max_rows: Mapped[int] = mapped_column(Integer, default=100)
    constrained: Mapped[bool] = mapped_column(Boolean, default=True)
    # Added in revision 0006: execution-guided selection's candidate count (1: the greedy query alone).
    candidates: Mapped[int] = mapped_column(Integer, server_default="1")
    webhook_url: Mapped[str | None] = mapped_column(String(2048))
    next_run_at: Mapped[float] = mapped_column(Float, index=True)
    last_run_at: Mapped[float | None] = mapped_column(Float)
    # Revision 0008: why the scheduler no longer runs it (its key was revoked); None while it runs.
    disabled_reason: Mapped[str | None] = mapped_column(Text)


class Text2SQLRun(Base):
    __tablename__ = "text2sql_runs"
    __table_args__ = (UniqueConstraint("schedule_id", "scheduled_for", name="uq_text2sql_runs_due"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    schedule_id: Mapped[str] = mapped_column(String(64), ForeignKey("text2sql_schedules.id", ondelete="CASCADE"),
                                             index=True)
    scheduled_for: Mapped[float] = mapped_column(Float)  # the due time this run stands for
    started_at: Mapped[float] = mapped_column(Float, default=time.time)
    finished_at: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # running | completed | failed
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # as POST /v1/text2sql answers
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"code", "message"}
    # Who runs it and until when (gateway/jobs/leases.py); revision 0003.
    owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)
    # 1 for the claim of its due time, 2 once another replica took it over (revision 0005).
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
