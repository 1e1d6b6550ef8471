"""`GET /health` (503 until the model has loaded) and `GET /metrics` (Prometheus text format)."""

import logging

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.jobs.backlog import backlog
from gateway.protocol.common import HealthStatus
from gateway.registry import EncoderModel
from gateway.web.deps import State
from gateway.web.errors import APIError, error_response

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/health")
async def health(state: State) -> Response:
    """200 once every embedded and encoder model asked for is up; the embedding model served beside them
    (--embedding-model) may still be loading, named in `loading`, its requests answered 503 meanwhile. A
    model that failed to load or stopped keeps it 503. Upstreams are checked passively, by the requests to
    them."""
    loading = state.models.still_loading
    for model in [*state.models.embedded, *state.models.encoders]:
        if isinstance(model, EncoderModel) and model.beside and any(model is m for m in loading):
            continue
        try:
            model.encoder() if isinstance(model, EncoderModel) else model.ready()
        except APIError as exc:
            exc.headers = None
            return error_response(exc)
    return JSONResponse(HealthStatus(model=state.model_name, models=list(state.models.models),
                                     loading=[m.name for m in loading]).model_dump())


@router.get("/metrics")
async def metrics(state: State) -> Response:
    try:
        state.metrics.observe_backlog(await backlog(state.db))
    except Exception:  # a scrape still answers while the database is away; the backlog keeps its last value
        log.warning("/metrics: could not read the job backlog from the database", exc_info=True)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
