"""Which LoRA adapter text-to-SQL asks the model through: the shipped one, another folder, or none.

The shipped adapter (``adapters/sql-ko-en-r16-v3``, trained by ``sllm text2sql train``) was trained on the
embedded default model, so ``default`` turns it on for that model only; any other model gets it only
when a path is named. It is served through the engine's LoRA machinery under :data:`LORA_NAME`:
requests without it, in the same batch, still see the base model unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

from integrations.text2sql.grammar import GrammarOptions

ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"
SHIPPED = ADAPTERS_DIR / "sql-ko-en-r16-v3"
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


STYLE_FILE = "text2sql.json"  # written by ``sllm text2sql train``: the grammar the adapter's SQL style needs


def grammar_options(adapter: Path | None) -> GrammarOptions | None:
    """The grammar ``adapter`` was trained to write under (its ``text2sql.json``); None: the default grammar.

    The shipped adapter writes columns as ``table.column`` without table aliases; the grammar then
    forbids aliases, so each qualified column is checked against its table."""
    if adapter is None or not (adapter / STYLE_FILE).is_file():
        return None
    style = json.loads((adapter / STYLE_FILE).read_text())
    return GrammarOptions(**style.get("grammar", {}))
