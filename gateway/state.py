"""What the running server holds: settings, the models it serves, database, limits."""

from dataclasses import dataclass, field
from typing import Any

from engine import AsyncEngine
from gateway.db import Database
from gateway.limits.admission import Admission
from gateway.limits.metrics import Metrics
from gateway.protocol.common import now
from gateway.registry import EmbeddedModel, ModelRegistry
from gateway.settings import Settings


@dataclass
class ServerState:
    settings: Settings
    db: Database
    admission: Admission
    models: ModelRegistry
    db_has_keys: bool = False
    started_at: int = field(default_factory=now)  # the model cards' `created`
    jobs: Any = None  # gateway.jobs.runner.JobRunner: batches and background responses
    text2sql: Any = None  # gateway.serving.text2sql.Text2SQL: sources, asking, and the schedules' scheduler
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.models)

    @property
    def primary(self) -> EmbeddedModel | None:
        """The first embedded model: the one jobs are paced against (None on a pure router)."""
        embedded = self.models.embedded
        return embedded[0] if embedded else None

    @property
    def engine(self) -> AsyncEngine | None:
        return self.primary.engine if self.primary else None

    @property
    def model_name(self) -> str:
        """The model a request naming none gets."""
        return self.models.default.name

    def engine_stats(self) -> dict[str, Any] | None:
        return self.engine.stats() if self.engine is not None else None

    @property
    def auth_enabled(self) -> bool:
        return bool(self.settings.api_keys) or self.db_has_keys
