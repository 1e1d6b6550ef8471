"""Checks for the shipped text-to-SQL data: eval set shape, demo databases and gold SQL.

Every gold query must be a single read-only SELECT that returns rows on its demo database;
an empty or all-NULL answer would make execution-match evaluation meaningless.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from integrations.text2sql import dataset
from integrations.text2sql.dataset import (
    EvalItem,
    build_database,
    chat_messages,
    load_eval,
    load_prompts,
    render_prompt,
    schema_ddl,
    schema_names,
)

WRITE_NODES = (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Alter, exp.Command)


@pytest.fixture(scope="module")
def items() -> list[EvalItem]:
    return load_eval()


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("text2sql")
    return {name: build_database(name, root / f"{name}.sqlite") for name in schema_names()}


def test_eval_set_shape(items: list[EvalItem]) -> None:
    assert len(items) >= 100
    langs = Counter(item.lang for item in items)
    assert set(langs) == {"ko", "en"}
    assert langs["ko"] >= 40 and langs["en"] >= 40
    ids = [item.id for item in items]
    assert len(ids) == len(set(ids))
    schemas = schema_names()
    assert len(schemas) >= 4
    assert {item.schema for item in items} == set(schemas)
    for item in items:
        assert item.question.strip() and item.sql.strip(), item.id


def test_prompt_template_is_the_seed_text() -> None:
    assert unicodedata.is_normalized("NFC", dataset.PROMPT_TEMPLATE)
    assert dataset.PROMPT_TEMPLATE.startswith(
        "당신은 SQL을 생성하는 SQL 봇입니다. DDL의 테이블을 활용한 Question을 해결할 수 있는 SQL 쿼리를 생성하세요.\n\n"
    )
    assert dataset.PROMPT_TEMPLATE.endswith("\n\n### SQL:\n{query}")


@pytest.mark.parametrize("name", schema_names())
def test_schema_ddl_only_creates(name: str) -> None:
    ddl = schema_ddl(name)
    assert ddl.startswith("CREATE TABLE")
    assert "INSERT" not in ddl.upper()
    statements = sqlglot.parse(ddl, read="sqlite")
    assert statements and all(isinstance(s, exp.Create) for s in statements)


def test_build_database_is_idempotent(tmp_path: Path) -> None:
    path = build_database("shop", tmp_path / "sub" / "shop.sqlite")
    assert path.is_file()
    mtime = path.stat().st_mtime_ns
    assert build_database("shop", path) == path
    assert path.stat().st_mtime_ns == mtime
    path.unlink()
    assert build_database("shop", path).is_file()
    assert not list(path.parent.glob("*.tmp"))


def test_demo_database_uses_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLLM_CACHE_DIR", str(tmp_path))
    path = dataset.demo_database("hr")
    assert path == tmp_path / "text2sql" / "hr.sqlite"
    assert path.is_file()


def test_tables_are_seeded(databases: dict[str, Path]) -> None:
    for name, path in databases.items():
        con = sqlite3.connect(path)
        try:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            assert len(tables) >= 3, name
            for table in tables:
                (count,) = con.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
                assert 20 <= count <= 250, (name, table, count)
            assert con.execute("PRAGMA foreign_key_check").fetchall() == [], name
        finally:
            con.close()


def test_gold_sql_is_one_select_returning_rows(items: list[EvalItem], databases: dict[str, Path]) -> None:
    connections = {
        name: sqlite3.connect(f"file:{path}?mode=ro", uri=True) for name, path in databases.items()
    }
    failures: list[str] = []
    try:
        for item in items:
            statements = sqlglot.parse(item.sql, read="sqlite")
            if len(statements) != 1 or not isinstance(statements[0], exp.Select):
                failures.append(f"{item.id}: not a single SELECT")
                continue
            if statements[0].find(*WRITE_NODES) is not None:
                failures.append(f"{item.id}: not read-only")
                continue
            try:
                rows = connections[item.schema].execute(item.sql).fetchall()
            except sqlite3.Error as exc:
                failures.append(f"{item.id}: {exc}")
                continue
            if not rows or all(v is None for v in rows[0]):
                failures.append(f"{item.id}: empty result")
    finally:
        for con in connections.values():
            con.close()
    assert not failures, "\n".join(failures)


def test_render_prompt(items: list[EvalItem]) -> None:
    item = items[0]
    ddl = schema_ddl(item.schema)
    prompt = render_prompt(ddl, item.question)
    assert ddl in prompt and item.question in prompt
    assert prompt.endswith("### SQL:\n")
    assert render_prompt(ddl, item.question, item.sql).endswith("### SQL:\n" + item.sql)
    # braces in a question are data, not format fields
    assert "{x}" in render_prompt(ddl, "what is {x}?")


def test_load_prompts_and_chat_messages(items: list[EvalItem]) -> None:
    prompts = load_prompts()
    assert len(prompts) == len(items)
    assert load_prompts(limit=5) == prompts[:5]
    assert all(p.endswith("### SQL:\n") for p in prompts)
    assert items[3].question in prompts[3]
    messages = chat_messages(items[0])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert schema_ddl(items[0].schema) in messages[0]["content"]
    assert messages[0]["content"].startswith(dataset.INSTRUCTION)
    assert messages[1]["content"] == items[0].question
