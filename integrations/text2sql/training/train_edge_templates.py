"""Schema-agnostic question templates over one foreign key: any child table, the parent its key names.

The role join templates (:mod:`.train_join_templates`) ask about fixed pairs (people in a place, revenue
per place), so a model trained on them picks the tables a question usually means, not the ones its words
name: asked "how many employees work in the Sales department", it counted employees by name. These pick a
random edge of :func:`~.train_schema.column_catalog` (a child's ``fk`` column and the table whose key it
is) and a random column of the kind they need, and name both tables by their own words, so the join is
found by reading the DDL. The shapes are the ones one-join questions are made of: counts of children of
one parent, children listed with their parent's name, counts, aggregates and top-k per parent, and
per-group counts over a parent's column. Same contract as :mod:`.train_templates`; golds name columns by
table, as the adapter is asked to write them.
"""

from __future__ import annotations

from dataclasses import dataclass

from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_schema import TableInfo, column_catalog
from integrations.text2sql.training.train_table_templates import (
    AGGREGATES,
    and_en,
    and_ko,
    condition,
    count_of,
    filterable,
)
from integrations.text2sql.training.train_templates import Ctx, Made, Template, weighted_registry

TEMPLATES: list[Template] = []
CHILD_FILTERS = 0.4  # the share of per-parent questions that count or sum only some children ("delivered ones")
WEIGHTS: list[float] = []  # how often train_data draws each template, relative to the others of this family


template = weighted_registry(TEMPLATES, WEIGHTS)


@dataclass(frozen=True)
class Edge:
    """A child table, the key column it joins on, and the parent table that key belongs to."""

    child: TableInfo
    key: str
    parent: TableInfo

    def join(self) -> str:
        c, p = self.child.table, self.parent.table
        return f"FROM {c} JOIN {p} ON {c}.{self.key} = {p}.{self.key}"


def edges(c: Ctx) -> list[Edge]:
    tables = column_catalog(c.lay)
    by_key = {col.name: t for t in tables for col in t.of("key")}
    return [Edge(t, col.name, by_key[col.name]) for t in tables for col in t.of("fk") if col.name in by_key]


def pick_edge(c: Ctx, need) -> Edge | None:
    found = [e for e in edges(c) if need(e)]
    return c.rng.choice(found) if found else None


def child_filter(c: Ctx, ch: TableInfo, share: float = CHILD_FILTERS, avoid: str = "") -> tuple[str, str, str]:
    """Sometimes a condition on the child's own column: (`` WHERE child.col ...``, English words after the
    child's noun, Korean words before it), else three empty strings."""
    cols = [x for x in filterable(ch, lookup=False) if x.kind != "fk" and x.name != avoid]
    cond = condition(c, ch, c.rng.choice(cols)) if cols and c.rng.random() < share else None
    if cond is None:
        return "", "", ""
    return f" WHERE {ch.table}.{cond.sql}", " " + c.rng.choice(cond.en), c.rng.choice(cond.ko) + " "


def named(link: Edge) -> bool:
    """The parent (or a path's far end) has a name to list and group by."""
    return any(col.name == "name" for col in link.parent.columns)


def per_parent(link: Edge, value: str, where: str = "") -> str:
    """``SELECT parent.name, value`` grouped per parent, over an edge or a path (the same shape)."""
    pa = link.parent.table
    return f"SELECT {pa}.name, {value} {link.join()}{where} GROUP BY {pa}.{link.key}, {pa}.name"


@template(2)
def count_children_of(c: Ctx) -> Made | None:
    """How many children one parent has, the parent found by its name or another of its columns."""
    e = pick_edge(c, lambda e: [x for x in e.parent.of("text", "enum") if x.name != "email"])
    if e is None:
        return None
    col = c.rng.choice([x for x in e.parent.of("text", "enum") if x.name != "email"])
    ch, pa = e.child, e.parent
    v = c.one(f"SELECT {pa.table}.{col.name} {e.join()}")  # a parent that has children
    if v is None:
        return None
    sql = f"SELECT COUNT(*) {e.join()} WHERE {pa.table}.{col.name} = '{v}'"
    if col.name == "name":
        return ([f"How many {ch.en_pl} does the {pa.en} {v} have?", f"How many {ch.en_pl} belong to {v}?",
                 f"Count the {ch.en_pl} of {pa.en} '{v}'.", f"What is the number of {ch.en_pl} for {v}?"],
                [f"{v} {pa.ko}의 {k(ch.ko, '은/는')} 몇 {ch.counter_ko}인가요?",
                 f"{pa.ko} {v}에 속한 {ch.ko} 수를 알려주세요.", f"{v}의 {ch.ko} 수를 구해 주세요."],
                sql)
    return ([f"How many {ch.en_pl} have a {pa.en} whose {col.en} is '{v}'?",
             f"Count the {ch.en_pl} whose {pa.en} has {col.en} {v}."],
            [f"{pa.ko} {k(col.ko, '이/가')} '{v}'인 {k(ch.ko, '은/는')} 몇 {ch.counter_ko}인가요?",
             f"{pa.ko}의 {k(col.ko, '이/가')} {v}인 {ch.ko} 수를 알려주세요."],
            sql)


@template(2)
def children_with_parent(c: Ctx) -> Made | None:
    """Children listed with their parent's name, often under a filter on the child."""
    e = pick_edge(c, named)
    if e is None:
        return None
    ch, pa = e.child, e.parent
    own = [x for x in ch.columns if x.kind not in ("key", "fk")]
    if not own:
        return None
    cols = c.rng.sample(own, min(len(own), c.rng.choice((1, 1, 2))))
    select = ", ".join(f"{ch.table}.{x.name}" for x in cols) + f", {pa.table}.name"
    where, en_f, ko_f = child_filter(c, ch, share=0.6)
    return ([f"List the {and_en(cols)} of the {ch.en_pl}{en_f}, with the name of their {pa.en}.",
             f"Show each {ch.en}'s {and_en(cols)} and its {pa.en} name{(',' + en_f) if en_f else ''}.",
             f"Which {ch.en_pl}{en_f}? Give the {and_en(cols)} and the {pa.en}."],
            [f"{ko_f}{ch.ko}의 {and_ko(cols, '과/와')} {pa.ko} 이름을 보여주세요.",
             f"{ko_f}{ch.ko} 목록을 {pa.ko} 이름과 함께 알려 주세요. {', '.join(x.ko for x in cols)}도요."],
            f"SELECT {select} {e.join()}{where}")


@template(2.5)
def count_per_parent(c: Ctx) -> Made | None:
    """Children counted per parent name: all of them, most first, the top k, or over a threshold."""
    e = pick_edge(c, named)
    if e is None:
        return None
    ch, pa = e.child, e.parent
    alias = count_of(ch)
    where, en_f, ko_f = child_filter(c, ch)
    sql = per_parent(e, f"COUNT(*) AS {alias}", where)
    chs, ch_ko = f"{ch.en_pl}{en_f}", f"{ko_f}{ch.ko}"  # the children counted, with their filter
    roll = c.rng.random()
    if roll < 0.3:
        n = c.rng.randint(1, 5)
        some, amount = pa.top(n)
        return ([f"Which {some} {'have' if n > 1 else 'has'} the most {chs}? Show the count too.",
                 f"Top {some} by number of {chs}, with the count."],
                [f"{k(ch_ko, '이/가')} 가장 많은 {pa.ko} {amount}의 이름과 {ch.ko} 수를 알려주세요.",
                 f"{ch_ko} 수가 많은 상위 {amount} {k(pa.ko, '을/를')} 보여 주세요."],
                f"{sql} ORDER BY {alias} DESC LIMIT {n}")
    if roll < 0.5:
        n, th = c.group_count(f"SELECT COUNT(*) {e.join()}{where} GROUP BY {pa.table}.{e.key}"), c.threshold()
        if n is None:
            return None
        some, amount = ch.counted(n)
        return (*th.per_parent(pa, some + en_f, amount, ch_ko, ch.ko), f"{sql} HAVING COUNT(*) {th.op} {n}")
    desc = roll < 0.75
    tail, ko_tail = (", most first", " 많은 순서로") if desc else ("", "")
    return ([f"How many {chs} does each {pa.en} have{tail}?", f"Number of {chs} per {pa.en}{tail}.",
             f"Count the {chs} of every {pa.en}{tail}."],
            [f"{pa.ko}별 {ch_ko} 수를{ko_tail} 구해주세요.",
             f"{pa.ko}마다 {k(ch_ko, '이/가')} 몇 {ch.counter_ko}인지{ko_tail} 알려 주세요."],
            f"{sql} ORDER BY {alias} DESC" if desc else sql)


@template(1.5)
def aggregate_per_parent(c: Ctx) -> Made | None:
    """A child's number column aggregated per parent name, sometimes sorted and cut."""
    e = pick_edge(c, lambda e: named(e) and e.child.of("number"))
    if e is None:
        return None
    ch, pa = e.child, e.parent
    x = c.rng.choice(ch.of("number"))
    fn, en_a, ko_a, prefix = c.rng.choice(AGGREGATES)
    alias = f"{prefix}_{x.name}"
    where, en_f, ko_f = child_filter(c, ch, avoid=x.name)
    sql = per_parent(e, f"{fn}({ch.table}.{x.name}) AS {alias}", where)
    if c.rng.random() < 0.4:
        n = c.rng.randint(1, 3)
        some, amount = pa.top(n)
        return ([f"Which {some} {'rank' if n > 1 else 'ranks'} first by {en_a} {x.en} of their {ch.en_pl}{en_f}?",
                 f"Top {some} by {en_a} {x.en} of {ch.en_pl}{en_f}."],
                [f"{ko_f}{ch.ko} {x.ko} {k(ko_a, '이/가')} 가장 큰 {pa.ko} {amount}의 이름과 "
                 f"{k(ko_a, '을/를')} 알려주세요.",
                 f"{ko_f}{ch.ko}의 {x.ko} {ko_a} 기준 상위 {amount} {k(pa.ko, '을/를')} 보여 주세요."],
                f"{sql} ORDER BY {alias} DESC LIMIT {n}")
    return ([f"What is the {en_a} {x.en} of the {ch.en_pl}{en_f} for each {pa.en}?",
             f"{en_a.capitalize()} {x.en} of {ch.en_pl}{en_f}, per {pa.en}."],
            [f"{pa.ko}별 {ko_f}{ch.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요.",
             f"{pa.ko}마다 {ko_f}{ch.ko} {x.ko} {k(ko_a, '은/는')} 얼마인가요?"],
            sql)


@template(1)
def count_per_parent_column(c: Ctx) -> Made | None:
    """Children counted per value of a parent's column (per country of the author, per status of the order)."""
    e = pick_edge(c, lambda e: e.parent.of("enum"))
    if e is None:
        return None
    ch, pa = e.child, e.parent
    g = c.rng.choice(pa.of("enum"))
    alias = count_of(ch)
    where, en_f, ko_f = child_filter(c, ch)
    return ([f"How many {ch.en_pl}{en_f} are there per {pa.en} {g.en}?",
             f"Count the {ch.en_pl}{en_f} by the {g.en} of their {pa.en}."],
            [f"{pa.ko} {g.ko}별 {ko_f}{ch.ko} 수를 구해주세요.",
             f"{pa.ko}의 {g.ko}마다 {k(ko_f + ch.ko, '이/가')} 몇 {ch.counter_ko}인지 알려 주세요."],
            f"SELECT {pa.table}.{g.name}, COUNT(*) AS {alias} {e.join()}{where} GROUP BY {pa.table}.{g.name}")


@template(1)
def aggregate_of_parent(c: Ctx) -> Made | None:
    """A child's number aggregated over the children of one parent, found by its name or another column."""
    e = pick_edge(c, lambda e: e.child.of("number") and [x for x in e.parent.of("text", "enum") if not x.name
                                                         == "email"])
    if e is None:
        return None
    ch, pa = e.child, e.parent
    col = c.rng.choice([x for x in pa.of("text", "enum") if x.name != "email"])
    x = c.rng.choice(ch.of("number"))
    fn, en_a, ko_a, _ = c.rng.choice(AGGREGATES)
    v = c.one(f"SELECT {pa.table}.{col.name} {e.join()}")
    if v is None:
        return None
    sql = f"SELECT {fn}({ch.table}.{x.name}) {e.join()} WHERE {pa.table}.{col.name} = '{v}'"
    if col.name == "name":
        return ([f"What is the {en_a} {x.en} of the {ch.en_pl} of {pa.en} {v}?",
                 f"{en_a.capitalize()} {x.en} over {v}'s {ch.en_pl}."],
                [f"{v} {pa.ko}의 {ch.ko} {x.ko} {k(ko_a, '은/는')} 얼마인가요?",
                 f"{pa.ko} {v}에 속한 {ch.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요."],
                sql)
    return ([f"What is the {en_a} {x.en} of the {ch.en_pl} whose {pa.en} has {col.en} '{v}'?",
             f"{en_a.capitalize()} {ch.en} {x.en} where the {pa.en}'s {col.en} is {v}."],
            [f"{pa.ko} {k(col.ko, '이/가')} '{v}'인 {ch.ko}의 {x.ko} {k(ko_a, '은/는')} 얼마인가요?",
             f"{pa.ko}의 {k(col.ko, '이/가')} {v}인 {ch.ko} {x.ko} {k(ko_a, '을/를')} 알려주세요."],
            sql)
