"""`/v1/files`: upload (multipart, `purpose=batch`), list, retrieve, download, delete. Files live in
the database, content apart from metadata; batch outputs appear here as `purpose=batch_output`."""

from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import Response
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.jobs.idempotency import IdempotencyHeader, commit_or_replay, remember, replay, request_hash
from gateway.protocol.files import FileDeleted, FileList, FileObject
from gateway.security.tenancy import Caller
from gateway.state import ServerState
from gateway.tables.files import StoredFile, add_file, new_file_id, read_content, stored_bytes
from gateway.web.deps import CallerDep, Session, State
from gateway.web.errors import APIError
from gateway.web.pagination import Order, page

router = APIRouter(prefix="/v1")

UploadPurpose = Literal["batch"]
_CHUNK = 1024 * 1024


def file_object(row: StoredFile) -> FileObject:
    return FileObject(id=row.id, bytes=row.bytes, created_at=int(row.created_at), filename=row.filename,
                      purpose=row.purpose)


async def load_file(session: AsyncSession, file_id: str, caller: Caller, param: str = "file_id",
                    status: int = 404) -> StoredFile:
    """The caller's file; another key's is answered as one that does not exist."""
    row = await session.get(StoredFile, file_id)
    if row is None or not caller.sees(row):
        raise APIError(status, f"No such File object: {file_id}", param=param, code="file_not_found")
    return row


async def _read_limited(upload: UploadFile, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := await upload.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"the file is larger than this server's limit of {limit} bytes (--max-file-bytes)",
                           param="file", code="file_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def check_quota(state: ServerState, session: AsyncSession, caller: Caller, size: int) -> None:
    """A database key's files (its batches' outputs included) may hold --key-storage-quota-mb at most."""
    quota = state.settings.key_storage_quota_mb
    if quota is None or caller.admin:
        return
    used, limit = await stored_bytes(session, caller.owner), int(quota * 1024 * 1024)
    if used + size > limit:
        raise APIError(413, f"this upload of {size} bytes would take your files past this key's storage quota of "
                       f"{limit} bytes ({used} used); delete files you no longer need", param="file",
                       code="storage_quota_exceeded")


@router.post("/files", response_model=FileObject)
async def upload_file(
    state: State, session: Session, caller: CallerDep,
    # Not empty, and at most --max-file-bytes (413): both checked as the upload is read.
    file: Annotated[UploadFile, File(description="the JSONL input of a batch, one request per line",
                                     json_schema_extra={"minLength": 1})],
    purpose: Annotated[UploadPurpose, Form(description="this server stores files for the Batch API only")],
    idempotency_key: IdempotencyHeader = None,
) -> FileObject:
    data = await _read_limited(file, state.settings.max_file_bytes)
    if not data:
        raise APIError(400, "the file is empty", param="file", code="empty_file")
    filename = (file.filename or "upload.jsonl")[:512]
    digest = request_hash(purpose, filename, data)
    route = f"files:{caller.owner}"  # one key's Idempotency-Key never replays another key's object
    if (earlier := await replay(session, route, idempotency_key, digest)) is not None:
        return file_object(await load_file(session, earlier, caller))
    await check_quota(state, session, caller, len(data))
    row = await add_file(session, new_file_id(), filename, purpose, data, created_by=caller.owner)
    remember(session, route, idempotency_key, digest, row.id)
    if (earlier := await commit_or_replay(session, route, idempotency_key, digest)) is not None:
        return file_object(await load_file(session, earlier, caller))
    return file_object(row)


@router.get("/files", response_model=FileList)
async def list_files(session: Session, caller: CallerDep, purpose: str | None = None,
                     limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
                     order: Order = "desc", after: str | None = None) -> FileList:
    where = [StoredFile.purpose == purpose] if purpose else []
    where += caller.scope(StoredFile)
    rows, has_more = await page(session, StoredFile, *where, limit=limit, after=after, order=order)
    data = [file_object(r) for r in rows]
    return FileList(data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None,
                    has_more=has_more)


@router.get("/files/{file_id}", response_model=FileObject)
async def retrieve_file(file_id: str, session: Session, caller: CallerDep) -> FileObject:
    return file_object(await load_file(session, file_id, caller))


@router.get("/files/{file_id}/content")
async def file_content(file_id: str, session: Session, caller: CallerDep) -> Response:
    row = await load_file(session, file_id, caller)
    data = await read_content(session, file_id) or b""
    return Response(data, media_type="application/jsonl" if row.filename.endswith(".jsonl") else
                    "application/octet-stream")


@router.delete("/files/{file_id}", response_model=FileDeleted)
async def delete_file(file_id: str, session: Session, caller: CallerDep) -> FileDeleted:
    await session.delete(await load_file(session, file_id, caller))  # its content goes with it (ON DELETE CASCADE)
    await session.commit()
    return FileDeleted(id=file_id)

