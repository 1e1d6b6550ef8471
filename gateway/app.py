"""The FastAPI application: routers, error handlers, middleware, and the engine loaded off the event
loop at startup so `/health` can answer 503 while the model loads."""

import asyncio
import gc
import logging
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from engine import AsyncEngine
from gateway.db import Database
from gateway.jobs.runner import JobRunner
from gateway.limits.admission import Admission
from gateway.registry import ModelRegistry
from gateway.routers import (
    batches,
    chat,
    completions,
    embeddings,
    files,
    health,
    lora,
    messages,
    models,
    rerank,
    responses,
    text2sql,
    tokenize,
)
from gateway.security.secret_box import SecretBox
from gateway.serving.text2sql import Text2SQL
from gateway.settings import LOOPBACK_HOSTS, Settings
from gateway.state import ServerState
from gateway.tables.api_keys import any_active_key
from gateway.web import openapi_links
from gateway.web.deps import require_api_key
from gateway.web.errors import install_error_handlers
from gateway.web.middleware import RequestContextMiddleware

log = logging.getLogger(__name__)


async def freeze_startup_heap(loader: asyncio.Task | None) -> None:
    """Once the models have loaded, moves every object alive then (modules, weights' wrappers, tokenizers:
    ~365k on the default models) out of the collector's generations, as vLLM's API server does after its
    start: a full collection then walks only what serving made, instead of pausing every thread, the
    event loop and the engines' workers alike, for half a second or more. Collected first, or today's
    start's garbage would be kept for good. The one collection here is paid once, at the start."""
    if loader is not None:
        await asyncio.wait([loader])
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("%d objects of the start frozen out of garbage collection in %.2fs", gc.get_freeze_count(),
             time.perf_counter() - started)


def create_app(settings: Settings, engine: AsyncEngine | None = None, freeze_gc: bool = False) -> FastAPI:
    """`engine`: an already-loaded engine to serve as the first embedded model (tests, benchmarks);
    otherwise every embedded model is loaded from `settings` at startup and shut down with the app.
    `freeze_gc`: freeze the heap once the models have loaded (freeze_startup_heap), and unfreeze it when
    the app stops. The collector is the process's, not the app's, so only a process that is this one
    server asks for it (`sllm serve`); tests and programs that start several apps in one process leave
    it alone."""
    state = ServerState(settings=settings, db=Database(settings.db), admission=Admission(settings.max_in_flight),
                        models=ModelRegistry.from_settings(settings, engine))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await state.db.create_all()
        await SecretBox(settings.secret_key).check_database(state.db)  # a missing key fails the start, saying so
        async for session in state.db.session():
            state.db_has_keys = await any_active_key(session)
        if not state.auth_enabled and settings.host not in LOOPBACK_HOSTS:
            log.warning("serving on %s without API keys: anyone who can reach it can use it", settings.host)
        loader = asyncio.create_task(state.models.load(settings)) if state.models.loading else None
        state.jobs = JobRunner(state)
        state.jobs.start()  # resumes queued and interrupted jobs once the engine is ready
        state.text2sql = Text2SQL(state)
        await state.text2sql.start()  # demo sources registered; due schedules run once the engine is ready
        freezer = asyncio.create_task(freeze_startup_heap(loader)) if freeze_gc else None
        try:
            yield
        finally:
            if freezer is not None:
                freezer.cancel()
                await asyncio.gather(freezer, return_exceptions=True)
                gc.unfreeze()  # what the app held becomes collectable again once it lets go
            await state.text2sql.stop()
            await state.jobs.stop()
            if loader is not None:
                await asyncio.gather(loader, return_exceptions=True)
            await state.models.aclose(keep=engine)  # a given engine is the caller's to stop
            await state.db.dispose()

    app = FastAPI(title="sllm", version="0.1.0", lifespan=lifespan)
    app.state.sllm = state
    install_error_handlers(app)
    secured = [Depends(require_api_key)]
    for router in (models.router, completions.router, chat.router, responses.router, files.router, batches.router,
                   text2sql.router, embeddings.router, rerank.router, messages.router):
        app.include_router(router, dependencies=secured)
    app.include_router(tokenize.router, dependencies=secured)
    app.include_router(lora.router)  # its own dependency: admin keys
    app.include_router(health.router)
    openapi_links.install(app)
    # An upload may be as large as --max-file-bytes, plus its multipart framing.
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_request_body_bytes,
                       body_limits={"/v1/files": max(settings.max_request_body_bytes, settings.max_file_bytes + 65536)})
    return app
