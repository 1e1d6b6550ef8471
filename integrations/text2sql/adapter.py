"""Which LoRA adapter text-to-SQL asks the model through: the shipped one, another folder, or none.

The shipped adapter (``adapters/sql-ko-en-r16-v9``, trained by ``sllm text2sql train``) was trained on the
embedded default model, so ``default`` turns it on for that model only; any other model gets it only
when a path is named. It is served through the engine's LoRA machinery under :data:`LORA_NAME`:
requests without it, in the same batch, still see the base model unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integrations.text2sql.grammar import GrammarOptions

ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"
SHIPPED = ADAPTERS_DIR / "sql-ko-en-r16-v9"
LORA_NAME = "sllm-text2sql"  # the engine-side adapter name (not listed as a model of its own)
OFF = ("none", "off", "")


def resolve_adapter(value: str | None, model: str) -> Path | None:
    """``value``: ``default`` (the shipped adapter when ``model`` is the default model), ``none``, or a
    PEFT folder. Raises ``ValueError`` for a folder without an adapter."""
    if value is None or value.strip().lower() in OFF:
        return None
    if value == "default":
        return SHIPPED if model == "default" and (SHIPPED / "adapter_config.json").is_file() else None
    path = Path(value).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"text2sql adapter {value!r}: no adapter_config.json there (a PEFT folder, "
                         "'default' or 'none')")
    return path


STYLE_FILE = "text2sql.json"  # written by ``sllm text2sql train``: how the adapter must be asked


@dataclass(frozen=True)
class AdapterStyle:
    """How an adapter was trained to be asked: the grammar its SQL style needs (None: the default one)
    and whether its prompts carry the question's stored values (:mod:`.value_hints`)."""

    grammar: GrammarOptions | None = None
    value_hints: bool = False

    def generator_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~integrations.text2sql.generate.SQLGenerator`."""
        return {"grammar_options": self.grammar, "value_hints": self.value_hints}


def adapter_style(adapter: Path | None) -> AdapterStyle:
    """The style ``adapter`` was trained in (its ``text2sql.json``); the plain style without one.

    The shipped adapter writes columns as ``table.column`` without table aliases; the grammar then
    forbids aliases, so each qualified column is checked against its table."""
    if adapter is None or not (adapter / STYLE_FILE).is_file():
        return AdapterStyle()
    style = json.loads((adapter / STYLE_FILE).read_text())
    grammar = style.get("grammar")
    return AdapterStyle(GrammarOptions(**grammar) if grammar is not None else None,
                        bool(style.get("prompt", {}).get("value_hints", False)))
