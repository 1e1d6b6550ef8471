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
    # Jobs (batches, background responses): how many of their requests the engine holds at once,
    # when no interactive request is in flight and when one is (or was, within job_quiet_s).
    job_concurrency: int = Field(16, ge=1)
    job_concurrency_busy: int = Field(1, ge=0)
    job_quiet_s: float = Field(3.0, ge=0)
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=1)
    max_batch_lines: int = Field(50_000, ge=1)
    # Webhooks: refused unless a secret and an allow-list of hosts are configured.
    webhook_secret: str | None = None
    webhook_allow_hosts: list[str] = Field(default_factory=list)
    webhook_max_attempts: int = Field(8, ge=1)
    webhook_backoff_s: float = Field(1.0, gt=0)  # doubled after each failed attempt
    webhook_timeout_s: float = Field(10.0, gt=0)

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
