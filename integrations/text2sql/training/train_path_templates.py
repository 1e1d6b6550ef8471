"""Schema-agnostic question templates over two foreign keys in a row: a child, the table its key names, and
the table that one's key names (a rating, its order, the order's customer).

The foreign-key family (:mod:`.train_edge_templates`) teaches one join found by reading the DDL; questions
whose two ends are not joined directly ("average score per course" when scores sit on enrollments, "the
teacher with the most students") need the table in between, which no word of the question names. These
pick a random path of two edges from :func:`~.train_schema.column_catalog`, name only its two ends by their
own words, and join through the middle on its declared keys. Same contract as :mod:`.train_templates`;
golds name columns by table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_edge_templates import Edge, child_filter, edges, named, per_parent
from integrations.text2sql.training.train_table_templates import AGGREGATES, and_en, and_ko, count_of
from integrations.text2sql.training.train_templates import Ctx, Made, Template, weighted_registry

TEMPLATES: list[Template] = []
WEIGHTS: list[float] = []  # how often train_data draws each template, relative to the others of this family

template = weighted_registry(TEMPLATES, WEIGHTS)


@dataclass(frozen=True)
class Path:
    """``near`` joins the child to the middle table; ``far`` the middle table to the far end (``top``)."""

    near: Edge
    far: Edge

    @property
    def child(self):
        return self.near.child

    @property
    def parent(self):  # the far end; with ``key``, a path reads like an edge (``per_parent``, ``named``)
        return self.far.parent

    @property
    def key(self) -> str:
        return self.far.key

    def join(self) -> str:
        mid, top = self.near.parent.table, self.parent.table
        return f"{self.near.join()} JOIN {top} ON {mid}.{self.key} = {top}.{self.key}"


def paths(c: Ctx) -> list[Path]:
    """Two-edge paths whose ends no other path joins: where two do (a booking's coach's town and its
    trainee's town), "per town" names neither, and a gold through one of them would teach a coin toss."""
    found = edges(c)
    every = [Path(a, b) for a in found for b in found
             if a.parent.table == b.child.table and b.parent.table != a.child.table]
    ends = Counter((p.child.table, p.parent.table) for p in every)
    return [p for p in every if ends[p.child.table, p.parent.table] == 1]


def pick_path(c: Ctx, need) -> Path | None:
    found = [p for p in paths(c) if need(p)]
    return c.rng.choice(found) if found else None


@template(2.5)
def count_per_top(c: Ctx) -> Made | None:
    """Children counted per far-end name: all, most first, or the top k; sometimes only some children."""
    p = pick_path(c, named)
    if p is None:
        return None
    ch, top = p.child, p.parent
    alias = count_of(ch)
    where, en_f, ko_f = child_filter(c, ch)
    sql = per_parent(p, f"COUNT(*) AS {alias}", where)
    chs, ch_ko = f"{ch.en_pl}{en_f}", f"{ko_f}{ch.ko}"
    roll = c.rng.random()
    if roll < 0.35:
        n = c.rng.randint(1, 5)
        some, amount = top.top(n)
        return ([f"Which {some} {'have' if n > 1 else 'has'} the most {chs}? Show the count.",
                 f"Top {some} by number of {chs}, with the count."],
                [f"{k(ch_ko, '이/가')} 가장 많은 {top.ko} {amount}의 이름과 {ch.ko} 수를 알려주세요.",
                 f"{ch_ko} 수 기준 상위 {amount} {k(top.ko, '을/를')} 보여 주세요."],
                f"{sql} ORDER BY {alias} DESC LIMIT {n}")
    desc = roll < 0.65
    tail, ko_tail = (", most first", " 많은 순서로") if desc else ("", "")
    return ([f"How many {chs} are there per {top.en}{tail}?", f"Number of {chs} for each {top.en}{tail}.",
             f"Count the {chs} of every {top.en}{tail}."],
            [f"{top.ko}별 {ch_ko} 수를{ko_tail} 구해주세요.",
             f"{top.ko}마다 {k(ch_ko, '이/가')} 몇 {ch.counter_ko}인지{ko_tail} 알려 주세요."],
            f"{sql} ORDER BY {alias} DESC" if desc else sql)


@template(2)
def aggregate_per_top(c: Ctx) -> Made | None:
    """A child's number aggregated per far-end name, sometimes the top k."""
    p = pick_path(c, lambda p: named(p) and p.child.of("number"))
    if p is None:
        return None
    ch, top = p.child, p.parent
    x = c.rng.choice(ch.of("number"))
    fn, en_a, ko_a, prefix = c.rng.choice(AGGREGATES)
    alias = f"{prefix}_{x.name}"
    where, en_f, ko_f = child_filter(c, ch, avoid=x.name)
    sql = per_parent(p, f"{fn}({ch.table}.{x.name}) AS {alias}", where)
    if c.rng.random() < 0.4:
        n = c.rng.randint(1, 3)
        some, amount = top.top(n)
        return ([f"Which {some} {'rank' if n > 1 else 'ranks'} first by {en_a} {x.en} of {ch.en_pl}{en_f}?",
                 f"Top {some} by {en_a} {x.en} of their {ch.en_pl}{en_f}."],
                [f"{ko_f}{ch.ko} {x.ko} {k(ko_a, '이/가')} 가장 큰 {top.ko} {amount}의 이름과 "
                 f"{k(ko_a, '을/를')} 알려주세요.",
                 f"{ko_f}{ch.ko}의 {x.ko} {ko_a} 기준 상위 {amount} {k(top.ko, '을/를')} 보여 주세요."],
                f"{sql} ORDER BY {alias} DESC LIMIT {n}")
    return ([f"What is the {en_a} {x.en} of {ch.en_pl}{en_f} for each {top.en}?",
             f"{en_a.capitalize()} {x.en} of {ch.en_pl}{en_f}, per {top.en}."],
            [f"{top.ko}별 {ko_f}{ch.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요.",
             f"{top.ko}마다 {ko_f}{ch.ko} {x.ko} {k(ko_a, '은/는')} 얼마인가요?"],
            sql)


@template(1.5)
def of_one_top(c: Ctx) -> Made | None:
    """The children of one far-end row, found by its name or another of its columns: counted or aggregated."""
    p = pick_path(c, lambda p: [x for x in p.parent.of("text", "enum") if x.name != "email"])
    if p is None:
        return None
    ch, top = p.child, p.parent
    col = c.rng.choice([x for x in top.of("text", "enum") if x.name != "email"])
    v = c.one(f"SELECT {top.table}.{col.name} {p.join()}")
    if v is None:
        return None
    where = f"WHERE {top.table}.{col.name} = '{v}'"
    who_en = f"{top.en} {v}" if col.name == "name" else f"{top.en_pl} whose {col.en} is '{v}'"
    who_ko = f"{v} {top.ko}" if col.name == "name" else f"{k(col.ko, '이/가')} '{v}'인 {top.ko}"
    nums = ch.of("number")
    if nums and c.rng.random() < 0.5:
        x = c.rng.choice(nums)
        fn, en_a, ko_a, _ = c.rng.choice(AGGREGATES)
        return ([f"What is the {en_a} {x.en} of the {ch.en_pl} of the {who_en}?",
                 f"{en_a.capitalize()} {x.en} over the {ch.en_pl} for the {who_en}."],
                [f"{who_ko}의 {ch.ko} {x.ko} {k(ko_a, '은/는')} 얼마인가요?",
                 f"{who_ko}에 해당하는 {ch.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요."],
                f"SELECT {fn}({ch.table}.{x.name}) {p.join()} {where}")
    return ([f"How many {ch.en_pl} does the {who_en} have?", f"Count the {ch.en_pl} for the {who_en}."],
            [f"{who_ko}의 {k(ch.ko, '은/는')} 몇 {ch.counter_ko}인가요?",
             f"{who_ko}에 해당하는 {ch.ko} 수를 알려주세요."],
            f"SELECT COUNT(*) {p.join()} {where}")


@template(1.5)
def listed_with_top(c: Ctx) -> Made | None:
    """Children's own columns listed with the far end's name, often under a filter on the child."""
    p = pick_path(c, named)
    if p is None:
        return None
    ch, top = p.child, p.parent
    own = [x for x in ch.columns if x.kind not in ("key", "fk")]
    if not own:
        return None
    cols = c.rng.sample(own, min(len(own), c.rng.choice((1, 2))))
    where, en_f, ko_f = child_filter(c, ch, share=0.7)
    distinct = c.rng.random() < 0.3
    if distinct:  # only the far end's names: each once
        return ([f"Which {top.en_pl} have {ch.en_pl}{en_f}? List each name once.",
                 f"Names of the {top.en_pl} with any {ch.en}{en_f}, without repeats."],
                [f"{ko_f}{k(ch.ko, '이/가')} 있는 {top.ko} 이름을 중복 없이 보여주세요.",
                 f"{ko_f}{ch.ko}에 해당하는 {top.ko} 이름을 한 번씩만 알려 주세요."],
                f"SELECT DISTINCT {top.table}.name {p.join()}{where}")
    select = ", ".join(f"{ch.table}.{x.name}" for x in cols) + f", {top.table}.name"
    return ([f"List the {and_en(cols)} of the {ch.en_pl}{en_f}, with the name of their {top.en}.",
             f"Show the {and_en(cols)} of each {ch.en}{en_f} and the {top.en} it belongs to."],
            [f"{ko_f}{ch.ko}의 {and_ko(cols, '과/와')} {top.ko} 이름을 보여주세요.",
             f"{ko_f}{ch.ko} 목록을 {top.ko} 이름과 함께 알려 주세요. {', '.join(x.ko for x in cols)}도요."],
            f"SELECT {select} {p.join()}{where}")
