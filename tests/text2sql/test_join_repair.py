"""Join repair: a generated query that names a table it never joined gets the one foreign-key path there,
on the shipped demo databases; where two paths are as short, or a name is unknown, it is left alone."""

import sqlite3

import pytest

from integrations.text2sql.ask import run_sql
from integrations.text2sql.generate import Generation
from integrations.text2sql.join_repair import repair_joins
from integrations.text2sql.sources import demo_source


def _rows(source, sql):
    con = sqlite3.connect(source.url.removeprefix("sqlite:///"))
    try:
        return sorted(con.execute(sql).fetchall(), key=repr)
    finally:
        con.close()


@pytest.mark.parametrize("schema, broken, gold", [
    # a qualified column of a table one key away (ratings -> shipments -> drivers)
    ("delivery",
     "SELECT drivers.vehicle_type, AVG(ratings.stars) AS avg_stars FROM ratings JOIN shipments "
     "ON ratings.shipment_id = shipments.shipment_id GROUP BY drivers.vehicle_type",
     "SELECT d.vehicle_type, AVG(r.stars) FROM ratings AS r JOIN shipments AS s ON r.shipment_id = s.shipment_id "
     "JOIN drivers AS d ON s.driver_id = d.driver_id GROUP BY d.vehicle_type"),
    # an unqualified column only one table has; a SELECT alias reused in ORDER BY is not a column
    ("library",
     "SELECT genre, COUNT(*) AS loan_count FROM loans WHERE loans.loan_date BETWEEN '2024-04-01' AND "
     "'2024-04-30' GROUP BY genre ORDER BY loan_count DESC",
     "SELECT b.genre, COUNT(*) FROM loans AS l JOIN books AS b ON l.book_id = b.book_id "
     "WHERE l.loan_date BETWEEN '2024-04-01' AND '2024-04-30' GROUP BY b.genre"),
    # two tables away, through a table the query never names (courses -> enrollments -> students)
    ("school",
     "SELECT students.name, COUNT(*) AS n FROM courses GROUP BY students.student_id, students.name "
     "HAVING COUNT(*) > 3",
     "SELECT s.name, COUNT(*) FROM enrollments AS e JOIN students AS s ON e.student_id = s.student_id "
     "GROUP BY s.student_id, s.name HAVING COUNT(*) > 3"),
])
def test_a_missing_table_gets_its_one_key_path_and_the_query_answers(schema, broken, gold):
    source = demo_source(schema)
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        _rows(source, broken)
    fixed = repair_joins(broken, source.schema(), source.dialect)
    assert fixed is not None and fixed.startswith(broken.split(" FROM ")[0])
    assert _rows(source, fixed) == _rows(source, gold)


def test_an_unqualified_column_the_new_table_also_has_is_qualified_with_its_first_owner():
    source = demo_source("shop")
    # customers -> orders -> order_items -> products; products has a `name` too
    fixed = repair_joins("SELECT name, products.price FROM customers WHERE customers.tier = 'gold'",
                         source.schema(), source.dialect)
    assert fixed is not None and fixed.startswith("SELECT customers.name, products.price FROM customers JOIN orders")
    assert "JOIN order_items ON order_items.order_id = orders.order_id" in fixed
    _rows(source, fixed)


@pytest.mark.parametrize("schema, sql", [
    # hubs: by the shipment's origin hub or by its driver's hub, one key each; no guess
    ("delivery", "SELECT hubs.name FROM shipments JOIN drivers ON shipments.driver_id = drivers.driver_id"),
    # nothing is missing
    ("shop", "SELECT customers.name FROM customers JOIN orders ON orders.customer_id = customers.customer_id"),
    # unknown names are not ours to invent
    ("shop", "SELECT warehouses.name FROM orders"),
    ("shop", "SELECT colour FROM orders"),
    # `name` is a column of several tables none of which is joined
    ("shop", "SELECT name FROM orders"),
    # a subquery's columns belong to its own scope
    ("shop", "SELECT orders.order_id FROM orders WHERE orders.customer_id IN "
             "(SELECT customers.customer_id FROM customers WHERE customers.tier = 'gold')"),
    ("shop", "SELECT x.n FROM (SELECT COUNT(*) AS n FROM orders) AS x"),
    ("shop", "not sql at all ("),
])
def test_no_repair_where_none_is_needed_or_certain(schema, sql):
    source = demo_source(schema)
    assert repair_joins(sql, source.schema(), source.dialect) is None


def test_run_sql_repairs_generated_sql_only_and_says_so():
    source = demo_source("delivery")
    broken = ("SELECT drivers.name FROM ratings JOIN shipments ON ratings.shipment_id = shipments.shipment_id "
              "WHERE ratings.stars <= 2")
    gen = Generation(broken, broken + ";", "prompt", True, 1.0)
    res = run_sql(source, broken, generation=gen)
    assert res.ok and res.repaired_from == broken and res.sql != broken and res.rows
    assert res.to_dict()["repaired_from"] == broken
    handed_in = run_sql(source, broken)  # SQL a caller wrote is run as written
    assert not handed_in.ok and handed_in.repaired_from is None and "no such column" in handed_in.error.message
