"""`Idempotency-Key` on create calls (files, batches, background responses): the first call's object
is remembered in the same transaction that creates it; a retry with the same key and the same
request gets that object back, a retry with a different request is a 400. Keys live 24 hours."""

import hashlib
import time
from typing import Annotated

from fastapi import Header
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.tables.idempotency import IdempotencyKey
from gateway.web.errors import APIError

KEY_TTL_S = 24 * 3600

IdempotencyHeader = Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)]


def request_hash(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


async def replay(session: AsyncSession, route: str, key: str | None, digest: str) -> str | None:
    """The id of the object an earlier call with this key made, or None."""
    if key is None:
        return None
    await session.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < time.time() - KEY_TTL_S))
    await session.commit()
    row = await session.scalar(select(IdempotencyKey).where(IdempotencyKey.route == route,
                                                            IdempotencyKey.key == key))
    if row is None:
        return None
    if row.request_hash != digest:
        raise APIError(400, "this Idempotency-Key was already used with a different request",
                       param="Idempotency-Key", code="idempotency_key_reused")
    return row.object_id


def remember(session: AsyncSession, route: str, key: str | None, digest: str, object_id: str) -> None:
    """Records the key in the caller's transaction."""
    if key is not None:
        session.add(IdempotencyKey(route=route, key=key, request_hash=digest, object_id=object_id))


async def commit_or_replay(session: AsyncSession, route: str, key: str | None, digest: str) -> str | None:
    """Commits the new object; None when it was stored, or the id of the object a concurrent call
    with the same key stored first (then nothing of this call is kept)."""
    try:
        await session.commit()
        return None
    except IntegrityError:
        await session.rollback()
        if key is None:
            raise
        earlier = await replay(session, route, key, digest)
        if earlier is None:
            raise
        return earlier
