"""`/v1/files` shapes: the File object, its list, its deletion."""

from typing import Literal

from pydantic import BaseModel

FilePurpose = Literal["batch", "batch_output"]


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: FilePurpose
    status: Literal["uploaded", "processed", "error"] = "processed"  # deprecated by OpenAI, still sent
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True
