"""`/v1/text2sql` shapes: sources, the ask request and its result, schedules and their runs.

Source URLs go out redacted (`sqlite:///...`, `postgresql://user:***@host/db`), never as stored.
Times are Unix seconds, as OpenAI's `created_at`."""

from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway.protocol.common import Request

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
MAX_ROWS = 10_000


class SourceCreate(Request):
    name: str = Field(pattern=NAME_PATTERN)
    url: str = Field(min_length=1, description="a SQLAlchemy URL; SQLite files are opened read-only")
    description: str = ""
    db_schema: str | None = None  # the database-side schema (PostgreSQL namespace) to introspect
    replace: bool = False


class SourceObject(BaseModel):
    object: Literal["text2sql.source"] = "text2sql.source"
    name: str
    url: str  # redacted
    dialect: str
    description: str = ""
    # With the schema (one source's GET, and its registration): tables and columns, and the DDL the
    # model is prompted with.
    tables: dict[str, list[str]] | None = Field(None, exclude_if=lambda v: v is None)
    ddl: str | None = Field(None, exclude_if=lambda v: v is None)


class SourceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[SourceObject]


class SourceDeleted(BaseModel):
    name: str
    object: Literal["text2sql.source.deleted"] = "text2sql.source.deleted"
    deleted: bool = True


class AskRequest(Request):
    """A question to answer with SQL over `source`, or `sql` to validate and run as is."""

    source: str
    question: str | None = Field(None, min_length=1)
    sql: str | None = Field(None, min_length=1)
    execute: bool = True
    max_rows: int = Field(100, ge=1, le=MAX_ROWS)
    constrained: bool = True
    model: str | None = None
    max_tokens: int | None = Field(None, ge=8, le=2048)
    timeout_s: float = Field(5.0, gt=0, le=60)


class Timings(BaseModel):
    generation_ms: float | None = None
    validation_ms: float | None = None
    execution_ms: float | None = None
    total_ms: float | None = None


class AskError(BaseModel):
    code: str
    message: str


class AskResponse(BaseModel):
    object: Literal["text2sql.result"] = "text2sql.result"
    model: str | None = None
    source: str
    question: str | None = None
    sql: str
    valid: bool
    validation_error: str | None = None
    executed: bool = False
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    constrained: bool | None = None
    retried: bool = False
    error: AskError | None = None  # what stopped the query: invalid SQL, a timeout, an execution error
    timings: Timings = Field(default_factory=Timings)


class ScheduleCreate(Request):
    cron: str = Field(min_length=1, description="five-field cron expression (or @hourly, @daily...), in UTC")
    source: str
    question: str = Field(min_length=1)
    webhook_url: str | None = None
    execute: bool = True
    max_rows: int = Field(100, ge=1, le=MAX_ROWS)
    constrained: bool = True


class ScheduleObject(BaseModel):
    id: str
    object: Literal["text2sql.schedule"] = "text2sql.schedule"
    created_at: int
    cron: str
    source: str
    question: str
    execute: bool
    max_rows: int
    constrained: bool
    webhook_url: str | None = None
    next_run_at: int
    last_run_at: int | None = None


class ScheduleList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ScheduleObject]


class ScheduleDeleted(BaseModel):
    id: str
    object: Literal["text2sql.schedule.deleted"] = "text2sql.schedule.deleted"
    deleted: bool = True


class RunObject(BaseModel):
    id: str
    object: Literal["text2sql.run"] = "text2sql.run"
    schedule_id: str
    scheduled_for: int
    started_at: int
    finished_at: int | None = None
    status: Literal["running", "completed", "failed"]
    result: AskResponse | None = None
    error: AskError | None = None


class RunList(BaseModel):
    object: Literal["list"] = "list"
    data: list[RunObject]
    has_more: bool = False
