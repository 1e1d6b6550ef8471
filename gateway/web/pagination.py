"""Cursor pages as OpenAI lists them (`limit`, `after`, `order`; `first_id`, `last_id`, `has_more`),
over any table with `id` and `created_at` columns: newest first by default, ties broken by id."""

from typing import Any, Literal

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.web.errors import APIError

Order = Literal["asc", "desc"]


async def page(session: AsyncSession, model: Any, *where: Any, limit: int, after: str | None,
               order: Order = "desc") -> tuple[list[Any], bool]:
    """(rows, has_more) of the page after the object `after`."""
    query = select(model).where(*where)
    if after is not None:
        # Looked up under the same conditions: another key's id is no anchor, as it is no object.
        anchor = await session.scalar(select(model).where(model.id == after, *where))
        if anchor is None:
            raise APIError(400, f"after: no object with id '{after}'", param="after")
        if order == "desc":
            query = query.where(or_(model.created_at < anchor.created_at,
                                    and_(model.created_at == anchor.created_at, model.id < anchor.id)))
        else:
            query = query.where(or_(model.created_at > anchor.created_at,
                                    and_(model.created_at == anchor.created_at, model.id > anchor.id)))
    keys = (model.created_at.desc(), model.id.desc()) if order == "desc" else (model.created_at, model.id)
    rows = list((await session.scalars(query.order_by(*keys).limit(limit + 1))).all())
    return rows[:limit], len(rows) > limit
