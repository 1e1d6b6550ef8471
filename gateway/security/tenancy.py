"""Who made a stored object, and who may see it.

Every stored object (files, batches, responses, text-to-SQL sources and schedules) records in
`created_by` the key that made it: `admin` for the keys given to the server (--api-key), or when
the server runs without keys; `key_<id>` for a database key (`sllm keys create`). A database key
sees and acts on its own objects only; anything else is answered as if it did not exist (404, as
OpenAI answers for another project's objects), so ids cannot be probed. Admins see everything."""

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from gateway.tables.base import ADMIN


@dataclass(frozen=True)
class Caller:
    """The principal of a request, or of a job running for one."""

    owner: str  # what objects it makes record in `created_by`
    admin: bool
    key_id: int | None = None  # the database key's id (usage, limits); None for admins

    @classmethod
    def for_key(cls, key_id: int) -> "Caller":
        return cls(owner=f"key_{key_id}", admin=False, key_id=key_id)

    @classmethod
    def for_owner(cls, owner: str) -> "Caller":
        """The principal a job runs as: the owner recorded on its row."""
        if owner.startswith("key_") and owner[4:].isdigit():
            return cls.for_key(int(owner[4:]))
        return ADMIN_CALLER

    def sees(self, row: Any) -> bool:
        return self.admin or getattr(row, "created_by", None) == self.owner

    def scope(self, model: Any) -> list[Any]:
        """WHERE clauses limiting `model`'s rows to this caller's (none for an admin)."""
        return [] if self.admin else [model.created_by == self.owner]


ADMIN_CALLER = Caller(owner=ADMIN, admin=True)

REVOKED_CODE = "api_key_revoked"


async def revoked_owner(session: AsyncSession, owner: str) -> str | None:
    """Why a job queued by `owner` may no longer run, or None: a database key that was revoked or
    deleted. Read from the database at every claim, never cached, so a key revoked through any
    replica (or straight in the database) stops its work on every replica. The message names the
    key's id and name, never the key."""
    from gateway.tables.api_keys import ApiKey  # tables import this module

    caller = Caller.for_owner(owner)
    if caller.key_id is None:
        return None  # an admin's work: admins are the server's own keys, never revoked here
    key = await session.get(ApiKey, caller.key_id, populate_existing=True)
    if key is None:
        return f"the API key that queued this work ({owner}) no longer exists"
    if key.revoked:
        return f"the API key that queued this work ({owner}, {key.name!r}) was revoked"
    return None
