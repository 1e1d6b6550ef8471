"""`GET /health` (503 until the model has loaded) and `GET /metrics` (Prometheus text format)."""

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.deps import State
from gateway.errors import APIError, error_response
from gateway.protocol.common import HealthStatus

router = APIRouter()


@router.get("/health")
async def health(state: State) -> Response:
    if state.engine is None:
        why = f"the model failed to load: {state.load_error}" if state.load_error else "the model is loading"
        return error_response(APIError(503, why, code="model_not_ready"))
    if not state.engine.is_running:
        return error_response(APIError(503, "the engine has stopped", code="engine_dead"))
    return JSONResponse(HealthStatus(model=state.model_name).model_dump())


@router.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
