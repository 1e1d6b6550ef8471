"""API keys, stored only as SHA-256 digests: keys are long random tokens, so a fast hash suffices."""

import hashlib
import secrets
from datetime import UTC, datetime

from sqlalchemy import String, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base

KEY_PREFIX = "sk-sllm-"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    # Naive UTC: the column is a TIMESTAMP without time zone, where PostgreSQL's driver refuses an
    # aware datetime.
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC).replace(tzinfo=None))
    revoked: Mapped[bool] = mapped_column(default=False)
    # Requests and tokens per minute; None: the server's default (--rate-limit-rpm / -tpm).
    rpm: Mapped[int | None] = mapped_column(default=None)
    tpm: Mapped[int | None] = mapped_column(default=None)


async def create_api_key(session: AsyncSession, name: str, rpm: int | None = None, tpm: int | None = None) -> str:
    """Stores a new key and returns it in clear, the only time it is ever visible."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(name=name, key_hash=hash_key(key), rpm=rpm, tpm=tpm))
    await session.commit()
    return key


async def any_active_key(session: AsyncSession) -> bool:
    return (await session.scalar(select(ApiKey.id).where(ApiKey.revoked.is_(False)).limit(1))) is not None


async def find_active_key(session: AsyncSession, key: str) -> ApiKey | None:
    query = select(ApiKey).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked.is_(False))
    return await session.scalar(query)
