"""Question templates over a history table: a staff member's pay periods, the current one open-ended.

Real workflow databases keep values that change as rows with a validity period (pay, prices, addresses),
and "current" then means the row whose end date is NULL, a condition no word of the question spells out.
These ask for current values (per person, aggregated, per place, above the average) and for people with
several periods, on the generated ``history`` table (:mod:`.train_schema`), which only some schemas have.
Same contract as :mod:`.train_templates`; golds name columns by table.
"""

from __future__ import annotations

from dataclasses import dataclass

from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_edge_templates import Edge, per_parent
from integrations.text2sql.training.train_schema import ColumnInfo, column_catalog
from integrations.text2sql.training.train_table_templates import AGGREGATES, count_of
from integrations.text2sql.training.train_templates import Ctx, Made, Template, weighted_registry

TEMPLATES: list[Template] = []
WEIGHTS: list[float] = []  # how often train_data draws each template, relative to the others of this family

template = weighted_registry(TEMPLATES, WEIGHTS)


@dataclass(frozen=True)
class History(Edge):
    """The periods (``child``) of a staff member (``parent``), joined on the staff key."""

    pay: ColumnInfo
    until: ColumnInfo  # NULL for the current period

    def current(self) -> str:
        return f"{self.child.table}.{self.until.name} IS NULL"


def history(c: Ctx) -> History | None:
    tables = {t.role: t for t in column_catalog(c.lay)}
    if "history" not in tables:
        return None
    h, s = tables["history"], tables["staff"]
    return History(h, s.of("key")[0].name, s, h.of("number")[0], [x for x in h.of("date") if x.nullable][0])


@template(2)
def current_per_person(c: Ctx) -> Made | None:
    """Each staff member's current pay, sometimes the top k."""
    hi = history(c)
    if hi is None:
        return None
    s, pay, ko_pay = hi.parent, hi.pay, hi.pay.ko
    sql = f"SELECT {s.table}.name, {hi.child.table}.{pay.name} {hi.join()} WHERE {hi.current()}"
    if c.rng.random() < 0.5:
        n = c.rng.randint(1, 5)
        some, amount = s.top(n)
        return ([f"Which {some} {'have' if n > 1 else 'has'} the highest current {pay.en}? Show the {pay.en}.",
                 f"Top {some} by current {pay.en}, with the amount."],
                [f"현재 {k(ko_pay, '이/가')} 가장 높은 {s.ko} {amount}의 이름과 {k(ko_pay, '을/를')} 보여주세요.",
                 f"현재 {ko_pay} 기준 상위 {amount} {s.ko}의 이름과 {ko_pay}"],
                f"{sql} ORDER BY {hi.child.table}.{pay.name} DESC LIMIT {n}")
    return ([f"List every {s.en} with their current {pay.en}.", f"What is each {s.en}'s current {pay.en}?"],
            [f"{s.ko}별 현재 {k(ko_pay, '을/를')} 보여주세요.",
             f"{s.ko}마다 지금 {k(ko_pay, '이/가')} 얼마인지 알려 주세요."],
            sql)


@template(1.5)
def current_of_one(c: Ctx) -> Made | None:
    hi = history(c)
    if hi is None:
        return None
    name = c.one(f"SELECT {hi.parent.table}.name {hi.join()} WHERE {hi.current()}")
    if name is None:
        return None
    s, pay = hi.parent, hi.pay
    return ([f"What is {name}'s current {pay.en}?", f"How much {pay.en} does the {s.en} {name} get now?"],
            [f"{name} {s.ko}의 현재 {k(pay.ko, '은/는')} 얼마인가요?",
             f"{name}의 지금 {k(pay.ko, '을/를')} 알려주세요."],
            f"SELECT {hi.child.table}.{pay.name} {hi.join()} WHERE {s.table}.name = '{name}' AND {hi.current()}")


@template(2)
def current_aggregate(c: Ctx) -> Made | None:
    """An aggregate of the current pay: overall, per one of the staff's own columns, or per their place."""
    hi = history(c)
    if hi is None:
        return None
    s, pay = hi.parent, hi.pay
    fn, en_a, ko_a, prefix = c.rng.choice(AGGREGATES)
    alias = f"{prefix}_{pay.name}"
    h = hi.child.table
    place = next((t for t in column_catalog(c.lay) if t.role == "place"), None)
    roll = c.rng.random()
    if roll < 0.35 and s.of("enum"):  # per one of the staff's own columns
        g = c.rng.choice(s.of("enum"))
        group, label, words = f"{s.table}.{g.name}", f"{s.table}.{g.name}", (g.en, g.ko)
        source = hi.join()
    elif roll < 0.7 and place is not None:  # per the place the staff work at
        key = place.of("key")[0].name
        group, label, words = f"{place.table}.{key}, {place.table}.name", f"{place.table}.name", (place.en, place.ko)
        source = f"{hi.join()} JOIN {place.table} ON {s.table}.{key} = {place.table}.{key}"
    else:
        return ([f"What is the {en_a} current {pay.en} of all {s.en_pl}?", f"{en_a.capitalize()} {pay.en} paid now."],
                [f"{s.ko}의 현재 {pay.ko} {k(ko_a, '은/는')} 얼마인가요?",
                 f"지금 {s.ko} {pay.ko} {k(ko_a, '을/를')} 구해주세요."],
                f"SELECT {fn}({pay.name}) FROM {h} WHERE {hi.until.name} IS NULL")
    desc = c.rng.random() < 0.4
    sql = (f"SELECT {label}, {fn}({h}.{pay.name}) AS {alias} {source} WHERE {hi.current()} GROUP BY {group}")
    tail, ko_tail = (", largest first", " 큰 순서로") if desc else ("", "")
    return ([f"What is the {en_a} current {pay.en} of the {s.en_pl} per {words[0]}{tail}?",
             f"{en_a.capitalize()} current {pay.en} of {s.en_pl} by {words[0]}{tail}."],
            [f"{words[1]}별 {s.ko}의 현재 {pay.ko} {k(ko_a, '을/를')}{ko_tail} 구해주세요.",
             f"{words[1]}마다 {s.ko} 현재 {pay.ko} {k(ko_a, '을/를')}{ko_tail} 알려 주세요."],
            f"{sql} ORDER BY {alias} DESC" if desc else sql)


@template(1)
def above_average_now(c: Ctx) -> Made | None:
    hi = history(c)
    if hi is None:
        return None
    s, pay, h = hi.parent, hi.pay, hi.child.table
    sql = (f"SELECT {s.table}.name, {h}.{pay.name} {hi.join()} WHERE {hi.current()} AND {h}.{pay.name} > "
           f"(SELECT AVG({pay.name}) FROM {h} WHERE {hi.until.name} IS NULL)")
    return ([f"Which {s.en_pl} earn more than the average current {pay.en}? Show the name and {pay.en}.",
             f"{s.en_pl.capitalize()} whose current {pay.en} is above the average, with the amount."],
            [f"현재 {k(pay.ko, '이/가')} 평균보다 높은 {s.ko}의 이름과 {k(pay.ko, '을/를')} 보여주세요.",
             f"지금 {pay.ko} 평균을 넘는 {s.ko} 목록을 {k(pay.ko, '과/와')} 함께 알려 주세요."],
            sql)


@template(1)
def several_periods(c: Ctx) -> Made | None:
    """Staff with more than one (or at least n) pay periods: a count per person under HAVING."""
    hi = history(c)
    if hi is None:
        return None
    s, h = hi.parent, hi.child
    n = c.group_count(f"SELECT COUNT(*) {hi.join()} GROUP BY {s.table}.{hi.key}")
    if n is None:
        return None
    th = c.threshold()
    return (*th.per_parent(s, *h.counted(n), h.ko, h.ko),
            f"{per_parent(hi, f'COUNT(*) AS {count_of(h)}')} HAVING COUNT(*) {th.op} {n}")
