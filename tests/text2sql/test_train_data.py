"""The adapter's training data: every gold query runs on its own generated database and returns rows,
the prompts are exactly the evaluation's, and nothing of the shipped eval set (schema, table, question)
appears in it."""

import sqlite3

import pytest

from integrations.text2sql import train_data
from integrations.text2sql.dataset import load_eval
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.sources import Source
from integrations.text2sql.train_domains import DOMAINS


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train-dbs")
    # One schema per domain, so every domain's tables and templates are exercised.
    return train_data.generate(len(DOMAINS), per_schema=30, seed=7, db_dir=folder), folder


def test_every_gold_query_runs_on_its_database_and_returns_rows(generated):
    examples, folder = generated
    assert len(examples) > 10 * len(DOMAINS)
    for ex in examples:
        con = sqlite3.connect(f"file:{folder / ex.schema}.sqlite?mode=ro", uri=True)
        try:
            assert con.execute(ex.sql).fetchall(), ex.sql
        finally:
            con.close()


def test_both_languages_and_many_kinds_of_query(generated):
    examples, _ = generated
    assert {e.lang for e in examples} == {"ko", "en"}
    sql = " ".join(e.sql for e in examples)
    for kind in ("COUNT(*)", "GROUP BY", "HAVING", " JOIN ", "ORDER BY", "LIMIT", "BETWEEN", "NOT IN", "AVG("):
        assert kind in sql


def test_prompts_are_the_evaluation_prompts(generated):
    examples, folder = generated
    gen = SQLGenerator(complete=lambda prompt, guided: "")  # only its prompt() is used
    for ex in examples[:: max(1, len(examples) // 12)]:
        source = Source(ex.schema, f"sqlite:///{folder / ex.schema}.sqlite")
        assert ex.prompt() == gen.prompt(source, ex.question)
        source.close()


def test_disjoint_from_the_eval_set(generated):
    examples, _ = generated
    schemas, tables, questions = train_data.eval_names()
    assert {"shop", "hr", "school", "library", "delivery"} <= schemas and "customers" in tables
    train_data.check_disjoint(examples)  # raises on any overlap
    for d in DOMAINS:  # every domain, not only the ones sampled above
        assert not {d.place.table, d.item.table, d.event.table} & tables
    used = {train_data._norm(e.question) for e in examples}
    assert not used & questions


def test_check_disjoint_refuses_an_eval_question_or_table():
    ex = train_data.generate(1, per_schema=3, seed=1)[0]
    item = load_eval()[0]
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example(ex.schema, item.lang, f"  {item.question.upper()} ", ex.sql,
                                                      ex.ddl)])
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example(ex.schema, ex.lang, ex.question, ex.sql,
                                                      ex.ddl + "\n\nCREATE TABLE Customers (id INTEGER);")])
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example("shop", ex.lang, ex.question, ex.sql, ex.ddl)])
