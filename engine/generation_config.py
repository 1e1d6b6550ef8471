"""A model card's sampling defaults (its generation_config.json), used for the fields a request leaves
out, as vLLM's `--generation-config` does: `auto` reads the model folder's file (a GGUF file carries none,
so nothing), `vllm` ignores it (the engine's own defaults), a path reads that folder's (or that file).

Like vLLM, only the sampling fields are taken, and only where they differ from transformers' own defaults
(vLLM reads `GenerationConfig.to_diff_dict()`): a file that spells out `top_k: 50` changes nothing, since
the model author did not choose it. `max_new_tokens` becomes `max_tokens`."""

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE = "generation_config.json"
# field -> transformers' GenerationConfig default (a value equal to it is not the author's choice)
_HF_DEFAULTS: dict[str, Any] = {
    "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "max_new_tokens": None,
}


def _file(setting: str, model_path: Path) -> Path | None:
    if setting == "vllm":
        return None
    if setting == "auto":
        return model_path / FILE if model_path.is_dir() else None  # a GGUF file has no generation config
    path = Path(setting).expanduser()
    if path.is_dir():
        path = path / FILE
    if not path.is_file():
        raise ValueError(f"--generation-config {setting!r}: no {FILE} there (use auto, vllm or a folder holding one)")
    return path


def generation_defaults(setting: str, model_path: Path) -> dict[str, Any]:
    """SamplingParams field -> the model card's value, for a request that leaves the field out."""
    path = _file(setting, Path(model_path))
    if path is None or not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    out = {k: raw[k] for k, default in _HF_DEFAULTS.items() if raw.get(k) is not None and raw[k] != default}
    if "max_new_tokens" in out:
        out["max_tokens"] = out.pop("max_new_tokens")
    if out:
        # vLLM warns too: a server's behaviour changed by a file in the model folder should be visible.
        log.warning("sampling defaults from %s: %s (--generation-config vllm ignores them)", path, out)
    return out
