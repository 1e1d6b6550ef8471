"""The models a server answers for, by name: embedded engines (loaded at startup, off the event loop)
and upstream OpenAI-compatible servers (gateway/upstream/). Every endpoint resolves the request's
`model` here first; an empty name means the first model configured."""

import asyncio
import fnmatch
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from engine import AsyncEngine, InvalidRequestError
from engine.encoder_engine import EncoderEngine
from engine.loader import DEFAULT_EMBEDDING_NAME, default_embedding_model_path
from engine.models.bert import EncoderConfig, is_encoder_folder
from gateway.security.tenancy import ADMIN
from gateway.settings import ModelEntry, Settings, reserved_lora_name
from gateway.web.errors import APIError

log = logging.getLogger(__name__)


def _running(name: str, engine, load_error: str | None):
    """`engine`, or the 503 a request gets while its model loads, failed to load, or has stopped (embedded
    decoders and encoders alike)."""
    if engine is None:
        why = f"the model failed to load: {load_error}" if load_error else "the model is loading"
        raise APIError(503, f"{name}: {why}", code="model_not_ready", headers={"retry-after": "5"})
    if not engine.is_running:
        raise APIError(503, f"{name}: the engine has stopped", code="engine_dead")
    return engine


@dataclass
class EmbeddedModel:
    name: str
    entry: ModelEntry
    engine: AsyncEngine | None = None  # None while it loads (or if it failed to)
    load_error: str | None = None
    kind: ClassVar[str] = "embedded"

    def ready(self) -> AsyncEngine:
        """The engine, or the 503 a request gets while it loads, failed to load, or has stopped."""
        return _running(self.name, self.engine, self.load_error)

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len if self.engine is not None else self.entry.max_model_len

    @property
    def reranker(self) -> bool:
        """A decoder reranker (Qwen3-Reranker kind): rerank and score read its yes/no logits."""
        if self.entry.reranker is not None:
            return self.entry.reranker
        return "qwen3-reranker" in Path(self.entry.model or "").name.lower()


class AdapterEngine:
    """An embedded engine seen through one LoRA adapter: every generate call carries the adapter, so
    chat, completions, responses, batches and text-to-SQL serve it unchanged; the rest is the base's."""

    def __init__(self, base: AsyncEngine, lora_name: str):
        self._base = base
        self.lora_name = lora_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    @property
    def served_model_name(self) -> str:
        return self.lora_name

    def generate(self, prompt, params=None, request_id=None, priority: int = 0, fairness_key=None):
        return self._base.generate(prompt, params, request_id, priority, fairness_key, self.lora_name)

    async def generate_full(self, prompt, params=None, request_id=None, priority: int = 0, fairness_key=None):
        return await self._base.generate_full(prompt, params, request_id, priority, fairness_key, self.lora_name)


class OnBaseModel:
    """A name served by an embedded model's engine (an adapter on it, its pooled states): its entry and context
    are the base model's."""

    base: EmbeddedModel

    @property
    def entry(self) -> ModelEntry:
        return self.base.entry

    @property
    def max_model_len(self) -> int | None:
        return self.base.max_model_len


@dataclass
class LoRAModel(OnBaseModel):
    """A LoRA adapter served as a model of its own name, on its base model's engine (vLLM's `parent`).
    Like the base models it is the server's: every key may use it; loading and unloading one are
    admin work (gateway/routers/lora.py). `loaded_by` records who loaded it (gateway/security/tenancy.py's
    owners; --lora-modules adapters are the operator's, `admin`)."""

    name: str
    base: EmbeddedModel
    path: str
    loaded_by: str = ADMIN
    kind: ClassVar[str] = "lora"

    def ready(self) -> AdapterEngine:
        return AdapterEngine(self.base.ready(), self.name)


@dataclass
class UpstreamModel:
    name: str
    entry: ModelEntry
    pool: Any  # gateway.upstream.UpstreamPool
    kind: ClassVar[str] = "upstream"
    max_model_len: ClassVar[None] = None  # the upstream knows; we do not ask it on every listing


@dataclass
class PooledModel(OnBaseModel):
    """An embedded model's pooled hidden states served for /v1/embeddings under a name of their own (the
    chat model's with "-embed": n8n's embeddings node lists only ids containing "embed")."""

    name: str
    base: EmbeddedModel
    pooling: str
    kind: ClassVar[str] = "embedding"

    def ready(self) -> AsyncEngine:
        return self.base.ready()


@dataclass
class EncoderModel:
    """An encoder of the BERT family (engine/encoder_engine.py): an embedding model (`task` "embed", for
    /v1/embeddings) or a cross-encoder ("score", for /v1/rerank and /score). It generates nothing."""

    name: str
    entry: ModelEntry
    task: str
    engine: EncoderEngine | None = None
    load_error: str | None = None
    # --embedding-model's, served beside the models asked for: it loads after them and /health does not wait
    # for it (its requests get the 503 "loading" meanwhile), so the chat model answers a second sooner.
    beside: bool = False
    kind: ClassVar[str] = "encoder"

    def ready(self):
        """What every generating endpoint asks for: an encoder generates nothing, so a 400."""
        uses = "/v1/embeddings" if self.task == "embed" else "/v1/rerank and /score"
        raise APIError(400, f"`{self.name}` is an encoder model: it serves {uses} only", param="model",
                       code="unsupported_for_encoder")

    def encoder(self) -> EncoderEngine:
        """The engine, or the 503 a request gets while it loads, failed to load, or has stopped."""
        return _running(self.name, self.engine, self.load_error)

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len if self.engine is not None else self.entry.max_model_len


Served = EmbeddedModel | UpstreamModel | LoRAModel | PooledModel | EncoderModel


def _encoder(entry: ModelEntry, name: str) -> EncoderModel:
    return EncoderModel(name, entry, EncoderConfig.from_folder(Path(entry.model or "").expanduser()).task)


def _embedding_model(settings: Settings) -> EncoderModel | None:
    """--embedding-model: the bundled all-MiniLM-L6-v2 ("default", when installed), a folder, or none."""
    choice = settings.embedding_model
    if choice == "none":
        return None
    if choice == "default":
        folder = default_embedding_model_path()
        if folder is None:
            return None
        name = DEFAULT_EMBEDDING_NAME
    else:
        folder = Path(choice).expanduser()
        if not is_encoder_folder(folder):
            raise ValueError(f"--embedding-model {choice}: not a folder holding a BERT-family encoder")
        name = folder.name
    model = _encoder(ModelEntry(model=str(folder)), name if "embed" in name.lower() else f"{name}-embed")
    model.beside = True
    return model


@dataclass
class ModelRegistry:
    models: dict[str, Served] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # --model-alias: a name or glob -> a served name

    @classmethod
    def from_settings(cls, settings: Settings, engine: AsyncEngine | None = None) -> "ModelRegistry":
        """`engine`: an already-loaded engine for the first embedded model (tests, benchmarks)."""
        reg = cls(aliases=dict(settings.model_alias))
        for entry in settings.model_entries():
            if entry.is_upstream:
                reg.add(UpstreamModel(entry.served_name, entry, _pool(entry)))
            elif entry.model and is_encoder_folder(Path(entry.model).expanduser()):
                reg.add(_encoder(entry, entry.served_name))
            else:
                model = EmbeddedModel(entry.served_name, entry)
                if engine is not None and not reg.embedded:
                    model.engine, model.name = engine, engine.served_model_name
                    reg.add(model)
                    reg._add_loras(model)
                else:
                    reg.add(model)
                if settings.embedding_pooling != "none" and f"{model.name}-embed" not in reg.models:
                    reg.add(PooledModel(f"{model.name}-embed", model, settings.embedding_pooling))
        extra = _embedding_model(settings)
        if extra is not None and extra.name not in reg.models:
            reg.add(extra)
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
    def encoders(self) -> list[EncoderModel]:
        return [m for m in self.models.values() if isinstance(m, EncoderModel)]

    def embedding_default(self) -> Served:
        """What /v1/embeddings answers with when no model is named: the first encoder embedding model,
        else the first model."""
        return next((m for m in self.encoders if m.task == "embed"), self.default)

    @property
    def loras(self) -> list[LoRAModel]:
        return [m for m in self.models.values() if isinstance(m, LoRAModel)]

    def _add_loras(self, model: EmbeddedModel) -> None:
        for lora in model.engine.list_loras():
            if lora.lora_name not in self.models:
                self.add(LoRAModel(lora.lora_name, model, lora.lora_path))

    async def load_lora(self, name: str, path: str, base: str | None = None, loaded_by: str = ADMIN) -> LoRAModel:
        """Loads a PEFT adapter at run time on an embedded model (the first one unless `base` is named)."""
        if name in self.models:
            raise APIError(400, f"The model name `{name}` is already served.", param="lora_name",
                           code="lora_name_in_use")
        if reserved_lora_name(name):
            raise APIError(400, f"The name `{name}` is reserved for the text-to-SQL adapter.", param="lora_name",
                           code="lora_name_reserved")
        model = self.resolve(base, param="base_model_name") if base else next(iter(self.embedded), None)
        if not isinstance(model, EmbeddedModel):
            raise APIError(400, "LoRA adapters need an embedded base model.", param="base_model_name")
        try:
            await model.ready().add_lora(name, path)
        except InvalidRequestError as exc:
            raise APIError(400, exc.message, param="lora_path", code="invalid_lora_adapter") from None
        served = LoRAModel(name, model, path, loaded_by)
        self.add(served)
        log.info("LoRA adapter %s loaded on %s from %s by %s", name, model.name, path, loaded_by)
        return served

    async def unload_lora(self, name: str, unloaded_by: str = ADMIN) -> None:
        model = self.models.get(name)
        if not isinstance(model, LoRAModel):
            raise APIError(404, f"The LoRA adapter `{name}` is not loaded.", param="lora_name",
                           code="lora_adapter_not_found")
        try:
            await model.base.ready().remove_lora(name)
        except InvalidRequestError as exc:
            raise APIError(400, exc.message, param="lora_name", code="lora_adapter_in_use") from None
        except KeyError:
            pass  # already gone from the engine
        if self.models.pop(name, None) is None:  # a concurrent unload of the same name got there first
            raise APIError(404, f"The LoRA adapter `{name}` is not loaded.", param="lora_name",
                           code="lora_adapter_not_found")
        log.info("LoRA adapter %s (loaded by %s) unloaded by %s", name, model.loaded_by, unloaded_by)

    @property
    def default(self) -> Served:
        return next(iter(self.models.values()))

    def resolve(self, name: str | None, param: str = "model") -> Served:
        if not name:
            return self.default
        model = self.models.get(name)
        if model is None:
            target = next((t for pattern, t in self.aliases.items() if fnmatch.fnmatchcase(name, pattern)), None)
            model = self.models.get(target) if target is not None else None
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
    def still_loading(self) -> list[EmbeddedModel | EncoderModel]:
        return [m for m in [*self.embedded, *self.encoders] if m.engine is None and m.load_error is None]

    @property
    def loading(self) -> bool:
        return bool(self.still_loading)

    async def load(self, settings: Settings) -> None:
        """Loads every embedded model not loaded yet, one after another (each load uses every core): the
        decoders, then the encoders in the order they were added, so --embedding-model's comes last."""
        for model in self.embedded:
            if model.engine is not None:
                continue
            try:
                model.engine = await asyncio.to_thread(AsyncEngine, settings.engine_config(model.entry))
                log.info("serving %s (max_model_len=%d)", model.name, model.engine.max_model_len)
                self._add_loras(model)
            except Exception as exc:
                log.exception("model %s failed to load", model.name)
                model.load_error = str(exc)
        for encoder in self.encoders:
            if encoder.engine is not None:
                continue
            try:
                # The server-wide --hf-overrides describe the models given with --model, not the one beside them.
                overrides = encoder.entry.hf_overrides or (None if encoder.beside else settings.hf_overrides)
                # Its torch work on the first decoder's step thread: one OpenMP pool in the process
                # (AsyncEngine.call_soon says what a second one costs).
                beside = next((m.engine for m in self.embedded if m.engine is not None and m.engine.is_running), None)
                encoder.engine = await asyncio.to_thread(EncoderEngine, encoder.entry.model, encoder.name,
                                                         priority_aging_s=settings.priority_aging_s,
                                                         hf_overrides=overrides,
                                                         run_torch=beside.call_soon if beside else None)
                log.info("serving %s (%s, max_seq_length=%d)", encoder.name, encoder.task, encoder.engine.max_model_len)
            except Exception as exc:
                log.exception("model %s failed to load", encoder.name)
                encoder.load_error = str(exc)

    async def aclose(self, keep: AsyncEngine | None = None) -> None:
        for model in self.upstreams:
            await model.pool.aclose()
        for model in [*self.embedded, *self.encoders]:
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
