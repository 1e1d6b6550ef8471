"""`sllm text2sql` commands that need no model: sources, sql, schema, and the error paths of ask."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engine.cli import app as sllm_app
from integrations.text2sql import cli
from integrations.text2sql.dataset import build_database, schema_ddl


@pytest.fixture()
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("SLLM_TEXT2SQL_SOURCES", str(tmp_path / "sources.json"))

    def no_model(*args, **kwargs):
        raise AssertionError("this command must not load a model")

    monkeypatch.setattr(cli, "_load_llm", no_model)
    return CliRunner()


def test_registered_on_the_sllm_command(runner):
    out = runner.invoke(sllm_app, ["text2sql", "--help"])
    assert out.exit_code == 0 and "ask" in out.output and "eval" in out.output


def test_sources_add_list_and_query(runner, tmp_path):
    db = build_database("shop", tmp_path / "shop.sqlite")
    out = runner.invoke(cli.app, ["sources", "add", "shop", f"sqlite:///{db}", "-d", "the shop"])
    assert out.exit_code == 0 and "5 tables" in out.output
    out = runner.invoke(cli.app, ["sources", "add", "shop", f"sqlite:///{db}"])
    assert out.exit_code == 2 and "duplicate_source" in out.output
    out = runner.invoke(cli.app, ["sources", "list"])
    assert "shop" in out.output and "the shop" in out.output

    out = runner.invoke(cli.app, ["sql", "--source", "shop", "--json", "SELECT COUNT(*) AS n FROM cities"])
    body = json.loads(out.stdout)
    assert out.exit_code == 0 and body["rows"] == [[20]] and body["columns"] == ["n"]
    out = runner.invoke(cli.app, ["sql", "--source", "shop", "DROP TABLE cities"])
    assert out.exit_code == 1 and "unsafe_sql" in out.output

    out = runner.invoke(cli.app, ["sources", "remove", "shop"])
    assert out.exit_code == 0
    out = runner.invoke(cli.app, ["ask", "--source", "shop", "how many cities?"])
    assert out.exit_code == 2 and "unknown_source" in out.output


def test_credentials_stay_out_of_the_listing(runner, tmp_path, monkeypatch):
    from integrations.text2sql.registry import JsonFileSourceStore
    from integrations.text2sql.sources import SourceSpec

    JsonFileSourceStore(tmp_path / "sources.json").save(SourceSpec("pg", "postgresql://bob:hunter2@db/app"))
    out = runner.invoke(cli.app, ["sources", "list"])
    assert "pg" in out.output and "hunter2" not in out.output and "***" in out.output


def test_schema_and_grammar(runner):
    out = runner.invoke(cli.app, ["schema", "--demo", "hr"])
    assert out.exit_code == 0 and out.stdout.strip() == schema_ddl("hr").strip()
    out = runner.invoke(cli.app, ["schema", "--demo", "hr", "--grammar"])
    assert out.exit_code == 0 and out.stdout.startswith("root ::= ")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["ask", "--url", "sqlite:////nonexistent/x.sqlite", "q"], "bad_source_url"),
        (["ask", "--url", "postgresql+nosuchdriver://u:hunter2@h/db", "q"], "bad_source_url"),
        (["sql", "--demo", "shop", "SELECT nope FROM cities"], "invalid_sql"),
    ],
)
def test_errors_are_clear(runner, args, code):
    out = runner.invoke(cli.app, args)
    assert out.exit_code in (1, 2) and code in out.output and "hunter2" not in out.output


def test_exactly_one_source_option(runner):
    out = runner.invoke(cli.app, ["sql", "SELECT 1"])
    assert out.exit_code != 0 and "exactly one" in out.output
