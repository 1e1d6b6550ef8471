"""`/v1/text2sql` shapes: sources, the ask request and its result, schedules and their runs.

Source URLs go out redacted (`sqlite:///...`, `postgresql://user:***@host/db`), never as stored.
Times are Unix seconds, as OpenAI's `created_at`."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gateway.protocol.common import Request

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
MAX_ROWS = 10_000
# The demo databases are registered at start as demo_<schema> (gateway/serving/text2sql.py), so these examples
# work on any server; their files live in $SLLM_CACHE_DIR/text2sql (by default ~/.cache/sllm/text2sql).
DEMO_SOURCE = "demo_shop"
DEMO_SHOP_URL = "sqlite:///~/.cache/sllm/text2sql/shop.sqlite"
# Anything SQLAlchemy's make_url takes has a `<dialect>[+driver]://`; a URL is also opened and
# introspected before it is registered (a 400 when it cannot be).
URL_PATTERN = r"^[^:/]+://"
# A question of blanks is no question: a 400, not a decode of the schema alone.
Question = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
# Five whitespace-separated fields, or a macro (@hourly, @daily, ...): the shape the scheduler takes;
# croniter then checks each field (gateway/jobs/schedules.py check_cron, a 400 `invalid_cron`).
# Whitespace as Python's str.split() knows it (JSON Schema's \s lacks \x1c-\x1f and \x85).
_SPACE, _FIELD = r"[\s\x1c-\x1f\x85]", r"[^\s\x1c-\x1f\x85]+"
CRON_PATTERN = rf"^{_SPACE}*(@{_FIELD}|{_FIELD}({_SPACE}+{_FIELD}){{4}}){_SPACE}*$"


class SourceCreate(Request):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "shop_copy", "url": DEMO_SHOP_URL, "description": "the shop demo database, read-only",
         "replace": True},
    ]})

    name: str = Field(pattern=NAME_PATTERN)
    # The pattern is only documented: opening the URL refuses what does not match, as a 400 `bad_source_url`.
    url: str = Field(min_length=1, json_schema_extra={"pattern": URL_PATTERN}, examples=[
        DEMO_SHOP_URL, "postgresql+psycopg://reader:secret@db.internal:5432/shop"],
        description="a SQLAlchemy URL of a database with tables, reachable from the server; SQLite files are "
                    "opened read-only (an in-memory SQLite database is refused)")
    description: str = ""
    db_schema: str | None = Field(None, description="the database-side schema (PostgreSQL namespace) to "
                                  "introspect; it must exist")
    replace: bool = Field(False, description="replace a source of the same name instead of a 409")


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

    model_config = ConfigDict(json_schema_extra={
        # Exactly one of `question` and `sql` (the handler says so with a 400 otherwise).
        "oneOf": [{"required": ["question"], "properties": {"question": {"type": "string"}}},
                  {"required": ["sql"], "properties": {"sql": {"type": "string"}}}],
        "examples": [
            {"source": DEMO_SOURCE, "sql": "SELECT name, price FROM products ORDER BY price DESC LIMIT 3"},
            {"source": DEMO_SOURCE, "sql": "SELECT COUNT(*) FROM customers WHERE tier = 'gold'", "execute": False},
            {"source": DEMO_SOURCE, "question": "How many customers are in the gold tier?", "max_tokens": 64,
             "max_rows": 10},
        ]})

    source: str = Field(examples=[DEMO_SOURCE], description="a registered source (GET /v1/text2sql/sources); the "
                        "demo databases are registered as demo_shop, demo_hr, demo_school, demo_library, "
                        "demo_delivery")
    question: Question | None = Field(None, examples=["How many customers are in the gold tier?"],
                                 description="answered by the model (with `sql` absent)")
    sql: str | None = Field(None, min_length=1, examples=[
        "SELECT name, price FROM products ORDER BY price DESC LIMIT 3",
        "SELECT tier, COUNT(*) FROM customers GROUP BY tier"],
        description="a single read-only SELECT, validated and run as given (with `question` absent); "
                    "anything else is a 400")
    execute: bool = True
    max_rows: int = Field(100, ge=1, le=MAX_ROWS)
    constrained: bool = True
    model: str | None = None
    max_tokens: int | None = Field(None, ge=8, le=2048)
    timeout_s: float = Field(5.0, gt=0, le=60, description="the time limit of one query's execution (with "
                             "`candidates`, of each candidate's, run one after another)")
    candidates: int = Field(1, ge=1, le=16, description="execution-guided selection: sample this many queries "
                            "under the schema grammar, run each read-only and answer with the result most of them "
                            "agree on (1: the greedy query alone)")
    sample_when: Literal["always", "doubt"] = Field(
        "always", description="with `candidates` > 1: sample for every question (`always`), or only when the greedy "
        "answer did not run, holds no data or is implausible (`doubt`: one decode when it is sound)")


class Selection(BaseModel):
    candidates: int  # candidates generated: 1 when `doubt` found the greedy answer sound
    requested: int | None = None  # the request's `candidates`
    when: str = "always"  # the request's `sample_when`
    chosen: int  # index among `sql`; 0 is the greedy candidate
    votes: int  # candidates whose result set equals the chosen one's
    runnable: int  # candidates that ran
    implausible: list[int] = []  # candidates that sum an id or compare a column with itself; ranked last
    sql: list[str]


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
    repaired_from: str | None = Field(None, exclude_if=lambda v: v is None)  # the SQL before join_repair
    error: AskError | None = None  # what stopped the query: invalid SQL, a timeout, an execution error
    timings: Timings = Field(default_factory=Timings)
    selection: Selection | None = Field(None, exclude_if=lambda v: v is None)


class ScheduleCreate(Request):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"cron": "0 9 * * 1-5", "source": DEMO_SOURCE, "question": "How many orders are still pending?"},
        {"cron": "@daily", "source": DEMO_SOURCE, "question": "Which product has the least stock?",
         "execute": True, "max_rows": 5, "constrained": True},
    ]})

    # The pattern is only documented: check_cron refuses what does not match, with its own code.
    cron: str = Field(min_length=1, json_schema_extra={"pattern": CRON_PATTERN},
                      examples=["*/15 * * * *", "0 9 * * 1-5", "@hourly"],
                      description="five-field cron expression (minute hour day-of-month month day-of-week) or "
                                  "a macro (@hourly, @daily, @weekly, @monthly, @yearly), in UTC")
    source: str = Field(examples=[DEMO_SOURCE], description="a registered source (GET /v1/text2sql/sources)")
    question: Question
    webhook_url: str | None = Field(None, description="http(s) URL to POST each run's result to (a server "
                                    "with webhooks enabled, the host on its allow-list)")
    execute: bool = True
    max_rows: int = Field(100, ge=1, le=MAX_ROWS)
    constrained: bool = True
    candidates: int = Field(1, ge=1, le=16, description="execution-guided selection for each run (see the ask "
                            "request's `candidates`)")
    # Stated, so that `doubt` is refused rather than ignored: a nightly run has time to sample every time.
    sample_when: Literal["always"] = Field("always", description="schedules sample for every run when "
                                           "`candidates` > 1 (`doubt` is for interactive asks)")


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
    candidates: int = 1
    webhook_url: str | None = None
    next_run_at: int
    last_run_at: int | None = None
    enabled: bool = True
    disabled_reason: str | None = None  # why it no longer runs: the key that made it was revoked


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
