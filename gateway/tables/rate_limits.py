"""Per-key counters shared by every replica on one database: the current minute's requests and
tokens (one row per key, so nothing to prune), and usage per key and hour, for `sllm keys usage`.
Each change is one atomic upsert (`INSERT ... ON CONFLICT DO UPDATE`), which SQLite and PostgreSQL
both run without a lock of our own."""

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, and_, case, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.api_keys import ApiKey
from gateway.tables.base import Base


class RateWindow(Base):
    """What a key spent in the minute starting at `window` (seconds since the epoch)."""

    __tablename__ = "rate_limit_windows"

    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True,
                                        autoincrement=False)
    window: Mapped[int] = mapped_column(BigInteger)
    requests: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)


class KeyUsage(Base):
    """A key's admitted requests and their tokens in the hour starting at `hour`."""

    __tablename__ = "key_usage"

    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True,
                                        autoincrement=False)
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    requests: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)


@dataclass(frozen=True)
class Spent:
    """A key's counters in one window, after the call that read them."""

    window: int
    requests: int
    tokens: int
    admitted: bool


def _insert(session: AsyncSession, table):
    return (postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert)(table)


async def admit(session: AsyncSession, key_id: int, window: int, rpm: int | None, tpm: int | None) -> Spent:
    """Counts one request in `window` unless the key already made `rpm` requests or spent `tpm`
    tokens in it (None: no limit); a new window starts from zero."""
    t = RateWindow.__table__
    same = t.c.window == window
    room = [t.c.requests < rpm] if rpm is not None else []
    room += [t.c.tokens < tpm] if tpm is not None else []
    upsert = _insert(session, t).values(key_id=key_id, window=window, requests=1, tokens=0)
    upsert = upsert.on_conflict_do_update(
        index_elements=[t.c.key_id],
        set_={"window": window, "requests": case((same, t.c.requests + 1), else_=1),
              "tokens": case((same, t.c.tokens), else_=0)},
        where=or_(t.c.window != window, and_(*room)) if room else None,
    ).returning(t.c.requests, t.c.tokens)
    row = (await session.execute(upsert)).first()
    admitted = row is not None
    if not admitted:  # over a limit: nothing changed; read what stands
        row = (await session.execute(select(t.c.requests, t.c.tokens).where(t.c.key_id == key_id))).one()
    await session.commit()
    return Spent(window, row.requests, row.tokens, admitted)


async def charge(session: AsyncSession, key_id: int, window: int, hour: int, prompt_tokens: int,
                 completion_tokens: int) -> None:
    """Adds a finished request's tokens to the key's current window and its usage in `hour`."""
    tokens = prompt_tokens + completion_tokens
    t = RateWindow.__table__
    same = t.c.window == window
    await session.execute(_insert(session, t).values(key_id=key_id, window=window, requests=0, tokens=tokens)
                          .on_conflict_do_update(index_elements=[t.c.key_id], set_={
                              "window": window, "requests": case((same, t.c.requests), else_=0),
                              "tokens": case((same, t.c.tokens + tokens), else_=tokens)}))
    u = KeyUsage.__table__
    await session.execute(_insert(session, u).values(key_id=key_id, hour=hour, requests=1, prompt_tokens=prompt_tokens,
                                                     completion_tokens=completion_tokens)
                          .on_conflict_do_update(index_elements=[u.c.key_id, u.c.hour], set_={
                              "requests": u.c.requests + 1, "prompt_tokens": u.c.prompt_tokens + prompt_tokens,
                              "completion_tokens": u.c.completion_tokens + completion_tokens}))
    await session.commit()


async def usage_rows(session: AsyncSession, period_s: int) -> list[dict]:
    """Usage per key summed per `period_s` (3600: hours as stored; 86400: days), newest first."""
    rows = (await session.execute(select(KeyUsage, ApiKey.name).join(ApiKey, ApiKey.id == KeyUsage.key_id))).all()
    sums: dict[tuple[int, int], dict] = {}
    for usage, name in rows:
        start = usage.hour - usage.hour % period_s
        row = sums.setdefault((start, usage.key_id), {
            "period": datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:00" if period_s < 86400 else "%Y-%m-%d"),
            "key_id": usage.key_id, "key": name, "requests": 0, "prompt_tokens": 0, "completion_tokens": 0})
        row["requests"] += usage.requests
        row["prompt_tokens"] += usage.prompt_tokens
        row["completion_tokens"] += usage.completion_tokens
    return [sums[k] for k in sorted(sums, key=lambda k: (-k[0], k[1]))]
