"""What the running server holds: settings, the engine (None while it loads), database, limits."""

from dataclasses import dataclass, field
from typing import Any

from engine import AsyncEngine
from gateway.admission import Admission
from gateway.db import Database
from gateway.metrics import Metrics
from gateway.protocol.common import now
from gateway.settings import Settings


@dataclass
class ServerState:
    settings: Settings
    db: Database
    admission: Admission
    engine: AsyncEngine | None = None
    load_error: str | None = None
    db_has_keys: bool = False
    started_at: int = field(default_factory=now)  # the model card's `created`
    jobs: Any = None  # gateway.jobs.runner.JobRunner: batches and background responses
    text2sql: Any = None  # gateway.text2sql.Text2SQL: sources, asking, and the schedules' scheduler
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.engine_stats, lambda: self.model_name)

    @property
    def model_name(self) -> str:
        if self.engine is not None:
            return self.engine.served_model_name
        from engine.loader import default_served_name

        return self.settings.served_model_name or default_served_name(self.settings.model)

    def engine_stats(self) -> dict[str, Any] | None:
        return self.engine.stats() if self.engine is not None else None

    @property
    def auth_enabled(self) -> bool:
        return bool(self.settings.api_keys) or self.db_has_keys
