"""Ordered gold queries: row order counts up to rows that tie on the ORDER BY keys (gold_order.py)."""

from __future__ import annotations

import sqlite3

from integrations.text2sql.dataset import load_eval
from integrations.text2sql.execute import run_query
from integrations.text2sql.gold_order import gold_order, keyed_sql
from integrations.text2sql.sources import demo_source
from integrations.text2sql.training.evaluate import _Gold


def test_keyed_sql_points_at_output_columns_or_adds_the_key():
    sql, pos = keyed_sql("SELECT city, COUNT(*) AS n FROM t GROUP BY city ORDER BY n DESC, 1 LIMIT 3")
    assert pos == [1, 0] and "LIMIT" not in sql.upper()
    sql, pos = keyed_sql("SELECT name FROM t ORDER BY t.price * 2 DESC")
    assert pos == [1] and "sort_key_1" in sql
    assert keyed_sql("SELECT name FROM t") is None  # no order to keep
    assert keyed_sql("SELECT DISTINCT name FROM t ORDER BY price") is None  # an added column would change DISTINCT
    assert keyed_sql("SELECT * FROM t ORDER BY price") is None
    assert keyed_sql("SELECT name FROM t ORDER BY price LIMIT 2 OFFSET 1") is None


def _db() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (name TEXT, city TEXT, price REAL)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [("a", "x", 5), ("b", "y", 5), ("c", "z", 3), ("d", "x", 1)])
    return con


def _order(con, sql):
    return gold_order(sql, con.execute(sql).fetchall(), lambda q: con.execute(q).fetchall())


def test_ties_may_come_in_any_order_but_different_keys_may_not():
    con = _db()
    order = _order(con, "SELECT name, price FROM t ORDER BY price DESC")
    assert order.matches([("b", 5.0), ("a", 5.0), ("c", 3.0), ("d", 1.0)])  # a and b tie on 5
    assert order.matches([("a", 5.0), ("b", 5.0), ("c", 3.0), ("d", 1.0)])
    assert not order.matches([("a", 5.0), ("c", 3.0), ("b", 5.0), ("d", 1.0)])  # 3 before a 5
    assert not order.matches([("d", 1.0), ("c", 3.0), ("b", 5.0), ("a", 5.0)])  # the other way round
    assert not order.matches([("a", 5.0), ("b", 5.0), ("c", 3.0)])  # a row short
    assert not order.matches([("a", 5.0), ("a", 5.0), ("c", 3.0), ("d", 1.0)])  # a tie is not a licence to repeat


def test_a_tie_across_the_limit_lets_either_row_in():
    con = _db()
    order = _order(con, "SELECT name FROM t ORDER BY price DESC LIMIT 1")
    assert order.matches([("a",)]) and order.matches([("b",)])
    assert not order.matches([("c",)])
    grouped = _order(con, "SELECT city, COUNT(*) AS n FROM t GROUP BY city ORDER BY n DESC, city LIMIT 2")
    assert grouped.matches([("x", 2), ("y", 1)])
    assert not grouped.matches([("x", 2), ("z", 1)])  # the second key (city) breaks that tie


def test_the_eval_counts_a_tied_group_by_answer_right():
    """shop-017 (orders per city in June 2024, most first): several cities tie, and a right answer that
    groups by ``city_id, name`` returns them in another order than the gold's ``GROUP BY name``."""
    item = next(i for i in load_eval() if i.id == "shop-017")
    source = demo_source("shop")
    pred = ("SELECT cities.name, COUNT(*) AS orders_count FROM orders JOIN customers ON orders.customer_id = "
            "customers.customer_id JOIN cities ON customers.city_id = cities.city_id WHERE orders.order_date "
            "BETWEEN '2024-06-01' AND '2024-06-30' GROUP BY cities.city_id, cities.name ORDER BY orders_count DESC")
    rows = run_query(source, pred).rows
    gold = _Gold()
    assert rows != gold.rows(item, source)  # the tie really comes the other way round
    assert gold.matches(item, source, rows)
    assert not gold.matches(item, source, rows[::-1])  # fewest first is a wrong answer
    unordered = next(i for i in load_eval() if i.id == "shop-001")  # no ORDER BY: multisets, as before
    assert gold.matches(unordered, source, gold.rows(unordered, source))
