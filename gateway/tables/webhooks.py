"""Webhook deliveries waiting to be sent or retried. A delivery is queued in the same transaction
that finishes its batch or response, so a crash cannot finish a job and forget to tell anyone."""

import time

from sqlalchemy import Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the event id, sent as webhook-id
    url: Mapped[str] = mapped_column(String(2048))
    payload: Mapped[str] = mapped_column(Text)  # the exact JSON body, signed as sent
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)  # pending|delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=time.time)
    last_error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
