"""Which engine priority and fairness key a request runs with.

The engine schedules by priority (lower first) and, at equal priority, lets fairness keys take turns
(engine/scheduler.py). The gateway maps its kinds of work onto priorities, all Settings:
interactive requests (`priority_interactive`), background responses (`priority_background`), batch
lines (`priority_batch`) and text-to-SQL schedule runs (`priority_schedule`). A job's kind travels
with its task (a context variable the job runner and the scheduler set), so the endpoints a job runs
through need not carry it. Clients may name their own `priority` in the body of chat, completions and
responses only when the server allows it (`allow_client_priority`); otherwise that is a 400. The
fairness key is the request's bearer key, hashed (never the key itself); jobs run with none."""

import contextvars
from typing import Literal

from fastapi import Request

from gateway.settings import Settings
from gateway.tables.api_keys import hash_key
from gateway.web.errors import APIError

JobKind = Literal["background", "batch", "schedule"]

_job_kind: contextvars.ContextVar[JobKind] = contextvars.ContextVar("sllm_job_kind", default="batch")


def run_as(kind: JobKind) -> None:
    """Marks the current task (and tasks it starts) as running this kind of job."""
    _job_kind.set(kind)


def check_client_priority(settings: Settings, priority: int | None) -> None:
    if priority is not None and not settings.allow_client_priority:
        raise APIError(400, "priority is not accepted by this server (it is started without "
                       "--allow-client-priority)", param="priority", code="unsupported_parameter")


def priority_of(settings: Settings, request: Request | None, client_priority: int | None) -> int:
    """`request` None: a job's request, of the kind its task runs as."""
    check_client_priority(settings, client_priority)
    if client_priority is not None:
        return client_priority
    if request is not None:
        return settings.priority_interactive
    return {"background": settings.priority_background, "batch": settings.priority_batch,
            "schedule": settings.priority_schedule}[_job_kind.get()]


def fairness_key(request: Request | None) -> str | None:
    if request is None:
        return None
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return hash_key(key.strip())[:16]
