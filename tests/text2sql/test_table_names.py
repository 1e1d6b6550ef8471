"""The adapter's SQL style: table names instead of aliases, the same rows, and a grammar that types them."""

from __future__ import annotations

import sqlite3

from integrations.text2sql.adapter import STYLE_FILE, adapter_style
from integrations.text2sql.dataset import demo_database, load_eval
from integrations.text2sql.grammar import GrammarOptions, matches_grammar
from integrations.text2sql.sources import demo_source
from integrations.text2sql.training.table_names import drop_table_aliases


def test_eval_golds_without_aliases_return_the_same_rows_and_fit_the_alias_free_grammar():
    cons: dict[str, sqlite3.Connection] = {}
    grammars: dict[str, tuple[str, str]] = {}
    changed = kept = 0
    for item in load_eval():
        con = cons.setdefault(item.schema, sqlite3.connect(demo_database(item.schema)))
        if item.schema not in grammars:
            source = demo_source(item.schema)
            keyed = GrammarOptions(table_aliases=False, foreign_key_joins=True)
            grammars[item.schema] = (source.grammar(keyed), source.grammar())
        free, aliased = grammars[item.schema]
        named = drop_table_aliases(item.sql)
        assert con.execute(named).fetchall() == con.execute(item.sql).fetchall(), named
        if named != item.sql:
            changed += 1
            # Whatever the default grammar admits in the eval's style, this one admits in table names.
            assert matches_grammar(free, named + ";") or not matches_grammar(aliased, item.sql + ";"), named
        elif " JOIN " in item.sql and " AS " in item.sql.split(" FROM ")[1]:
            kept += 1  # a self-join or a correlated subquery: only aliases tell the two tables apart
    assert changed >= 60 and kept <= 6


def test_aliases_are_kept_where_they_are_needed_and_strings_are_untouched():
    self_join = "SELECT e.name FROM employees AS e JOIN employees AS m ON e.manager_id = m.emp_id WHERE m.name = 'x'"
    assert drop_table_aliases(self_join) == self_join
    sql = "SELECT o.id, 'o.x AS o' AS note FROM orders AS o JOIN items AS oi ON oi.order_id = o.id"
    assert drop_table_aliases(sql) == ("SELECT orders.id, 'o.x AS o' AS note FROM orders JOIN items "
                                       "ON items.order_id = orders.id")
    assert drop_table_aliases("not sql at all (") == "not sql at all ("


def test_alias_free_grammar_types_every_qualified_column():
    source = demo_source("shop")
    free, aliased = source.grammar(GrammarOptions(table_aliases=False)), source.grammar()
    good = ("SELECT SUM(order_items.quantity * order_items.unit_price) FROM orders JOIN order_items "
            "ON order_items.order_id = orders.order_id;")
    wrong_table = "SELECT SUM(orders.quantity) FROM orders JOIN order_items ON order_items.order_id = orders.order_id;"
    alias = "SELECT SUM(oi.quantity) FROM orders AS o JOIN order_items AS oi ON oi.order_id = o.order_id;"
    assert matches_grammar(free, good) and matches_grammar(aliased, good)
    assert not matches_grammar(free, wrong_table)
    assert not matches_grammar(free, alias) and matches_grammar(aliased, alias)
    keyed = source.grammar(GrammarOptions(table_aliases=False, foreign_key_joins=True))
    off_key = "SELECT COUNT(*) FROM orders JOIN products ON orders.order_id = products.product_id;"
    assert matches_grammar(keyed, good) and matches_grammar(free, off_key) and not matches_grammar(keyed, off_key)
    assert not matches_grammar(keyed, "SELECT COUNT(*) FROM orders, products;")
    filtered = ("SELECT COUNT(*) FROM cities LEFT JOIN customers ON customers.city_id = cities.city_id "
                "AND customers.tier = 'gold';")
    assert matches_grammar(keyed, filtered)
    elsewhere = "SELECT COUNT(*) FROM orders JOIN products ON order_items.order_id = orders.order_id;"
    assert not matches_grammar(keyed, elsewhere)  # the key must have the joined table at one end


def test_keyed_joins_bring_each_table_once_on_a_key_to_a_table_already_joined():
    keyed = demo_source("delivery").grammar(GrammarOptions(table_aliases=False, foreign_key_joins=True))
    chain = ("SELECT hubs.name, COUNT(*) FROM shipments JOIN drivers ON shipments.driver_id = drivers.driver_id "
             "JOIN hubs ON drivers.hub_id = hubs.hub_id GROUP BY hubs.hub_id, hubs.name;")
    assert matches_grammar(keyed, chain)
    # either key from the joined set may bring hubs in (a shipment's origin hub, or its driver's hub)
    origin = chain.replace("drivers.hub_id = hubs.hub_id", "shipments.origin_hub_id = hubs.hub_id")
    assert matches_grammar(keyed, origin)
    twice = chain.replace(" GROUP BY", " JOIN hubs ON shipments.origin_hub_id = hubs.hub_id GROUP BY")
    assert not matches_grammar(keyed, twice)  # hubs twice: "ambiguous column name" without aliases
    unjoined = "SELECT drivers.name FROM ratings JOIN drivers ON shipments.driver_id = drivers.driver_id;"
    assert not matches_grammar(keyed, unjoined)  # shipments is not in FROM: "no such column"
    self_key = demo_source("hr").grammar(GrammarOptions(table_aliases=False, foreign_key_joins=True))
    assert not matches_grammar(self_key, "SELECT COUNT(*) FROM employees JOIN employees ON "
                                         "employees.manager_id = employees.emp_id;")


def test_an_adapter_names_the_grammar_it_was_trained_for(tmp_path):
    assert adapter_style(None).grammar is None and adapter_style(tmp_path).grammar is None
    (tmp_path / STYLE_FILE).write_text('{"grammar": {"table_aliases": false}}')
    assert adapter_style(tmp_path).grammar == GrammarOptions(table_aliases=False)
    assert not adapter_style(tmp_path).value_hints
