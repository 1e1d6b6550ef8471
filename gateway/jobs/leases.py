"""Leases: several gateway replicas may share one database, so each piece of job work (a batch line, a
background response, a schedule run) is held by one replica at a time, named by `owner`, until
`lease_expires_at`. The holder renews its leases by a heartbeat while it works; work whose lease
expired (its replica died or hung) or that was never claimed is free for any replica to claim.

A claim is one statement that only takes free rows: on PostgreSQL the candidate rows are picked
with `SELECT ... FOR UPDATE SKIP LOCKED`, so replicas claiming at once take different rows instead
of queueing on the same ones; on SQLite the conditional UPDATE is atomic by itself (one writer at a
time). A lease bounds how long dead work waits; it does not make work exactly-once: a replica too
slow to renew may finish after another took over, so what a piece of work writes at the end stays
guarded by a constraint or a conditional update (batch results are unique per (batch, line); a
response is finished only while still active; a due time has one run row)."""

import os
import socket
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import ColumnElement, exists, or_, select, update
from sqlalchemy.orm import aliased

from gateway.tables.batches import Batch, BatchLine, BatchResult


@dataclass(frozen=True)
class LeasePolicy:
    owner: str  # this replica
    lease_s: float  # how long a claim holds without renewal
    scan_s: float  # how often a replica looks for free or abandoned work

    @property
    def renew_s(self) -> float:
        """Heartbeat period: a lease is renewed about three times before it would expire."""
        return self.lease_s / 3


def replica_id() -> str:
    """Names this process in `owner` columns: readable in the database, unique across restarts."""
    return f"{socket.gethostname()[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def free(table, now: float) -> ColumnElement[bool]:
    """Never claimed, released, or its holder stopped renewing."""
    return or_(table.lease_expires_at.is_(None), table.lease_expires_at < now)


async def claim_lines(session, batch_id: str, policy: LeasePolicy, limit: int) -> list[BatchLine]:
    """Claims up to `limit` free lines without a result, in file order, while the batch is in
    progress (a batch cancelled on another replica gives no more lines); commits."""
    now = time.time()
    candidate = aliased(BatchLine)
    recorded = exists().where(BatchResult.batch_id == candidate.batch_id, BatchResult.line == candidate.line)
    running = exists().where(Batch.id == batch_id, Batch.status == "in_progress")
    # A materialized CTE: PostgreSQL runs it once. As a plain `IN (subquery)` the planner may run it
    # again for each row, and each run skips the rows this statement just locked: it claimed them all.
    picked = (select(candidate.line).where(candidate.batch_id == batch_id, free(candidate, now), ~recorded, running)
              .order_by(candidate.line).limit(limit).with_for_update(skip_locked=True)
              .cte("picked").prefix_with("MATERIALIZED", dialect="postgresql"))
    claimed = await session.scalars(
        update(BatchLine).where(BatchLine.batch_id == batch_id, BatchLine.line.in_(select(picked.c.line)),
                                free(BatchLine, now))
        .values(owner=policy.owner, lease_expires_at=now + policy.lease_s).returning(BatchLine)
        .execution_options(synchronize_session=False))
    lines = sorted(claimed.all(), key=lambda line: line.line)
    await session.commit()
    return lines


async def renew_lines(session, batch_id: str, lines: set[int], policy: LeasePolicy) -> int:
    """Extends this replica's leases on `lines`; returns how many it still held."""
    if not lines:
        return 0
    result = await session.execute(
        update(BatchLine).where(BatchLine.batch_id == batch_id, BatchLine.line.in_(sorted(lines)),
                                BatchLine.owner == policy.owner)
        .values(lease_expires_at=time.time() + policy.lease_s).execution_options(synchronize_session=False))
    return result.rowcount


async def release_lines(session, batch_id: str, lines: set[int], policy: LeasePolicy) -> None:
    """Hands lines this replica claimed but did not finish back at once (no wait for expiry)."""
    if lines:
        await session.execute(
            update(BatchLine).where(BatchLine.batch_id == batch_id, BatchLine.line.in_(sorted(lines)),
                                    BatchLine.owner == policy.owner)
            .values(owner=None, lease_expires_at=None).execution_options(synchronize_session=False))


async def renew_rows(session, table, ids: set[str], policy: LeasePolicy, **still) -> set[str]:
    """Extends this replica's leases on rows of `table` (a response, a schedule run) whose columns
    still have the values in `still`; returns the ids it still holds (the others were finished,
    cancelled or taken over elsewhere)."""
    if not ids:
        return set()
    conditions = [table.id.in_(sorted(ids)), table.owner == policy.owner,
                  *(getattr(table, name) == value for name, value in still.items())]
    held = await session.scalars(update(table).where(*conditions)
                                 .values(lease_expires_at=time.time() + policy.lease_s).returning(table.id)
                                 .execution_options(synchronize_session=False))
    return set(held.all())
