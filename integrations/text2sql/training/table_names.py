"""The SQL style the shipped adapter writes: columns qualified by their table's own name, no table aliases.

A 135M model that has to invent an alias (``orders AS o``) and remember which table it stands for
gets it wrong: most of its answers that did not run were ``no such column: o.quantity`` (an alias bound
to the wrong table, or declared twice). Written with table names instead (``orders.quantity``), every
qualified column is checked by the grammar, where ``orders.`` can only be followed by a column of
``orders``. :func:`drop_table_aliases` turns a gold query of the eval's aliased style into that style;
a query that needs an alias (a table twice, a derived table) keeps its own.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

_STRING = re.compile(r"('(?:[^']|'')*')")


def _aliases(sql: str) -> dict[str, str] | None:
    """alias -> table for every aliased table of ``sql``; None when dropping them would change meaning."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return None
    if any(isinstance(sub.this, exp.Select) for sub in tree.find_all(exp.Subquery) if sub.alias):
        return None  # FROM (SELECT ...) AS x: x is the only name that derived table has
    tables = list(tree.find_all(exp.Table))
    names = [t.name.lower() for t in tables]
    out: dict[str, str] = {}
    for t in tables:
        if not t.alias:
            continue
        if names.count(t.name.lower()) > 1 or t.alias in out:
            return None  # a self-join, or an alias that two scopes reuse: only aliases tell them apart
        out[t.alias] = t.name
    return out


def drop_table_aliases(sql: str) -> str:
    """``sql`` with ``table AS x`` written as ``table`` and ``x.col`` as ``table.col`` (strings untouched);
    ``sql`` itself when it needs its aliases or does not parse."""
    aliases = _aliases(sql)
    if not aliases:
        return sql
    names = "|".join(re.escape(a) for a in sorted(aliases, key=len, reverse=True))
    declared = re.compile(rf"\b({'|'.join(re.escape(t) for t in set(aliases.values()))})\s+AS\s+({names})\b",
                          re.IGNORECASE)
    used = re.compile(rf"(?<![\w.])({names})\.")
    parts = _STRING.split(sql)
    for i in range(0, len(parts), 2):  # even parts are outside string literals
        part = declared.sub(lambda m: m.group(1) if m.group(2) in aliases else m.group(0), parts[i])
        parts[i] = used.sub(lambda m: aliases[m.group(1)] + ".", part)
    return "".join(parts)
