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
    """200 once every embedded and encoder model is up; upstreams are checked passively, by the requests to
    them."""
    for model in [*state.models.embedded, *state.models.encoders]:
        try:
            model.encoder() if isinstance(model, EncoderModel) else model.ready()
        except APIError as exc:
            exc.headers = None
            return error_response(exc)
    return JSONResponse(HealthStatus(model=state.model_name, models=list(state.models.models)).model_dump())


@router.get("/metrics")
async def metrics(state: State) -> Response:
    try:
        state.metrics.observe_backlog(await backlog(state.db))
    except Exception:  # a scrape still answers while the database is away; the backlog keeps its last value
        log.warning("/metrics: could not read the job backlog from the database", exc_info=True)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
