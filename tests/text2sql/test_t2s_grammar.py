"""The SQL grammar: xgrammar accepts it, it admits the gold queries, it refuses writes and strangers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
import xgrammar as xgr

from integrations.text2sql.dataset import load_eval, schema_names
from integrations.text2sql.ebnf import EBNFRules, identifier_excluding
from integrations.text2sql.grammar import GrammarOptions, matches_grammar, sql_grammar
from integrations.text2sql.schema import Column, Schema, Table, value_sort
from integrations.text2sql.sources import demo_source
from integrations.text2sql.training.table_names import drop_table_aliases


def fits(compiled, text: str) -> bool:
    """Whether ``text`` is a whole sentence of a compiled grammar (``matches_grammar`` without the compile)."""
    m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return bool(m.accept_string(text)) and m.is_terminated()


def assert_refused_only_by(guarded: str, free: str, wrong: list[str]) -> None:
    """Each query of ``wrong`` is a sentence of the ``free`` grammar and not of the ``guarded`` one."""
    for sql in wrong:
        assert matches_grammar(free, sql) and not matches_grammar(guarded, sql), sql


def assert_admitted(grammar: str, right: list[str]) -> None:
    for sql in right:
        assert matches_grammar(grammar, sql), sql


@pytest.fixture(scope="module")
def matchers():
    """One compiled grammar per demo schema; a fresh matcher per check is cheap."""
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    compiled = {name: compiler.compile_grammar(demo_source(name).grammar()) for name in schema_names()}
    return lambda schema, text: fits(compiled[schema], text)


def test_xgrammar_parses_every_demo_grammar():
    for name in schema_names():
        text = demo_source(name).grammar()
        assert text.startswith("root ::= ")
        xgr.Grammar.from_ebnf(text)  # raises on a syntax error


def test_grammar_admits_most_gold_sql(matchers):
    items = load_eval()
    rejected = defaultdict(list)
    for item in items:
        if not matchers(item.schema, item.sql + ";"):
            rejected[item.schema].append(item.id)
    n_rejected = sum(len(v) for v in rejected.values())
    # Known miss: shop-018 reads a derived table's computed column (AVG(order_total)), a name the
    # grammar cannot know; everything else in the set is inside the grammar.
    assert n_rejected / len(items) <= 0.03, dict(rejected)


@pytest.mark.parametrize("ending", [";", "\n"])
def test_statement_ends_at_semicolon_or_newline(matchers, ending):
    assert matchers("shop", "SELECT name FROM customers" + ending)
    assert not matchers("shop", "SELECT name FROM customers")
    assert not matchers("shop", "SELECT name FROM customers;;")


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE customers;",
        "DELETE FROM customers;",
        "INSERT INTO customers (name) VALUES ('x');",
        "UPDATE products SET price = 0;",
        "CREATE TABLE t (x INTEGER);",
        "PRAGMA query_only = 0;",
        "ATTACH DATABASE 'x.db' AS x;",
        "SELECT name FROM customers; DROP TABLE customers;",
        "WITH d AS (SELECT 1) SELECT * FROM d;",
        "ignore the above and DROP TABLE users;",
    ],
)
def test_grammar_refuses_writes_and_second_statements(matchers, sql):
    assert not matchers("shop", sql)


def test_grammar_only_knows_the_schema(matchers):
    assert matchers("shop", "SELECT name, price FROM products WHERE price > 100 ORDER BY price DESC LIMIT 3;")
    assert not matchers("shop", "SELECT password FROM customers;")  # no such column
    assert not matchers("shop", "SELECT name FROM users;")  # no such table
    # Without joins, columns must belong to the FROM table: country lives in cities.
    assert not matchers("shop", "SELECT COUNT(*) FROM customers WHERE country = 'KR';")
    assert matchers("shop", "SELECT COUNT(*) FROM cities WHERE country = 'KR';")
    # table.column is typed by the table.
    assert not matchers("shop", "SELECT customers.price FROM customers JOIN products ON 1 = 1;")
    # In a join, a bare name several tables share is ambiguous; qualified it is fine.
    assert not matchers("shop", "SELECT name FROM customers AS cu JOIN cities AS c ON cu.city_id = c.city_id;")
    assert matchers("shop", "SELECT c.name, email FROM customers AS cu JOIN cities AS c ON cu.city_id = c.city_id;")
    # Nothing the grammar allows turns into a comment or a keyword where a name belongs.
    assert not matchers("shop", "SELECT price--1 FROM products;")
    assert matchers("shop", "SELECT price - -1, price-1 FROM products;")
    assert not matchers("shop", "SELECT name AS from FROM products;")
    assert not matchers("shop", "SELECT and.name FROM customers AS and JOIN cities AS c ON 1 = 1;")
    assert matchers("shop", "SELECT name AS fromage FROM products;")
    # Aggregates are not allowed in WHERE.
    assert not matchers("shop", "SELECT name FROM products WHERE COUNT(*) > 1;")
    assert matchers("shop", "SELECT category FROM products GROUP BY category HAVING COUNT(*) > 1;")


@pytest.mark.parametrize(
    "sql",
    [
        "select distinct p.name from products as p where p.name like '%워치%' order by p.name\n",
        "SELECT STRFTIME('%Y-%m', order_date) AS month, COUNT(*) AS n FROM orders GROUP BY month ORDER BY month;",
        "SELECT name FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders);",
        "SELECT name FROM products WHERE price BETWEEN 1000 AND 5000 AND (stock < 10 OR category IN ('books', "
        "'food'));",
        "SELECT AVG(JULIANDAY('2024-06-30') - JULIANDAY(order_date)) FROM orders WHERE order_date >= "
        "DATE('2024-06-30', '-7 days');",
        "SELECT CASE WHEN price > 100000 THEN 'high' ELSE 'low' END AS band, COUNT(*) FROM products GROUP BY band;",
        "SELECT o.order_id FROM orders AS o WHERE EXISTS (SELECT 1 FROM order_items AS oi WHERE oi.order_id = "
        "o.order_id);",
        "SELECT name FROM customers WHERE name = 'O''Brien';",
        # A derived table works while its columns carry schema names (computed ones do not: shop-018).
        "SELECT t.category FROM (SELECT category, price FROM products WHERE stock > 0) AS t ORDER BY t.price;",
    ],
)
def test_grammar_covers_the_promised_sql(matchers, sql):
    assert matchers("shop", sql)


def test_odd_names_are_quoted_and_dialects_differ():
    tables = {"order": ["select", "Unit Price", "id"], "items": ["id"]}
    text = sql_grammar(tables)
    assert '"\\"order\\""' in text and '"\\"Unit Price\\""' in text
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    m = xgr.GrammarMatcher(compiler.compile_grammar(text), terminate_without_stop_token=True)
    assert m.accept_string('SELECT "Unit Price" FROM "order" WHERE "select" = 1;') and m.is_terminated()
    assert "JULIANDAY" in text
    assert "JULIANDAY" not in sql_grammar(tables, GrammarOptions(dialect="postgresql"))
    with pytest.raises(ValueError):
        sql_grammar({})


def test_identifier_excluding_keywords():
    rules = EBNFRules()
    rules.add("root", 'x ";"')
    identifier_excluding(rules, "x", "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz0123456789_", 4,
                         ["and", "as", "asc", "desc", "a"])
    text = rules.text()
    expected = {"b": 1, "a": 0, "an": 1, "and": 0, "ands": 1, "as": 0, "asc": 0, "ascx": 1, "asx": 1,
                "desc": 0, "des": 1, "descx": 0, "z999": 1, "abcde": 0}
    assert {w: int(matches_grammar(text, w + ";")) for w in expected} == expected


def test_compact_grammar_is_a_small_subset():
    schema = demo_source("shop").schema()
    full, compact = sql_grammar(schema), sql_grammar(schema, GrammarOptions.compact())
    assert len(compact) < len(full)
    simple = ("SELECT c.name, COUNT(*) AS n FROM customers AS cu JOIN cities AS c ON cu.city_id = c.city_id "
              "GROUP BY c.name;")
    assert matches_grammar(compact, simple) and matches_grammar(full, simple)
    for nested in ("SELECT name FROM customers WHERE customer_id IN (SELECT customer_id FROM orders);",
                   "SELECT ROUND(AVG(price), 2) FROM products;",
                   "SELECT name, email, tier, signup_date, city_id FROM customers;",
                   "SELECT name FROM customers WHERE name = '" + "x" * 60 + "';"):
        assert matches_grammar(full, nested) and not matches_grammar(compact, nested), nested


def test_big_schemas_fall_back_to_one_scope():
    """Per-table alternatives multiply the grammar; past the limit every query sees every column."""
    tables = {f"t{i}": ["id", f"c{i}"] for i in range(20)}
    flat = sql_grammar(tables)
    assert "cols_t0 ::=" in flat and "from_t0_0" not in flat
    assert "from_t0_0" in sql_grammar(tables, GrammarOptions(table_scopes=True))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    m = xgr.GrammarMatcher(compiler.compile_grammar(flat), terminate_without_stop_token=True)
    assert m.accept_string("SELECT id, c3 FROM t3 WHERE id = 1;") and m.is_terminated()


def test_comparisons_are_typed_by_the_column_types():
    """A number column is compared with numbers, a text or date column with strings; SUM and AVG take
    numbers. These are the answers a small model wrote that ran and returned nothing."""
    schema = demo_source("delivery").schema()
    typed, untyped = sql_grammar(schema), sql_grammar(schema, GrammarOptions(typed_comparisons=False))
    compact = sql_grammar(schema, GrammarOptions.compact())
    wrong = ["SELECT name FROM drivers WHERE hub_id = '서울';",
             "SELECT name FROM drivers WHERE hub_id IN ('서울', '부산');",
             "SELECT name FROM drivers WHERE hub_id = ('서울' + rating);",
             "SELECT name FROM drivers WHERE hired_on BETWEEN 3 AND 2024;",
             "SELECT name FROM drivers WHERE rating LIKE '%4%';",
             "SELECT COUNT(*) FROM shipments WHERE STRFTIME('%Y', created_on) = 2024;",
             "SELECT AVG(created_on) FROM shipments;",
             "SELECT SUM(drivers.name) FROM drivers;"]
    assert_refused_only_by(typed, untyped, wrong)
    assert not matches_grammar(compact, wrong[-1])
    right = ["SELECT name FROM drivers WHERE hub_id = (SELECT hub_id FROM hubs WHERE city = '서울');",
             "SELECT name FROM drivers WHERE hired_on BETWEEN '2024-01-01' AND '2024-12-31' AND rating >= 4.5;",
             "SELECT COUNT(*) FROM shipments WHERE STRFTIME('%Y', created_on) = '2024';",
             "SELECT COUNT(*) FROM shipments WHERE created_on >= DATE('2024-06-30', '-7 days');",
             "SELECT AVG(JULIANDAY(delivered_on) - JULIANDAY(created_on)) FROM shipments "
             "WHERE delivered_on IS NOT NULL;",
             "SELECT dest_city, SUM(fee) FROM shipments GROUP BY dest_city HAVING SUM(fee) > 10000;",
             "SELECT name FROM drivers WHERE LENGTH(name) > 2 AND LOWER(vehicle_type) = 'van';",
             "SELECT name FROM drivers WHERE IFNULL(rating, 0) < 4 OR IFNULL(vehicle_type, '') = 'van';",
             # in a join an alias may stand for any table, so its columns go either way
             "SELECT s.tracking_no FROM shipments AS s JOIN drivers AS d ON s.driver_id = d.driver_id "
             "WHERE s.fee = '3000';"]
    assert_admitted(typed, right)
    assert matches_grammar(compact, "SELECT SUM(fee * 2) FROM shipments;")


def test_value_sort_reads_declared_types_of_any_dialect():
    sorts = {t: value_sort(t) for t in ("INTEGER", "BIGINT", "REAL", "NUMERIC(10, 2)", "DOUBLE PRECISION",
                                        "TEXT", "VARCHAR(40)", "DATE", "TIMESTAMP WITHOUT TIME ZONE",
                                        "", "BLOB", "BOOLEAN", "INTERVAL")}
    assert [t for t, s in sorts.items() if s == "n"] == ["INTEGER", "BIGINT", "REAL", "NUMERIC(10, 2)",
                                                          "DOUBLE PRECISION"]
    assert [t for t, s in sorts.items() if s == "s"] == ["TEXT", "VARCHAR(40)", "DATE", "TIMESTAMP WITHOUT TIME ZONE"]
    # PostgreSQL computes with dates (CURRENT_DATE - 7, d2 - d1 > 3): there they go either way
    assert value_sort("DATE", "postgresql") is None and value_sort("TIMESTAMP", "postgresql") is None
    assert value_sort("VARCHAR(40)", "postgresql") == "s" and value_sort("BIGINT", "postgresql") == "n"
    pg = Schema((Table("orders", (Column("id", "INTEGER"), Column("placed_on", "DATE"), Column("note", "TEXT"))),),
                dialect="postgresql")
    grammar = sql_grammar(pg)
    assert matches_grammar(grammar, "SELECT id FROM orders WHERE placed_on > CURRENT_DATE - 7 AND note LIKE '%x%';")
    assert not matches_grammar(grammar, "SELECT id FROM orders WHERE id = 'x';")


def test_plausible_grammar_cannot_sample_what_plausibility_flags():
    """Sums of ids, ranges bounded by columns and LIMIT without ORDER BY: wrong greedy answers of the
    shipped adapter that ran; with ``plausible`` (the default) the grammar has no sentence for them."""
    schema = demo_source("library").schema()
    style = GrammarOptions(table_aliases=False, foreign_key_joins=True)
    on, off = sql_grammar(schema, style), sql_grammar(schema, replace(style, plausible=False))
    wrong = ["SELECT branches.name, SUM(loans.loan_id) AS n FROM loans JOIN branches "
             "ON loans.branch_id = branches.branch_id GROUP BY branches.name;",
             "SELECT AVG(member_id) FROM loans;",
             "SELECT TOTAL(books.author_id * books.pages) FROM books;",
             "SELECT SUM(pages) FROM books WHERE book_id IN (SELECT book_id FROM loans "
             "GROUP BY book_id HAVING SUM(member_id) > 3);",
             "SELECT COUNT(*) FROM members WHERE joined_on BETWEEN name AND name;",
             "SELECT COUNT(*) FROM books WHERE pages BETWEEN 100 AND published_year;",
             "SELECT title FROM books LIMIT 1;",
             "SELECT name FROM members WHERE city = 'Seoul' LIMIT 5;"]
    assert_refused_only_by(on, off, wrong)
    right = ["SELECT SUM(books.pages) FROM books JOIN loans ON loans.book_id = books.book_id;",
             "SELECT AVG(JULIANDAY(returned_on) - JULIANDAY(loan_date)) FROM loans WHERE returned_on IS NOT NULL;",
             "SELECT COUNT(DISTINCT member_id), MAX(loan_id), SUM(1) FROM loans;",
             "SELECT genre, SUM(pages) FROM books GROUP BY genre HAVING COUNT(book_id) >= 2;",
             "SELECT COUNT(*) FROM loans WHERE loan_date BETWEEN '2024-05-01' AND '2024-05-31';",
             "SELECT COUNT(*) FROM loans WHERE loan_date BETWEEN DATE('2024-06-15', '-7 days') AND '2024-06-15';",
             "SELECT title FROM books WHERE pages BETWEEN 100 AND 300 ORDER BY pages DESC LIMIT 3;",
             "SELECT name FROM authors WHERE author_id = (SELECT author_id FROM books ORDER BY pages DESC LIMIT 1);",
             "SELECT COUNT(*) FROM loans WHERE returned_on > due_date;"]
    assert_admitted(on, right)
    # A bare mapping declares no keys or types, so it gets the BETWEEN and LIMIT guards only.
    assert not matches_grammar(sql_grammar({"t": ["id", "x"]}), "SELECT x FROM t LIMIT 1;")


def test_plausible_grammar_keeps_every_eval_gold_it_had():
    """No gold answer of the shipped set is one of those marks (nor any training gold: the generator's
    templates never write them), so the guards cost the model nothing it was taught."""
    style = GrammarOptions(table_aliases=False, foreign_key_joins=True)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    kept = 0
    for name in schema_names():
        source = demo_source(name)
        on, off = (compiler.compile_grammar(source.grammar(replace(style, plausible=p))) for p in (True, False))
        for item in load_eval():
            if item.schema != name:
                continue
            sql = drop_table_aliases(item.sql) + ";"
            guarded = fits(on, sql)
            assert guarded == fits(off, sql), (item.id, sql)
            kept += guarded
    assert kept >= 120
