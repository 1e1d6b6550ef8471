"""Signs that a query which runs still cannot mean what anyone asked: used to rank selection's candidates.

A small model's wrong answers run fine. Some of them carry a mark no question asks for:

* ``SUM``/``AVG``/``TOTAL`` over a key column (``SUM(loans.loan_id)`` for "the most loans",
  ``AVG(enrollments.student_id)`` for "the average score"): ids are labels, their sum is a number no
  one wants. Keys are the schema's primary and foreign key columns.
* ``SUM``/``AVG``/``TOTAL`` of a string length or position (``SUM(LENGTH(loans.loan_date))``): what
  the model writes for "the most loans" once the grammar rules out summing the ids; a date's length is
  always 10, so the "count" comes out ten times too big.
* A column compared with itself (``books.book_id = books.book_id``, ``due_date > due_date``,
  ``birth_date BETWEEN name AND name`` with both bounds the same column): always true, always
  false, or a slot the model filled with the only thing the grammar left it.

These are flags, not errors: the query still runs and is still shown. Execution-guided selection
(:mod:`.selection`) ranks a result set that some unflagged candidate produced above one only flagged
candidates produced, and answers with an unflagged member of the chosen group. The SQL grammar
(``GrammarOptions.plausible``) goes further where a CFG can: under it a key aggregate or a range bounded
by columns cannot be sampled, so those two flags meet only SQL from elsewhere (another grammar, a caller's).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from integrations.text2sql.schema import Schema

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _same_column(a: exp.Expression | None, b: exp.Expression | None) -> bool:
    if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)) or a.name != b.name:
        return False
    return a.table == b.table or not a.table or not b.table


def implausible(sql: str, schema: Schema, dialect: str = "sqlite") -> list[str]:
    """What marks ``sql`` as an answer to no question (empty when nothing does, or it does not parse)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return []
    keys = schema.key_columns()
    found = []
    for agg in tree.find_all(exp.Sum, exp.Avg, exp.Anonymous):
        if isinstance(agg, exp.Anonymous):  # SQLite's TOTAL, which sqlglot does not model
            if agg.name.upper() != "TOTAL" or len(agg.expressions) != 1:
                continue
            name, arg = "TOTAL", agg.expressions[0]
        else:
            name, arg = agg.key.upper(), agg.this
        if isinstance(arg, exp.Column) and arg.name in keys:
            found.append(f"{name} over the key column {arg.sql(dialect=dialect)}")
        elif arg is not None and arg.find(exp.Length, exp.StrPosition):
            found.append(f"{name} over a string length or position: {arg.sql(dialect=dialect)}")
    for node in tree.find_all(*_COMPARISONS):
        if _same_column(node.left, node.right):
            found.append(f"{node.sql(dialect=dialect)} compares a column with itself")
    for node in tree.find_all(exp.Between):
        low, high = node.args.get("low"), node.args.get("high")
        if _same_column(node.this, low) or _same_column(node.this, high) or _same_column(low, high):
            found.append(f"{node.sql(dialect=dialect)} bounds a range by one column")
    return found
