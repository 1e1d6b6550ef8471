"""Uploaded and generated files (`/v1/files`): the metadata row, and the bytes in a table of their
own so listing files never reads their content."""

import time
import uuid

from sqlalchemy import Float, ForeignKey, Integer, LargeBinary, String, func, select
from sqlalchemy.orm import Mapped, mapped_column

from gateway.tables.base import Base, Owned


class StoredFile(Owned, Base):
    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time, index=True)
    filename: Mapped[str] = mapped_column(String(512))
    purpose: Mapped[str] = mapped_column(String(32), index=True)
    bytes: Mapped[int] = mapped_column(Integer)


class FileContent(Base):
    __tablename__ = "file_contents"

    file_id: Mapped[str] = mapped_column(String(64), ForeignKey("files.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


async def add_file(session, file_id: str, filename: str, purpose: str, data: bytes, created_by: str) -> StoredFile:
    """Adds a file and its content to the caller's transaction."""
    row = StoredFile(id=file_id, filename=filename, purpose=purpose, bytes=len(data), created_at=time.time(),
                     created_by=created_by)
    session.add(row)
    await session.flush()  # the content row refers to it (no ORM relationship orders the two)
    session.add(FileContent(file_id=file_id, data=data))
    return row


async def read_content(session, file_id: str) -> bytes | None:
    return await session.scalar(select(FileContent.data).where(FileContent.file_id == file_id))


async def stored_bytes(session, created_by: str) -> int:
    """What one owner's files hold, batch outputs included: what its storage quota counts."""
    return int(await session.scalar(select(func.coalesce(func.sum(StoredFile.bytes), 0))
                                    .where(StoredFile.created_by == created_by)) or 0)
