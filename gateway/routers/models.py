"""`GET /v1/models` and `GET /v1/models/{id}`: answered from memory, so they stay fast under load.
Embedded models are `owned_by` sllm; upstream ones by "upstream" (their `root` is the name there); a
LoRA adapter's `root` is its folder and `parent` its base model, as vLLM lists them. A database key
sees a local folder's name only: where the server keeps its files is the operator's to know."""

import os

from fastapi import APIRouter

from gateway.protocol.common import ModelCard, ModelList
from gateway.registry import EmbeddedModel, EncoderModel, LoRAModel, PooledModel, Served, UpstreamModel
from gateway.security.tenancy import Caller
from gateway.web.deps import CallerDep, State

router = APIRouter(prefix="/v1")


def _root(root: str | None, caller: Caller) -> str | None:
    if root is None or caller.admin or not os.path.exists(root):  # a hub id, or an admin asking
        return root
    return os.path.basename(os.path.normpath(root))


def _matryoshka(model: Served) -> dict:
    """A loaded embedding model's Matryoshka fields (vLLM's names); nothing for others."""
    if isinstance(model, PooledModel):
        engine = model.base.engine
    elif isinstance(model, EmbeddedModel) or (isinstance(model, EncoderModel) and model.task == "embed"):
        engine = model.engine
    else:
        return {}
    if engine is None:
        return {}
    sizes = engine.matryoshka.sizes
    return {"is_matryoshka": engine.matryoshka.enabled, "matryoshka_dimensions": list(sizes) if sizes else None}


def _card(state, model: Served, caller: Caller) -> ModelCard:
    if isinstance(model, UpstreamModel):
        return ModelCard(id=model.name, owned_by="upstream", created=state.started_at,
                         root=model.entry.upstream_model or model.name)
    if isinstance(model, PooledModel):  # the chat model's pooled states, for /v1/embeddings
        return ModelCard(id=model.name, root=_root(model.base.entry.model, caller), parent=model.base.name,
                         created=state.started_at, max_model_len=model.max_model_len, **_matryoshka(model))
    if isinstance(model, LoRAModel):
        return ModelCard(id=model.name, root=_root(model.path, caller), parent=model.base.name,
                         created=state.started_at, max_model_len=model.max_model_len)
    return ModelCard(id=model.name, root=_root(model.entry.model, caller), created=state.started_at,
                     max_model_len=model.max_model_len, **_matryoshka(model))


@router.get("/models", response_model=ModelList)
async def list_models(state: State, caller: CallerDep) -> ModelList:
    return ModelList(data=[_card(state, m, caller) for m in state.models.models.values()])


@router.get("/models/{model_id:path}", response_model=ModelCard)
async def get_model(model_id: str, state: State, caller: CallerDep) -> ModelCard:
    return _card(state, state.models.resolve(model_id), caller)
