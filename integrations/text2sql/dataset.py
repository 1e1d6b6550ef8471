"""Text-to-SQL demo data: small SQLite schemas plus a bilingual (ko/en) evaluation set.

The same data serves two consumers, so it lives in one place:

* ``sllm bench offline`` feeds the rendered prompts (:func:`load_prompts`) or the chat
  variant (:func:`chat_messages`) to the engine; realistic prompts with a DDL block give
  prompt lengths and prefix sharing (every question of a schema starts with the same
  instruction + DDL) that look like the real text-to-SQL workload.
* ``sllm text2sql eval`` runs the generated SQL against :func:`demo_database` and compares
  result sets with the gold SQL.

Schemas are plain ``.sql`` files (CREATE TABLE statements followed by INSERTs) so that they
can be read, diffed and loaded with nothing but the ``sqlite3`` standard library module.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
SCHEMAS_DIR = DATA_DIR / "schemas"
EVAL_PATH = DATA_DIR / "eval.jsonl"

# The seed chapter's text-to-SQL prompt, kept byte-exact: models fine-tuned on it expect
# exactly these section headers, and an empty ``{query}`` leaves the prompt ending in
# "### SQL:\n" so that a completion model continues with the query itself.
PROMPT_TEMPLATE = """당신은 SQL을 생성하는 SQL 봇입니다. DDL의 테이블을 활용한 Question을 해결할 수 있는 SQL 쿼리를 생성하세요.

### DDL:
{ddl}

### Question:
{question}

### SQL:
{query}"""  # noqa: E501 - byte-exact: the first line is the instruction models were tuned on

# First line of the template: the instruction reused as the system message of the chat variant.
INSTRUCTION = PROMPT_TEMPLATE.split("\n", 1)[0]

_LEADING_COMMENTS = re.compile(r"\A(?:\s*--[^\n]*\n)*\s*")


@dataclass(frozen=True)
class EvalItem:
    """One evaluation question with its gold SQL (a read-only SELECT over ``schema``)."""

    id: str
    schema: str
    lang: str  # "ko" or "en"
    question: str
    sql: str


def schema_names() -> list[str]:
    """Names of the shipped schemas (file stems under :data:`SCHEMAS_DIR`), sorted."""
    return sorted(p.stem for p in SCHEMAS_DIR.glob("*.sql"))


def _schema_path(name: str) -> Path:
    path = SCHEMAS_DIR / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"unknown text2sql schema {name!r}; available: {', '.join(schema_names())}")
    return path


def _statements(script: str) -> list[str]:
    """Split a SQL script into complete statements.

    ``sqlite3.complete_statement`` understands string literals and comments, so a ';'
    inside a value or a comment never splits a statement (a naive ``split(';')`` would).
    """
    statements: list[str] = []
    buf: list[str] = []
    for line in script.splitlines(keepends=True):
        buf.append(line)
        text = "".join(buf)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            buf = []
    rest = "".join(buf).strip()
    if rest and _LEADING_COMMENTS.sub("", rest):
        statements.append(rest)
    return statements


@cache
def schema_ddl(name: str) -> str:
    """The CREATE TABLE statements of schema ``name`` (no INSERTs), as prompt text.

    The seed rows are left out on purpose: they would blow up the prompt and the model only
    needs tables, columns and keys. Column comments are kept since they tell the model the
    value formats (ISO dates, currency, enum values).
    """
    script = _schema_path(name).read_text(encoding="utf-8")
    creates = []
    for stmt in _statements(script):
        body = _LEADING_COMMENTS.sub("", stmt)
        if body.upper().startswith("CREATE TABLE"):
            creates.append(body)
    return "\n\n".join(creates)


def build_database(name: str, path: str | os.PathLike[str]) -> Path:
    """Create the SQLite database of schema ``name`` at ``path`` and return the path.

    Idempotent: an existing file that is newer than the schema file is reused, otherwise it
    is (re)built. The database is written to a temporary file in the same folder and renamed
    into place, so concurrent builders or an interrupted build never leave a half-filled file.
    """
    source = _schema_path(name)
    target = Path(path)
    if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}-", suffix=".sqlite.tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        con = sqlite3.connect(tmp)
        try:
            con.executescript(source.read_text(encoding="utf-8"))
            con.commit()
        finally:
            con.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def cache_dir() -> Path:
    """Folder for the built demo databases: ``$SLLM_CACHE_DIR/text2sql`` or ``~/.cache/sllm/text2sql``."""
    root = os.environ.get("SLLM_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "sllm"
    return base / "text2sql"


def demo_database(name: str) -> Path:
    """Path of the demo SQLite database of schema ``name``, built into the cache on first use."""
    return build_database(name, cache_dir() / f"{name}.sqlite")


def load_eval(path: str | os.PathLike[str] | None = None) -> list[EvalItem]:
    """The evaluation set in file order (one JSON object per line; blank lines are skipped)."""
    items: list[EvalItem] = []
    with open(path or EVAL_PATH, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                items.append(
                    EvalItem(
                        id=row["id"],
                        schema=row["schema"],
                        lang=row["lang"],
                        question=row["question"],
                        sql=row["sql"],
                    )
                )
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path or EVAL_PATH}:{lineno}: bad eval item: {exc}") from exc
    return items


def render_prompt(ddl: str, question: str, query: str = "") -> str:
    """Fill :data:`PROMPT_TEMPLATE`; with ``query`` empty the prompt ends with "### SQL:\\n"."""
    return PROMPT_TEMPLATE.format(ddl=ddl, question=question, query=query)


def load_prompts(limit: int | None = None) -> list[str]:
    """Raw completion prompts for the eval set in file order (the offline benchmark's input).

    The file interleaves schemas and languages, so a small ``limit`` still gives a mix.
    """
    items = load_eval()
    if limit is not None:
        items = items[:limit]
    return [render_prompt(schema_ddl(item.schema), item.question) for item in items]


def chat_messages(item: EvalItem) -> list[dict[str, str]]:
    """The same question as chat messages, for the chat-template variant of the benchmark.

    Instruction and DDL go into the system message (shared by every question of a schema,
    so prefix caching can reuse it); the user message is the bare question.
    """
    system = f"{INSTRUCTION}\n\n### DDL:\n{schema_ddl(item.schema)}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": item.question},
    ]
