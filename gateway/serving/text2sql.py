"""Text-to-SQL inside the gateway: sources stored in the gateway's database, questions answered on
the server's engine, and the scheduler that asks them on a cron.

The core (`integrations/text2sql/`) knows nothing about HTTP or our database. Here:
- its `SourceRegistry` runs over a `FunctionSourceStore` whose callables are transactions on the
  gateway's database (table `text2sql_sources`); the registry's methods block (they introspect
  databases), so they run in worker threads, and the store hands each database call back to the
  event loop;
- generation goes through `async_engine_complete` over the server's AsyncEngine, wrapped so each
  model call is a `Generation`: admission and abort on disconnect for a client's question, the job
  path (no admission; the job gate instead) for a scheduled one;
- the core's errors become API errors: unknown source 404, bad URL 400, unsafe SQL 400, duplicate
  409. A generated query that is merely wrong (unknown column, cut short) is not an error: it comes
  back with `valid: false` and the reason, as an answer to show.

The demo databases (`integrations.text2sql.dataset`) are registered at start as `demo_<schema>` if
absent, so the API answers out of the box."""

import asyncio
import logging
import threading
from collections.abc import Coroutine
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Request
from sqlalchemy import delete, select

from engine import AsyncEngine, InvalidRequestError, RequestOutput, SamplingParams
from gateway.protocol.text2sql import AskError, AskResponse, SourceObject, Timings
from gateway.registry import AdapterEngine, EmbeddedModel, LoRAModel, Served, UpstreamModel
from gateway.security.secret_box import SecretBox, has_secret
from gateway.security.source_policy import SourcePolicy
from gateway.security.tenancy import ADMIN, ADMIN_CALLER, Caller
from gateway.serving import proxy
from gateway.serving.generation import Generation
from gateway.state import ServerState
from gateway.tables.text2sql import Text2SQLSchedule, Text2SQLSource
from gateway.web.errors import APIError, ClientDisconnected, as_api_error
from integrations.text2sql.adapter import LORA_NAME, AdapterStyle, adapter_style
from integrations.text2sql.ask import AskResult, aask, arun_sql
from integrations.text2sql.errors import (
    ExecutionError,
    GenerationError,
    QueryTimeout,
    SourceUnavailable,
    Text2SQLError,
    UnknownSource,
    UnsafeSQL,
)
from integrations.text2sql.generate import (
    DEFAULT_MAX_TOKENS,
    SQLGenerator,
    async_engine_complete,
    openai_body,
)
from integrations.text2sql.registry import FunctionSourceStore, SourceRegistry
from integrations.text2sql.selection import SAMPLE_TEMPERATURE, aask_selected
from integrations.text2sql.sources import Source, SourceSpec

log = logging.getLogger(__name__)


def _owner(spec: SourceSpec) -> str:
    return spec.extra.get("created_by", ADMIN)


def _visible(row: Text2SQLSource, caller: Caller) -> bool:
    """The admin's sources (the demo databases among them) are every key's to ask; a key's own are its own."""
    return row.created_by == ADMIN or caller.sees(row)

DEMO_SCHEMAS = ("shop", "hr", "school", "library", "delivery")
T = TypeVar("T")


def _call_error(exc: Text2SQLError) -> Exception | None:
    """The engine refused the model call as a bad request (the DDL and question past the model's context,
    max_tokens too large): the client's 400, as for a completion, not the 502 of a failed model call. What
    the gateway itself answered the call with (admission's 429, a client gone) stays what it was."""
    cause = exc.__cause__
    if isinstance(exc, GenerationError) and isinstance(cause, APIError | ClientDisconnected):
        return cause
    if not isinstance(exc, GenerationError) or not isinstance(cause, InvalidRequestError):
        return None
    return APIError(400, f"the model refused the request: {cause.message}",
                    param="max_tokens" if cause.param == "max_tokens" else "question", code="generation_refused")


def api_error(exc: Text2SQLError, param: str | None = None) -> APIError:
    """The core's error as an API error: its status hint and its code, in OpenAI's error shape."""
    return APIError(exc.status, exc.message, param=param, code=exc.code)


class _EngineCalls:
    """What `async_engine_complete` calls (`generate_full`), as a gateway Generation. Entered, it holds
    the request's one admission slot for all its model calls: k candidates are one request, not k (with
    a slot each, k past the admission limit was always a 429, the greedy call losing the race)."""

    def __init__(self, state: ServerState, engine: AsyncEngine, request: Request | None):
        self.state, self.engine, self.request = state, engine, request
        self._slot = None

    def __enter__(self) -> "_EngineCalls":
        self._slot = self.state.admission.acquire() if self.request is not None else None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._slot is not None:
            self._slot.release()

    async def generate_full(self, prompt: str, params: SamplingParams, request_id: str | None = None) -> RequestOutput:
        gen = Generation(self.state, self.engine, self.request, admit=self._slot is None)
        await gen.start([prompt], params)
        (final,) = await gen.finals()
        return final


def _upstream_complete(state: ServerState, served: UpstreamModel, max_tokens: int, temperature: float = 0.0):
    """The same completion on an upstream's /v1/completions, the grammar sent in the field it reads;
    what comes back is validated here all the same."""

    async def acomplete(prompt: str, guided) -> str:
        body = openai_body(served.name, prompt, guided, max_tokens, served.entry.grammar_field, temperature)
        return (await proxy.call(state, served, "/completions", body))["choices"][0]["text"]

    return acomplete


def result_body(result: AskResult, model: str | None) -> AskResponse:
    d = result.to_dict()
    err = result.error
    # Valid SQL that failed only while running (a timeout, a runtime error) is still valid SQL.
    valid = err is None or isinstance(err, QueryTimeout | ExecutionError)
    return AskResponse(
        model=model, source=result.source, question=result.question, sql=result.sql, valid=valid,
        validation_error=None if valid else err.message, executed=result.executed, columns=d["columns"],
        rows=d["rows"], row_count=d["row_count"], truncated=d["truncated"], constrained=result.constrained,
        retried=d.get("retried", False), repaired_from=result.repaired_from,
        error=AskError(**err.to_dict()) if err else None,
        timings=Timings(**{k: v for k, v in d["timings"].items() if k in Timings.model_fields}),
        selection=d.get("selection"),
    )


class Text2SQL:
    def __init__(self, state: ServerState):
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        from integrations.text2sql.dataset import cache_dir

        self.policy = SourcePolicy(state.settings, demo_dir=cache_dir())
        self.secrets = SecretBox(state.settings.secret_key)
        self.registry = SourceRegistry(FunctionSourceStore(self._load, self._save, self._delete, self._names),
                                       guard_for=lambda spec: self.policy.guard_for(_owner(spec) == ADMIN))
        self.adapter = state.settings.text2sql_adapter_path()
        self.adapter_style = adapter_style(self.adapter)  # read once, not per question
        self._adapter_lock = asyncio.Lock()
        from gateway.jobs.schedules import Scheduler

        self.scheduler = Scheduler(state, self.run_schedule)

    async def start(self) -> None:
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        try:
            await self.register_demos()
        except Exception:  # the API still works for registered sources
            log.exception("the text-to-SQL demo databases could not be registered")
        self.scheduler.start()

    async def stop(self) -> None:
        await self.scheduler.stop()

    # -- the registry's store: each call a transaction, run on the event loop -----------------------
    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or threading.get_ident() == self._loop_thread:
            coro.close()
            raise RuntimeError("the source store is called from worker threads only (asyncio.to_thread)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _load(self, name: str) -> SourceSpec | None:
        return self._on_loop(self.load_spec(name))

    def _save(self, spec: SourceSpec) -> None:
        self._on_loop(self._asave(spec))

    def _delete(self, name: str) -> bool:
        return self._on_loop(self._adelete(name))

    def _names(self) -> list[str]:
        return self._on_loop(self._anames())

    async def load_spec(self, name: str) -> SourceSpec | None:
        async with self.state.db.sessions() as session:
            row = await session.get(Text2SQLSource, name)
            return SourceSpec(row.name, self.secrets.open(row.url), row.description, row.db_schema,
                              {"created_by": row.created_by}) if row else None

    async def _asave(self, spec: SourceSpec) -> None:
        async with self.state.db.sessions() as session:
            await session.merge(Text2SQLSource(name=spec.name, url=self.secrets.seal(spec.url),
                                               description=spec.description, db_schema=spec.db_schema,
                                               created_by=_owner(spec)))
            await session.commit()

    async def _adelete(self, name: str) -> bool:
        async with self.state.db.sessions() as session:
            result = await session.execute(delete(Text2SQLSource).where(Text2SQLSource.name == name))
            await session.commit()
            return bool(result.rowcount)

    async def _anames(self) -> list[str]:
        async with self.state.db.sessions() as session:
            return list((await session.scalars(select(Text2SQLSource.name).order_by(Text2SQLSource.name))).all())

    # -- sources -------------------------------------------------------------------------------------
    async def register_demos(self) -> None:
        from integrations.text2sql.dataset import demo_database

        for schema in DEMO_SCHEMAS:
            name = f"demo_{schema}"
            path = await asyncio.to_thread(demo_database, schema)  # (re)built into the cache if missing
            if await self.load_spec(name) is None:
                await self._asave(SourceSpec(name, f"sqlite:///{path}", f"demo database {schema!r}"))

    def may_manage(self, caller: Caller) -> None:
        """Registering, replacing and deleting sources: admins, and database keys only with
        --text2sql-user-sources (403 otherwise)."""
        if not caller.admin and not self.state.settings.text2sql_user_sources:
            raise APIError(403, "managing text-to-SQL sources needs an admin key on this server (database keys may "
                           "when it runs with --text2sql-user-sources)", code="insufficient_permissions")

    async def register(self, name: str, url: str, description: str = "", *, db_schema: str | None = None,
                       replace: bool = False, caller: Caller = ADMIN_CALLER) -> Source:
        """Opens and introspects the database first, so a URL that cannot work is refused now (400);
        the source policy (gateway/security/source_policy.py) is asked before anything connects."""
        self.may_manage(caller)
        if has_secret(url) and not self.secrets.enabled:  # refused before anything connects
            raise APIError(400, "this server stores database passwords encrypted and has no SLLM_SECRET_KEY; start it "
                           "with one to register this URL", param="url", code="secret_key_missing")
        existing = await self._row(name)
        if existing is not None and not replace:
            raise APIError(409, f"a source named {name!r} already exists", param="name", code="duplicate_source")
        if existing is not None and not caller.sees(existing):
            # Another key's (or the admin's) source is never replaced by this key; its name is taken.
            raise APIError(409, f"a source named {name!r} already exists and is not this key's to replace",
                           param="name", code="duplicate_source")
        try:
            return await asyncio.to_thread(self.registry.register, name, url, description, replace=replace,
                                           db_schema=db_schema, check=True, extra={"created_by": caller.owner})
        except SourceUnavailable as exc:  # reachable or not, it cannot be registered as it is
            raise APIError(400, exc.message, param="url", code=exc.code) from None
        except Text2SQLError as exc:
            raise api_error(exc, "url" if exc.status == 400 else "name") from None

    async def _row(self, name: str) -> Text2SQLSource | None:
        async with self.state.db.sessions() as session:
            return await session.get(Text2SQLSource, name)

    async def source(self, name: str, param: str = "source", caller: Caller = ADMIN_CALLER) -> Source:
        """A source the caller may use: the admin's (shared with every key) and its own; another key's
        is answered as unknown, and the hint names only sources the caller may use."""
        row = await self._row(name)
        if row is None or not _visible(row, caller):
            known = [s.name for s in await self.sources(caller)]
            hint = f"; registered: {', '.join(known)}" if known else "; none are registered"
            raise api_error(UnknownSource(f"no text-to-SQL source named {name!r}{hint}"), param)
        try:
            return await asyncio.to_thread(self.registry.get, name)
        except Text2SQLError as exc:
            raise api_error(exc, param) from None

    async def sources(self, caller: Caller = ADMIN_CALLER) -> list[Source]:
        async with self.state.db.sessions() as session:
            rows = (await session.scalars(select(Text2SQLSource).order_by(Text2SQLSource.name))).all()
        names = [r.name for r in rows if _visible(r, caller)]
        return [await asyncio.to_thread(self.registry.get, n) for n in names]

    async def unregister(self, name: str, caller: Caller = ADMIN_CALLER) -> None:
        self.may_manage(caller)
        row = await self._row(name)
        if row is None or not caller.sees(row):
            if row is not None and _visible(row, caller):  # the admin's shared source: seen, not this key's
                raise APIError(403, f"source {name!r} is the admin's; a database key deletes only its own",
                               param="name", code="insufficient_permissions")
            raise api_error(UnknownSource(f"no text-to-SQL source named {name!r}"), "name")
        async with self.state.db.sessions() as session:
            used = (await session.scalars(select(Text2SQLSchedule.id).where(Text2SQLSchedule.source == name))).all()
        if used:
            raise APIError(409, f"source {name!r} is used by schedules {', '.join(used)}; delete them first",
                           param="name", code="source_in_use")
        try:
            await asyncio.to_thread(self.registry.unregister, name)
        except UnknownSource as exc:
            raise api_error(exc, "name") from None

    @staticmethod
    async def describe(source: Source, with_schema: bool = False) -> SourceObject:
        try:
            return SourceObject(**await asyncio.to_thread(source.to_dict, with_schema))
        except Text2SQLError as exc:
            raise api_error(exc, "name") from None

    # -- asking --------------------------------------------------------------------------------------
    async def ask(self, served: Served | None, source_name: str, *, question: str | None = None,
                  sql: str | None = None, execute: bool = True, max_rows: int = 100, constrained: bool = True,
                  max_tokens: int | None = None, timeout_s: float = 5.0, request: Request | None = None,
                  candidates: int = 1, sample_when: str = "always", caller: Caller = ADMIN_CALLER) -> AskResult:
        """`question` through the model (`served`: embedded or upstream), or `sql` as given, over a source
        `caller` may use. Unsafe SQL is a 400 (and never reaches the database: the validator refuses it, the
        read-only connection too)."""
        source = await self.source(source_name, caller=caller)
        try:
            if sql is not None:
                result = await arun_sql(source, sql, execute=execute, max_rows=max_rows, timeout_s=timeout_s,
                                        question=question)
            else:
                assert served is not None and question is not None
                limit = max_tokens or DEFAULT_MAX_TOKENS
                style = AdapterStyle()  # grammar and prompt; the adapter's own when the question goes through it
                calls: _EngineCalls | None = None
                if isinstance(served, UpstreamModel):
                    complete = _upstream_complete(self.state, served, limit)
                    sample = _upstream_complete(self.state, served, limit, SAMPLE_TEMPERATURE)
                else:
                    engine = await self._engine(served)
                    if isinstance(engine, AdapterEngine) and engine.lora_name == LORA_NAME:
                        style = self.adapter_style
                    elif isinstance(served, LoRAModel):  # a LoRA named as the model: asked in its own style
                        style = await asyncio.to_thread(adapter_style, Path(served.path))
                    calls = _EngineCalls(self.state, engine, request)
                    complete = async_engine_complete(calls, max_tokens=limit)
                    sample = async_engine_complete(calls, max_tokens=limit, temperature=SAMPLE_TEMPERATURE)
                gen = SQLGenerator(acomplete=complete, **style.generator_kwargs())
                with calls or nullcontext():
                    if candidates > 1:
                        sampler = SQLGenerator(acomplete=sample, **style.generator_kwargs())
                        result = await aask_selected(source, question, gen, sampler, candidates,
                                                     constrained=constrained, execute=execute, max_rows=max_rows,
                                                     timeout_s=timeout_s, when=sample_when)
                    else:
                        result = await aask(source, question, gen, constrained=constrained, execute=execute,
                                            max_rows=max_rows, timeout_s=timeout_s)
        except Text2SQLError as exc:
            raise _call_error(exc) or api_error(exc) from None
        if isinstance(result.error, UnsafeSQL):
            where = "the given SQL" if sql is not None else f"the generated SQL ({result.sql!r})"
            raise APIError(400, f"{where} was refused: {result.error.message}. Only a single read-only SELECT "
                           "is ever run.", param="sql" if sql is not None else "question", code=result.error.code)
        return result

    async def _engine(self, served: Served):
        """The engine a question goes to: through the text-to-SQL adapter when one is configured and the
        request names the first embedded model (a LoRA model named explicitly is used as named). The
        adapter is registered on first use; other requests on that engine keep the base model."""
        engine = served.ready()
        first = next(iter(self.state.models.embedded), None)
        if self.adapter is None or not isinstance(served, EmbeddedModel) or served is not first:
            return engine
        async with self._adapter_lock:
            if LORA_NAME not in {r.lora_name for r in engine.list_loras()}:
                try:
                    await engine.add_lora(LORA_NAME, str(self.adapter))
                except InvalidRequestError as exc:
                    raise APIError(500, f"the text-to-SQL adapter could not be loaded: {exc.message}",
                                   code="text2sql_adapter_failed") from None
        return AdapterEngine(engine, LORA_NAME)

    async def run_schedule(self, schedule: Text2SQLSchedule) -> tuple[str, dict | None, dict | None]:
        """One scheduled run: (status, result body, error)."""
        served = self.state.models.default
        try:
            result = await self.ask(served, schedule.source, question=schedule.question, execute=schedule.execute,
                                    max_rows=schedule.max_rows, constrained=schedule.constrained,
                                    candidates=schedule.candidates or 1,
                                    caller=Caller.for_owner(schedule.created_by))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = as_api_error(exc)
            return "failed", None, {"code": err.code or err.info.type, "message": err.message}
        body = result_body(result, served.name).model_dump(mode="json")
        return ("completed" if result.error is None else "failed"), body, body["error"]
