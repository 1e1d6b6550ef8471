"""Nothing but one read-only SELECT reaches a database, and a runaway query is cut off.

Layers under test, each on its own: the sqlglot validator, the read-only SQLite connection (for SQL
that skips the validator), the time limit and the row cap; the database file's bytes are compared
before and after every attempt to write.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from integrations.text2sql.ask import run_sql
from integrations.text2sql.dataset import build_database
from integrations.text2sql.errors import InvalidSQL, QueryTimeout, UnsafeSQL
from integrations.text2sql.execute import explain, run_query, run_validated
from integrations.text2sql.sources import Source
from integrations.text2sql.validate import check_sql, validate_sql

WRITES = [
    "DROP TABLE customers",
    "DELETE FROM customers",
    "INSERT INTO cities (city_id, name, country) VALUES (999, 'x', 'y')",
    "UPDATE products SET price = 0",
    "REPLACE INTO cities VALUES (1, 'x', 'y')",
    "CREATE TABLE t (x INTEGER)",
    "CREATE TEMP TABLE t AS SELECT * FROM customers",
    "ALTER TABLE customers ADD COLUMN x INTEGER",
    "PRAGMA query_only = 0",
    "PRAGMA journal_mode = DELETE",
    "ATTACH DATABASE '/tmp/t2s-attack.db' AS x",
    "VACUUM",
    "REINDEX",
    "BEGIN IMMEDIATE",
    "SELECT 1; DROP TABLE customers",
    "SELECT name FROM customers; DELETE FROM customers",
    "WITH d AS (DELETE FROM customers RETURNING *) SELECT * FROM d",
    "WITH x AS (SELECT 1) INSERT INTO cities SELECT 999, 'x', 'y' FROM x",
    "SELECT * INTO backup FROM customers",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT writefile('/tmp/t2s-attack.txt', 'x')",
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def shop(tmp_path) -> tuple[Source, Path]:
    path = build_database("shop", tmp_path / "shop.sqlite")
    return Source("shop", f"sqlite:///{path}"), path


@pytest.mark.parametrize("sql", WRITES)
def test_validator_refuses_writes(sql):
    v = validate_sql(sql)
    assert not v.ok
    assert isinstance(v.error, UnsafeSQL | InvalidSQL)
    with pytest.raises((UnsafeSQL, InvalidSQL)):
        check_sql(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM customers",
        "select name from customers;",
        "SELECT 1 UNION ALL SELECT 2",
        "WITH c AS (SELECT city_id FROM cities) SELECT COUNT(*) FROM c",
        "/* note */ SELECT name FROM customers -- trailing",
    ],
)
def test_validator_accepts_reads(sql):
    v = check_sql(sql)
    assert v.ok and not v.sql.endswith(";")


def test_writes_handed_in_directly_change_nothing(shop):
    source, path = shop
    before = digest(path)
    for sql in WRITES:
        res = run_sql(source, sql)
        assert not res.ok and not res.executed, sql
        assert res.error.code in ("unsafe_sql", "invalid_sql")
        with pytest.raises((UnsafeSQL, InvalidSQL)):
            run_query(source, sql)
    assert digest(path) == before
    assert not Path("/tmp/t2s-attack.db").exists() and not Path("/tmp/t2s-attack.txt").exists()


@pytest.mark.parametrize("sql", [w for w in WRITES if ";" not in w])
def test_read_only_connection_refuses_what_skips_the_validator(shop, sql):
    """Defence in depth: even with the validator bypassed, the connection cannot write."""
    source, path = shop
    before = digest(path)
    with pytest.raises((UnsafeSQL, InvalidSQL)):
        run_validated(source, sql)
    assert digest(path) == before


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n",
        "SELECT COUNT(*) FROM order_items AS a, order_items AS b, order_items AS c, order_items AS d",
    ],
)
def test_slow_query_is_cut_off_at_the_time_limit(shop, sql):
    source, _ = shop
    start = time.monotonic()
    with pytest.raises(QueryTimeout):
        run_query(source, sql, timeout_s=0.3)
    assert time.monotonic() - start < 2.0
    res = run_sql(source, sql, timeout_s=0.3)
    assert res.error.code == "query_timeout" and not res.executed


def test_row_cap_and_plan(shop):
    source, _ = shop
    res = run_query(source, "SELECT * FROM order_items", max_rows=7)
    assert res.row_count == 7 and res.truncated
    assert res.columns[:2] == ["order_item_id", "order_id"]
    assert res.plan and "order_items" in res.plan[0]
    small = run_query(source, "SELECT name FROM cities WHERE city_id = 1", max_rows=7)
    assert small.row_count == 1 and not small.truncated


def test_explain_catches_what_the_schema_rejects(shop):
    source, _ = shop
    assert explain(source, "SELECT name FROM customers")
    with pytest.raises(InvalidSQL, match="no such column"):
        explain(source, "SELECT country FROM customers")
    res = run_sql(source, "SELECT name FROM nowhere", execute=False)
    assert res.validation.ok and not res.ok and res.error.code == "invalid_sql"
    res = run_sql(source, "SELECT name FROM customers LIMIT 2", execute=False)
    assert res.ok and not res.executed and res.result.plan and res.rows == []


def test_generic_sqlalchemy_runner(shop):
    """The path non-SQLite backends take (a rolled-back transaction, a timer that cancels the
    statement), exercised on SQLite so it runs here without a database server."""
    from integrations.text2sql import execute

    source, path = shop
    before = digest(path)
    res = execute._run_sqlalchemy(source, "SELECT name FROM cities ORDER BY city_id", 3, 5.0, False)
    assert res.columns == ["name"] and res.row_count == 3 and res.truncated and res.plan
    with pytest.raises(QueryTimeout):
        execute._run_sqlalchemy(source, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                                        "SELECT COUNT(*) FROM n", 3, 0.3, False)
    with pytest.raises(InvalidSQL):
        execute._run_sqlalchemy(source, "SELECT nope FROM cities", 3, 5.0, False)
    with pytest.raises(UnsafeSQL):
        execute._run_sqlalchemy(source, "DELETE FROM cities", 3, 5.0, False)
    assert digest(path) == before


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "mssql", "mariadb", "duckdb", "nosuchdialect"])
def test_validator_speaks_sqlalchemy_dialect_names(dialect):
    assert validate_sql("SELECT a FROM t WHERE b = 1", dialect).ok
    assert not validate_sql("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", dialect).ok
    assert not validate_sql("DROP TABLE t", dialect).ok
