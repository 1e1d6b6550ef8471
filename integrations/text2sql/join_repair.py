"""Joins a generated query forgot: a column of a table its FROM clause never brought in.

A query names its columns before its FROM clause, so while the model writes ``SELECT drivers.vehicle_type``
the grammar cannot know whether ``drivers`` will be joined, and a small model often leaves it out
(``... FROM ratings JOIN shipments ON ...``): such a query cannot run. When every missing table is
reached from the joined ones by exactly one shortest foreign-key path, :func:`repair_joins` adds that
path's JOINs, each on its declared key, as a person fixing the query would. Where two paths are equally
short (a shipment's origin hub or its driver's hub), or a name is unknown, the query is left as it is:
a guess between two meanings would turn an error into a plausible wrong answer.
"""

from __future__ import annotations

from collections import deque

import sqlglot
from sqlglot import exp

from integrations.text2sql.schema import Schema
from integrations.text2sql.validate import sqlglot_dialect

Edge = tuple[str, str, str, str]  # (child table, its column, parent table, its column), one declared key


def repair_joins(sql: str, schema: Schema, dialect: str = "sqlite") -> str | None:
    """``sql`` with the JOINs it lacks added, or None when it lacks none or the fix is not certain."""
    read = sqlglot_dialect(dialect)
    try:
        tree = sqlglot.parse_one(sql, read=read)
    except sqlglot.errors.SqlglotError:
        return None
    source = tree.args.get("from_") or tree.args.get("from")  # sqlglot renamed the key in 2025
    if not isinstance(tree, exp.Select) or source is None:
        return None
    columns = {t.lower(): {c.lower() for c in cols} for t, cols in schema.columns_by_table().items()}
    joined = [source.this] + [j.this for j in tree.args.get("joins") or []]
    if not all(isinstance(t, exp.Table) and t.name.lower() in columns for t in joined):
        return None  # a derived table or an unknown name: not ours to guess
    present = {t.alias_or_name.lower(): t.name.lower() for t in joined}
    outputs = {a.alias.lower() for a in tree.expressions if isinstance(a, exp.Alias)}
    needed: set[str] = set()
    for col in tree.find_all(exp.Column):
        if col.find_ancestor(exp.Select) is not tree:
            continue  # a subquery's column is its own scope's
        name, table = col.name.lower(), col.table.lower()
        if table:
            if table in present:
                continue
            if table not in columns or name not in columns[table]:
                return None
            needed.add(table)
        elif not any(name in columns[t] for t in present.values()) and name not in outputs:
            owners = [t for t, cols in columns.items() if name in cols]
            if len(owners) != 1:
                return None
            needed.add(owners[0])
    if not needed:
        return None
    edges = _edges(schema)
    tables = set(present.values())
    for target in sorted(needed):
        path = _only_shortest_path(edges, tables, target)
        if path is None:
            return None
        for child, ccol, parent, pcol in path:
            new = parent if child in tables else child
            on = f"{_name(child, present)}.{ccol} = {_name(parent, present)}.{pcol}"
            tree = tree.join(exp.to_table(new), on=sqlglot.condition(on, dialect=read))
            tables.add(new)
    # An unqualified column now in two joined tables would be ambiguous: say whose it was.
    for col in tree.find_all(exp.Column):
        if col.find_ancestor(exp.Select) is tree and not col.table and col.name.lower() not in outputs:
            owners = [t for t in tables if col.name.lower() in columns[t]]
            if len(owners) > 1:
                first = next((t for t in present.values() if col.name.lower() in columns[t]), None)
                if first is None:
                    return None
                col.set("table", exp.to_identifier(_name(first, present)))
    return tree.sql(dialect=read)


def _name(table: str, present: dict[str, str]) -> str:
    """How the query calls ``table``: its alias when it has one."""
    return next((alias for alias, t in present.items() if t == table), table)


def _edges(schema: Schema) -> list[Edge]:
    """The schema's one-column keys between two different tables (a self-key needs aliases to join)."""
    return [(child.lower(), ccol, parent.lower(), pcol) for child, ccol, parent, pcol in schema.single_keys()
            if child.lower() != parent.lower()]


def _only_shortest_path(edges: list[Edge], start: set[str], target: str) -> list[Edge] | None:
    """The keys from any of ``start`` to ``target`` along the one shortest path; None when there is no
    path or more than one (counted over edges, so two keys between the same tables are two paths)."""
    if target in start:
        return []
    ways: dict[str, int] = dict.fromkeys(start, 1)
    depth: dict[str, int] = dict.fromkeys(start, 0)
    back: dict[str, Edge] = {}
    queue = deque(sorted(start))
    while queue:
        here = queue.popleft()
        for edge in edges:
            child, _, parent, _ = edge
            if here not in (child, parent):
                continue
            there = parent if here == child else child
            if there not in depth:
                depth[there], ways[there], back[there] = depth[here] + 1, ways[here], edge
                queue.append(there)
            elif depth[there] == depth[here] + 1:
                ways[there] += ways[here]
    if target not in depth or ways[target] != 1:
        return None
    path, node = [], target
    while node not in start:
        edge = back[node]
        path.append(edge)
        node = edge[0] if edge[2] == node else edge[2]
    return path[::-1]
