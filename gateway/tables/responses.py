"""Stored `/v1/responses` results: the Response object as returned, plus the conversation it ends,
so `previous_response_id` can continue it without re-walking the chain. A background response is
a row from the moment it is queued: `request` is what the job runner will run."""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Float, Index, String, false
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base, Owned


class StoredResponse(Owned, Base):
    __tablename__ = "responses"
    __table_args__ = (Index("ix_responses_status", "status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Naive UTC: the column is a TIMESTAMP without time zone, where PostgreSQL's driver refuses an
    # aware datetime.
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC).replace(tzinfo=None))
    model: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(32))
    previous_response_id: Mapped[str | None] = mapped_column(String(64), index=True)
    # Chat messages (role, content) up to and including this response's output.
    conversation: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Added in revision 0002 (gateway/migrations/versions/).
    background: Mapped[bool] = mapped_column(default=False, server_default=false())
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Who runs it and until when (gateway/jobs/leases.py); revision 0003.
    owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)
