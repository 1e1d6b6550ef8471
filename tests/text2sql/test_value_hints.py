"""Value hints: the stored values a question names, found in a real SQLite database and put after the DDL,
the same way for training prompts (test_train_data checks they are the same) and for the prompts
text-to-SQL asks the model with."""

from __future__ import annotations

import json
import sqlite3

import sqlalchemy as sa

from integrations.text2sql.adapter import STYLE_FILE, AdapterStyle, adapter_style
from integrations.text2sql.dataset import PROMPT_TEMPLATE
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.grammar import GrammarOptions
from integrations.text2sql.sources import Source, demo_source
from integrations.text2sql.value_hints import HEADER, Hint, ValueIndex, render_hints


def _index() -> ValueIndex:
    return ValueIndex({
        ("teachers", "subject"): ["Computer Science", "Science", "Art", "수학"],
        ("students", "city"): ["서울", "부산"],
        ("branches", "city"): ["서울"],
        ("orders", "placed_on"): ["2024-06-01"],
        ("codes", "code"): ["7", "x", "42.5"],
        ("shipments", "status"): ["in_transit", "delivered"],
    })


def test_values_match_at_word_edges_longest_first_grouped_by_column():
    idx = _index()
    assert idx.match("Which teachers teach Computer Science?") == [Hint("teachers", "subject", ("Computer Science",))]
    assert idx.match("List the department heads") == []  # "art" inside a word is no match
    assert idx.match("ART teachers") == [Hint("teachers", "subject", ("Art",))]  # case-insensitive
    # Korean particles follow a value without a space; one value held by two columns gives two lines
    assert idx.match("서울에 사는 학생과 수학 교사") == [Hint("students", "city", ("서울",)),
                                                        Hint("branches", "city", ("서울",)),
                                                        Hint("teachers", "subject", ("수학",))]
    assert idx.match("Science or Art teachers") == [Hint("teachers", "subject", ("Science", "Art"))]
    # dates, numbers and one-character values are literals the model copies from the question anyway
    assert idx.match("orders placed on 2024-06-01 with code 7 or x or 42.5") == []
    text = render_hints(idx.match("Science or Art teachers in 부산"))
    assert text == f"{HEADER}\n-- teachers.subject: 'Science', 'Art'\n-- students.city: '부산'"
    assert render_hints([Hint("t", "name", ("O'Brien",))]).endswith("-- t.name: 'O''Brien'")
    # a snake_case value is found as people write it, and hinted as it is stored
    assert idx.match("Which shipments are still in transit?") == [Hint("shipments", "status", ("in_transit",))]
    assert idx.match("status in_transit or delivered") == [Hint("shipments", "status", ("in_transit", "delivered"))]


def test_prompts_carry_the_hints_after_the_ddl_only_when_asked():
    source = demo_source("school")
    plain = SQLGenerator(complete=lambda p, g: "SELECT 1")
    hinted = SQLGenerator(complete=lambda p, g: "SELECT 1", value_hints=True)
    question = "List all teachers who teach Computer Science."
    prompt = hinted.prompt(source, question)
    ddl = source.ddl()
    assert prompt == PROMPT_TEMPLATE.format(
        ddl=f"{ddl}\n\n{HEADER}\n-- teachers.subject: 'Computer Science'", question=question, query="")
    assert plain.prompt(source, question) == PROMPT_TEMPLATE.format(ddl=ddl, question=question, query="")
    # a question that names no stored value gets the plain prompt
    assert hinted.prompt(source, "How many students are there?") == plain.prompt(source, "How many students are there?")
    assert len(source.values()) > 50 and source.values() is source.values()  # read once, then cached


def test_a_database_that_refuses_the_reads_gives_no_hints(tmp_path, monkeypatch):
    path = tmp_path / "db.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (name TEXT)")
    con.execute("INSERT INTO t VALUES ('Alpha')")
    con.commit()
    con.close()
    source = Source("s", f"sqlite:///{path}")
    assert source.values().match("alpha") == [Hint("t", "name", ("Alpha",))]

    def refuse(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("permission denied for table t"))

    monkeypatch.setattr(ValueIndex, "from_engine", refuse)
    source.refresh()
    assert source.values().match("alpha") == []
    assert "CREATE TABLE t" in SQLGenerator(complete=lambda p, g: "", value_hints=True).prompt(source, "alpha")


def test_an_adapter_says_how_it_is_asked(tmp_path):
    assert adapter_style(None) == AdapterStyle() and adapter_style(tmp_path) == AdapterStyle()
    (tmp_path / STYLE_FILE).write_text(json.dumps({"grammar": {"table_aliases": False},
                                                   "prompt": {"value_hints": True}}))
    style = adapter_style(tmp_path)
    assert style == AdapterStyle(GrammarOptions(table_aliases=False), value_hints=True)
    assert style.generator_kwargs() == {"grammar_options": GrammarOptions(table_aliases=False), "value_hints": True}
