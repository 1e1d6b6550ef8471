"""Whether a model was trained for shorter embeddings (Matryoshka representation learning), so that its
vector's first `dimensions` values, renormalised, are an embedding of their own; and which sizes.

Read as vLLM reads it: config.json's `is_matryoshka` (any size) or `matryoshka_dimensions` (the sizes
it was trained for; a list there implies `is_matryoshka`). A served model may override either key
(`hf_overrides`, vLLM's `--hf-overrides '{"is_matryoshka": true}'`), which wins over the file. When
neither names them, a few well-known Matryoshka checkpoints whose published config.json says nothing
are recognised by name (KNOWN); everything else is not Matryoshka, so `dimensions` below the full size
is refused rather than answered with a truncated vector the model was never trained to make useful."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OVERRIDE_KEYS = ("is_matryoshka", "matryoshka_dimensions")

# Folder or file names (lower case) of models trained with a Matryoshka loss whose config.json does not
# say so: their model cards offer shorter vectors (nomic-embed-text-v1.5: 768 down to 64; Qwen3-Embedding:
# any size from 32 up to its width). nomic-embed-text-v1 (no ".5") has the same architecture and is not.
KNOWN = ("nomic-embed-text-v1.5", "qwen3-embedding")


@dataclass(frozen=True)
class Matryoshka:
    enabled: bool = False
    sizes: tuple[int, ...] | None = None  # the sizes it was trained for; None: any size

    def refusal(self, dimensions: int, hidden: int) -> str | None:
        """Why `dimensions` cannot be served (None: it can). The full width always can: that is the
        vector the model makes."""
        if not 1 <= dimensions <= hidden:
            return f"dimensions must be between 1 and {hidden}"
        if dimensions == hidden:
            return None
        if not self.enabled:
            return f"was not trained for shorter vectors: dimensions must be {hidden} or left out"
        if self.sizes is not None and dimensions not in self.sizes:
            return f"was trained for dimensions {', '.join(map(str, self.sizes))} only"
        return None


def check_hf_overrides(overrides: dict[str, Any] | None) -> dict[str, Any] | None:
    """The overrides as given, or a ValueError naming what is wrong: sllm reads only the Matryoshka
    keys from them, and a key it would ignore is refused rather than silently dropped."""
    if overrides is None:
        return None
    if not isinstance(overrides, dict):
        raise ValueError(f"hf_overrides must be a JSON object, got {overrides!r}")
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise ValueError(f"hf_overrides: {', '.join(unknown)} not supported (sllm reads {', '.join(OVERRIDE_KEYS)})")
    if not isinstance(overrides.get("is_matryoshka", False), bool):
        raise ValueError("hf_overrides: is_matryoshka must be true or false")
    sizes = overrides.get("matryoshka_dimensions")
    if sizes is not None and (not isinstance(sizes, list) or not sizes or
                              any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in sizes)):
        raise ValueError("hf_overrides: matryoshka_dimensions must be a list of positive integers (or null)")
    return overrides


def matryoshka_of(config: dict[str, Any], name: str, overrides: dict[str, Any] | None = None) -> Matryoshka:
    """`config`: the model's config.json (empty for a GGUF file); `name`: its folder or file name."""
    merged = {**config, **(overrides or {})}
    if not any(key in merged for key in OVERRIDE_KEYS):
        return Matryoshka(enabled=any(k in name.lower() for k in KNOWN))
    sizes = merged.get("matryoshka_dimensions")
    if sizes:
        return Matryoshka(enabled=True, sizes=tuple(sorted({int(d) for d in sizes})))
    return Matryoshka(enabled=bool(merged.get("is_matryoshka")))


def read_matryoshka(path: str | Path, overrides: dict[str, Any] | None = None) -> Matryoshka:
    """A model folder's (or GGUF file's: it has no config.json, so its name and the overrides decide)."""
    path = Path(path)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    return matryoshka_of(config, path.name, check_hf_overrides(overrides))
