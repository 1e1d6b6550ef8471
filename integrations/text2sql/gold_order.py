"""The row order a gold query fixes: rows that tie on its ORDER BY keys may come in any order.

A gold query with a top-level ORDER BY makes row order part of the answer, but only as far as its keys
go: ``ORDER BY order_count DESC`` says nothing about two cities with the same count, and SQLite returns
such ties in whatever order its plan gives. A prediction that groups by ``city_id, name`` instead of
``name`` gets the same rows with the ties the other way round, and is right. So the gold query is run
once more with its sort keys added as extra columns (and without its LIMIT, since a tie across the
cut lets either row in): a prediction matches when, run by run of equal keys, its rows are rows of
that run. Where the keys cannot be added safely (DISTINCT, a set operation, OFFSET, a star), the
comparison stays strict.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import sqlglot
from sqlglot import exp

from integrations.text2sql.validate import sqlglot_dialect

Row = tuple[Any, ...]


def normalise_row(row: Sequence[Any]) -> Row:
    """A row as results are compared, by the evaluation here and by selection's votes: floats rounded, so
    ``AVG`` computed in another order still compares equal; values that cannot be hashed (PostgreSQL's
    arrays and JSON come back as lists and dicts) as their JSON text, so result sets can be counted."""
    return tuple(_comparable(v) for v in row)


def _comparable(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    try:
        hash(value)
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
    return value


def keyed_sql(sql: str, dialect: str = "sqlite") -> tuple[str, list[int]] | None:
    """(SQL, key positions): the query with its ORDER BY keys as extra columns and no LIMIT.

    A key's position is that of the output column it names (by alias, name or number), else that of
    the column added for it. None when the query has no ORDER BY or the keys cannot be added safely."""
    glot = sqlglot_dialect(dialect)
    try:
        tree = sqlglot.parse_one(sql, read=glot)
    except sqlglot.errors.ParseError:
        return None
    order = tree.args.get("order")
    if not isinstance(tree, exp.Select) or order is None or tree.args.get("distinct") or tree.args.get("offset"):
        return None
    outputs = tree.expressions
    if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star) for e in outputs):
        return None
    names = [e.alias_or_name for e in outputs]
    keyed, positions = tree.copy(), []
    keyed.set("limit", None)
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.name) <= len(outputs):
            positions.append(int(key.name) - 1)
        elif isinstance(key, exp.Column) and not key.table and key.name in names:
            positions.append(names.index(key.name))
        else:
            positions.append(len(keyed.expressions))
            keyed.select(exp.alias_(key.copy(), f"sort_key_{len(positions)}"), copy=False)
    return keyed.sql(dialect=glot), positions


@dataclass
class GoldOrder:
    """Every gold row with its sort key (the limit lifted), and how many rows the gold query returns."""

    keyed: list[tuple[Row, Row]]  # (output row, sort key), in gold order, without the LIMIT
    n: int  # rows the gold query itself returns
    _tied: dict[Row, Counter] = field(init=False, repr=False)  # sort key -> the rows that have it

    def __post_init__(self) -> None:
        self._tied = {}
        for row, key in self.keyed:
            self._tied.setdefault(key, Counter())[row] += 1

    def matches(self, pred: Sequence[Sequence[Any]]) -> bool:
        rows = [normalise_row(r) for r in pred]
        if len(rows) != self.n:
            return False
        runs = groupby(range(self.n), key=lambda i: self.keyed[i][1])  # positions, run by run of equal keys
        # every predicted row of a run must be a row of that run's key
        return not any(Counter(rows[i] for i in run) - self._tied[key] for key, run in runs)


def gold_order(sql: str, gold_rows: Sequence[Sequence[Any]], run: Callable[[str], Sequence[Sequence[Any]]],
               dialect: str = "sqlite") -> GoldOrder | None:
    """The tie structure of an ordered gold query (``run`` executes SQL), or None to compare strictly."""
    plan = keyed_sql(sql, dialect)
    if plan is None or not gold_rows:
        return None
    text, positions = plan
    width = len(gold_rows[0])
    try:
        full = [normalise_row(r) for r in run(text)]
    except Exception:  # noqa: BLE001 - a key that will not run as a column: strict comparison still works
        return None
    keyed = [(r[:width], tuple(r[p] for p in positions)) for r in full]
    order = GoldOrder(keyed, len(gold_rows))
    return order if order.matches(gold_rows) else None  # the keyed run disagrees with the gold's: stay strict
