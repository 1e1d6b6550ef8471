"""Stored `/v1/responses` results: the Response object as returned, plus the conversation it ends,
so `previous_response_id` can continue it without re-walking the chain."""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db import Base


class StoredResponse(Base):
    __tablename__ = "responses"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))
    model: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(32))
    previous_response_id: Mapped[str | None] = mapped_column(String(64), index=True)
    # Chat messages (role, content) up to and including this response's output.
    conversation: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
