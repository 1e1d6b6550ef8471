"""Server settings: one pydantic model filled from `sllm serve` flags (each also an SLLM_* variable)."""

import os
from pathlib import Path

from pydantic import BaseModel, Field

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def default_db_path() -> str:
    # Stored responses and API keys are data, not cache: they live beside other user data.
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "sllm" / "sllm.db")


class Settings(BaseModel):
    model: str = "default"
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: list[str] = Field(default_factory=list)
    max_model_len: int | None = None
    max_num_seqs: int = 128
    block_size: int = 16
    num_kv_blocks: int | None = None
    max_queued_requests: int = 256
    max_request_body_bytes: int = 8 * 1024 * 1024
    db: str = Field(default_factory=default_db_path)
    log_level: str = "info"
    speculative_config: dict | None = None  # as vLLM: {"method": "ngram" | "draft", "num_speculative_tokens": K, ...}

    @property
    def max_in_flight(self) -> int:
        """Requests admitted at once: one running slot per sequence plus the bounded waiting queue."""
        return self.max_num_seqs + self.max_queued_requests

    def engine_config(self):
        from engine import EngineConfig

        return EngineConfig(
            model=self.model,
            served_model_name=self.served_model_name,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_kv_blocks=self.num_kv_blocks,
            speculative_config=self.speculative_config,
        )
