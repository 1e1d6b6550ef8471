"""The models a server answers for, by name: embedded engines (loaded at startup, off the event loop)
and upstream OpenAI-compatible servers (gateway/upstream/). Every endpoint resolves the request's
`model` here first; an empty name means the first model configured."""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from engine import AsyncEngine
from gateway.errors import APIError
from gateway.settings import ModelEntry, Settings

log = logging.getLogger(__name__)


@dataclass
class EmbeddedModel:
    name: str
    entry: ModelEntry
    engine: AsyncEngine | None = None  # None while it loads (or if it failed to)
    load_error: str | None = None
    kind: ClassVar[str] = "embedded"

    def ready(self) -> AsyncEngine:
        """The engine, or the 503 a request gets while it loads, failed to load, or has stopped."""
        if self.engine is None:
            why = f"the model failed to load: {self.load_error}" if self.load_error else "the model is loading"
            raise APIError(503, f"{self.name}: {why}", code="model_not_ready", headers={"retry-after": "5"})
        if not self.engine.is_running:
            raise APIError(503, f"{self.name}: the engine has stopped", code="engine_dead")
        return self.engine

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len if self.engine is not None else self.entry.max_model_len


@dataclass
class UpstreamModel:
    name: str
    entry: ModelEntry
    pool: Any  # gateway.upstream.UpstreamPool
    kind: ClassVar[str] = "upstream"
    max_model_len: ClassVar[None] = None  # the upstream knows; we do not ask it on every listing


Served = EmbeddedModel | UpstreamModel


@dataclass
class ModelRegistry:
    models: dict[str, Served] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings, engine: AsyncEngine | None = None) -> "ModelRegistry":
        """`engine`: an already-loaded engine for the first embedded model (tests, benchmarks)."""
        reg = cls()
        for entry in settings.model_entries():
            if entry.is_upstream:
                reg.add(UpstreamModel(entry.served_name, entry, _pool(entry)))
            else:
                model = EmbeddedModel(entry.served_name, entry)
                if engine is not None and not reg.embedded:
                    model.engine, model.name = engine, engine.served_model_name
                reg.add(model)
        return reg

    def add(self, model: Served) -> None:
        assert model.name not in self.models, f"model {model.name!r} twice"
        self.models[model.name] = model

    @property
    def embedded(self) -> list[EmbeddedModel]:
        return [m for m in self.models.values() if isinstance(m, EmbeddedModel)]

    @property
    def upstreams(self) -> list[UpstreamModel]:
        return [m for m in self.models.values() if isinstance(m, UpstreamModel)]

    @property
    def default(self) -> Served:
        return next(iter(self.models.values()))

    def resolve(self, name: str | None, param: str = "model") -> Served:
        if not name:
            return self.default
        model = self.models.get(name)
        if model is None:
            served = ", ".join(f"`{n}`" for n in self.models)
            raise APIError(404, f"The model `{name}` does not exist. This server serves {served}.",
                           param=param, code="model_not_found")
        return model

    def embedded_engine(self, name: str | None, param: str = "model") -> AsyncEngine:
        """For features that need our own engine (tokenize, a tokenizer): 400 for an upstream model."""
        model = self.resolve(name, param)
        if isinstance(model, UpstreamModel):
            raise APIError(400, f"`{model.name}` is served by an upstream server; this endpoint needs an embedded "
                           "model", param=param, code="unsupported_for_upstream")
        return model.ready()

    @property
    def loading(self) -> bool:
        return any(m.engine is None and m.load_error is None for m in self.embedded)

    async def load(self, settings: Settings) -> None:
        """Loads every embedded model not loaded yet, one after another (each load uses every core)."""
        for model in self.embedded:
            if model.engine is not None:
                continue
            try:
                model.engine = await asyncio.to_thread(AsyncEngine, settings.engine_config(model.entry))
                log.info("serving %s (max_model_len=%d)", model.name, model.engine.max_model_len)
            except Exception as exc:
                log.exception("model %s failed to load", model.name)
                model.load_error = str(exc)

    async def aclose(self, keep: AsyncEngine | None = None) -> None:
        for model in self.upstreams:
            await model.pool.aclose()
        for model in self.embedded:
            if model.engine is not None and model.engine is not keep:
                model.engine.shutdown()


def _pool(entry: ModelEntry):
    from gateway.upstream import UpstreamPool, UpstreamTarget

    targets = [UpstreamTarget(url=u.url.rstrip("/"), api_key=u.key(entry.api_key or _env(entry.api_key_env)),
                              model=u.model or entry.upstream_model) for u in entry.upstream]
    return UpstreamPool(entry.served_name, targets, connect_timeout=entry.connect_timeout_s,
                        read_timeout=entry.read_timeout_s, retries=entry.retries, cooldown_s=entry.cooldown_s)


def _env(name: str | None) -> str | None:
    import os

    return os.environ.get(name) if name else None
