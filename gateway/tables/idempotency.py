"""`Idempotency-Key`: the object a create call made, remembered by (route, key), so a retry gets
that object back instead of a second one. Written in the same transaction as the object."""

import time

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    route: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    object_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
