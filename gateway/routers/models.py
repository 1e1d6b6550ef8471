"""`GET /v1/models` and `GET /v1/models/{id}`: answered from memory, so they stay fast under load."""

from fastapi import APIRouter

from gateway.deps import State, check_model
from gateway.protocol.common import ModelCard, ModelList

router = APIRouter(prefix="/v1")


def _card(state) -> ModelCard:
    engine = state.engine
    return ModelCard(id=state.model_name, root=state.settings.model, created=state.started_at,
                     max_model_len=engine.max_model_len if engine else state.settings.max_model_len)


@router.get("/models", response_model=ModelList)
async def list_models(state: State) -> ModelList:
    return ModelList(data=[_card(state)])


@router.get("/models/{model_id:path}", response_model=ModelCard)
async def get_model(model_id: str, state: State) -> ModelCard:
    check_model(state, model_id)
    return _card(state)
