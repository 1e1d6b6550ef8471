"""What a sentence-transformers folder says about serving its encoder: the pooling (`modules.json`,
`1_Pooling/config.json`: any one mode of its Pooling module, engine/pooling.py; several concatenated are
refused), whether vectors are L2-normalised (a `sentence_transformers.models.Normalize` module), the
longest input (`sentence_bert_config.json`'s `max_seq_length`, longer inputs truncated as
sentence-transformers does), and for a cross-encoder the activation on its logit (`config.json`'s
`sentence_transformers.activation_fn`; sigmoid for one label otherwise, as sentence-transformers'
CrossEncoder does). A plain HF folder with no modules.json is
mean-pooled without normalisation, as sentence-transformers loads one."""

import json
from dataclasses import dataclass
from pathlib import Path

from engine.models.bert import EncoderConfig
from engine.pooling import PoolingType

# sentence-transformers' pooling names (the legacy `pooling_mode_*_token(s)` flags or `pooling_mode`).
_POOLING = {"cls": "cls", "mean": "mean", "lasttoken": "last", "max": "max", "weightedmean": "weightedmean",
            "mean_sqrt_len_tokens": "mean_sqrt_len"}
_LEGACY = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "lasttoken",
           "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
           "pooling_mode_weightedmean_tokens": "weightedmean"}
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.modules.linear.Identity": "identity",
               "torch.nn.modules.activation.Tanh": "tanh"}


@dataclass(frozen=True)
class EncoderSpec:
    config: EncoderConfig
    pooling: PoolingType = "mean"
    normalize: bool = False
    max_seq_length: int = 512
    activation: str = "identity"  # cross-encoders: applied to the logit


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _pooling(folder: Path, modules: list[dict]) -> PoolingType:
    pool = next((m for m in modules if m.get("type", "").endswith(".Pooling")), None)
    if pool is None:
        return "mean"
    raw = _json(folder / pool.get("path", "") / "config.json")
    mode = raw.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in _LEGACY.items() if raw.get(key)]
        mode = modes[0] if len(modes) == 1 else (modes or ["mean"])
    if isinstance(mode, list):
        mode = mode[0] if len(mode) == 1 else "+".join(mode)
    if mode not in _POOLING:
        raise ValueError(f"{folder}: pooling {mode!r} is not supported (one of {', '.join(_POOLING)} is)")
    return _POOLING[mode]  # type: ignore[return-value]


def _activation(raw: dict, num_labels: int) -> str:
    path = (raw.get("sentence_transformers") or {}).get("activation_fn") or raw.get(
        "sbert_ce_default_activation_function")
    if path is None:
        return "sigmoid" if num_labels == 1 else "identity"
    if path not in ACTIVATIONS:
        raise ValueError(f"cross-encoder activation {path} is not supported ({sorted(ACTIVATIONS)} are)")
    return ACTIVATIONS[path]


def read_encoder_spec(folder: str | Path, tokenizer_max_length: int | None = None) -> EncoderSpec:
    folder = Path(folder)
    config = EncoderConfig.from_folder(folder)
    modules = _json(folder / "modules.json") or []
    known = ("Transformer", "Pooling", "Normalize")
    unknown = [m["type"] for m in modules if m.get("type", "").rsplit(".", 1)[-1] not in known]
    if unknown:
        raise ValueError(f"{folder}: sentence-transformers modules {unknown} are not supported")
    limit = config.max_positions
    if tokenizer_max_length and tokenizer_max_length < limit:
        limit = tokenizer_max_length
    max_len = _json(folder / "sentence_bert_config.json").get("max_seq_length") or limit
    return EncoderSpec(config=config, pooling=_pooling(folder, modules) if config.task == "embed" else "cls",
                       normalize=any(m.get("type", "").endswith(".Normalize") for m in modules),
                       max_seq_length=min(max_len, config.max_positions),
                       activation=_activation(_json(folder / "config.json"), config.num_labels)
                       if config.task == "score" else "identity")
