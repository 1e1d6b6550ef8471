"""The jobs' backlog for /metrics: work waiting in the database, not in this replica, so every
replica on one database reports the same numbers (a dashboard takes their max, not their sum)."""

from sqlalchemy import func, select

from gateway.db import Database
from gateway.tables.batches import Batch
from gateway.tables.responses import StoredResponse
from gateway.tables.text2sql import Text2SQLRun

UNFINISHED_BATCH = ("validating", "in_progress", "finalizing")


async def backlog(db: Database) -> dict[str, int]:
    """Batch lines without a result, background responses not finished, schedule runs under way."""
    async with db.sessions() as session:
        lines = await session.scalar(select(func.coalesce(func.sum(Batch.total - Batch.completed - Batch.failed), 0))
                                     .where(Batch.status.in_(UNFINISHED_BATCH)))
        responses = await session.scalar(select(func.count()).select_from(StoredResponse).where(
            StoredResponse.background.is_(True), StoredResponse.status.in_(("queued", "in_progress"))))
        runs = await session.scalar(select(func.count()).select_from(Text2SQLRun)
                                    .where(Text2SQLRun.status == "running"))
    return {"batch_lines": int(lines or 0), "background_responses": int(responses or 0),
            "schedule_runs": int(runs or 0)}
