"""Question templates over one table of a generated schema (filters, groups, top-k, dates), and the
context every template reads (:class:`Ctx`).

A template returns English phrasings, Korean phrasings and the gold SQL (in the eval's style), or
``None`` when the schema lacks what it needs. Values in questions are read back from the rows, so most
golds have an answer; ``train_data`` drops the ones that return nothing. Korean particles go through
:func:`~.korean_particles.attach`, never hard-coded after a noun.
"""

from __future__ import annotations

import calendar
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_schema import Layout

Made = tuple[list[str], list[str], str]  # (en phrasings, ko phrasings, gold SQL)


@dataclass
class Ctx:
    lay: Layout
    con: sqlite3.Connection
    rng: random.Random

    def one(self, sql: str):
        """A random value of the first column of ``sql``'s rows (None when there are none)."""
        rows = self.con.execute(sql).fetchall()
        return self.rng.choice(rows)[0] if rows else None

    def t(self, role: str) -> str:
        return self.lay.noun(role).table

    def a(self, role: str) -> str:
        return self.lay.alias[role]

    def key(self, role: str) -> str:
        return self.lay.noun(role).key

    def src(self, role: str) -> str:
        return f"{self.t(role)} AS {self.a(role)}"

    def join(self, new: str, child: str, parent: str, kind: str = "JOIN") -> str:
        """`` JOIN new AS x ON child.parent_key = parent.parent_key`` (``new`` is the child or the parent)."""
        key = self.key(parent)
        return f" {kind} {self.src(new)} ON {self.a(child)}.{key} = {self.a(parent)}.{key}"

    def en(self, logical: str) -> str:
        """How an English question names a column of this schema (by its logical role)."""
        return self.lay.column_words(logical)[0]

    def ko(self, logical: str) -> str:
        return self.lay.column_words(logical)[1]

    def has(self, role: str) -> bool:
        return role in self.lay.order

    def threshold(self) -> Threshold:
        return self.rng.choice(THRESHOLDS)

    def group_count(self, sql: str) -> int | None:
        """A count for a HAVING threshold: one of the group sizes ``sql`` returns below the largest, so
        ``> n`` keeps some group and ``>= n`` leaves some out; None when all groups are the same size."""
        sizes = sorted({n for (n,) in self.con.execute(sql)})
        return self.rng.choice(sizes[:-1]) if len(sizes) > 1 else None


Template = Callable[[Ctx], Made | None]
TEMPLATES: list[Template] = []


def template(fn: Template) -> Template:
    TEMPLATES.append(fn)
    return fn


def weighted_registry(templates: list[Template],
                      weights: list[float]) -> Callable[[float], Callable[[Template], Template]]:
    """``@template(weight)`` for a family drawn by weight: registers into ``templates`` and ``weights``."""

    def template(weight: float) -> Callable[[Template], Template]:
        def register(fn: Template) -> Template:
            templates.append(fn)
            weights.append(weight)
            return fn

        return register

    return template


@dataclass(frozen=True)
class Threshold:
    """A HAVING threshold: its operator and how questions say it ({n} is the number, counter included).

    Both kinds are drawn: when every group template said "at least", the adapter wrote ``>=`` for "more
    than" too."""

    op: str
    en: str  # "at least {n}"
    en_after: str  # "{n} or more"
    ko: str  # "{n} 이상인"
    ko_adverb: str  # "{n} 이상" ("5번 이상 한")

    def per_parent(self, parent, some: str, amount: str, counted_ko: str, noun_ko: str) -> tuple[list[str], list[str]]:
        """Parents whose rows of a child number over (or at least) the threshold: ``some``/``amount`` are the
        count in words ("3 orders", "3건"), ``counted_ko`` the counted rows as a Korean subject (with their
        filter), ``noun_ko`` the child's noun."""
        return ([f"Which {parent.en_pl} have {self.en.format(n=some)}? Show the name and the count.",
                 f"List the {parent.en_pl} with {self.en_after.format(n=some)}, and how many."],
                [f"{k(counted_ko, '이/가')} {self.ko.format(n=amount)} {parent.ko}의 이름과 {noun_ko} 수를 보여주세요.",
                 f"{counted_ko} 수가 {self.ko.format(n=amount)} {k(parent.ko, '을/를')} 알려 주세요."])


THRESHOLDS = (Threshold(">=", "at least {n}", "{n} or more", "{n} 이상인", "{n} 이상"),
              Threshold(">", "more than {n}", "over {n}", "{n} 초과인", "{n} 넘게"))


def month_range(day: str) -> tuple[str, str, int, int]:
    """('YYYY-MM-01', 'YYYY-MM-<last day>', year, month) of the month ``day`` falls in."""
    y, m = int(day[:4]), int(day[5:7])
    return f"{y}-{m:02d}-01", f"{y}-{m:02d}-{calendar.monthrange(y, m)[1]:02d}", y, m


@template
def people_per_tier(c: Ctx) -> Made:
    p, tier = c.lay.d.people, c.lay.col("tier")
    return ([f"How many {p.en_pl} are there in each {c.en('tier')}?", f"Count the {p.en_pl} per {c.en('tier')}.",
             f"Break down the number of {p.en_pl} by {c.en('tier')}."],
            [f"{c.ko('tier')}별 {p.ko} 수를 구해 주세요.",
             f"{c.ko('tier')}마다 {k(p.ko, '이/가')} 몇 명인지 알려 주세요.",
             f"{k(p.ko, '을/를')} {c.ko('tier')} 기준으로 세어 주세요."],
            f"SELECT {tier}, COUNT(*) AS {p.table}_count FROM {p.table} GROUP BY {tier}")


@template
def people_tier_in(c: Ctx) -> Made:
    p, tier = c.lay.d.people, c.lay.col("tier")
    a, b = c.rng.sample(c.lay.d.tier.values, 2)
    return ([f"List the {p.en_pl} whose {c.en('tier')} is '{a}' or '{b}'.",
             f"Which {p.en_pl} have {c.en('tier')} {a} or {b}?",
             f"Names of {p.en_pl} in the {a} and {b} {c.en('tier')}s, please."],
            [f"{k(c.ko('tier'), '이/가')} '{a}' 또는 '{b}'인 {p.ko}의 이름을 보여 주세요.",
             f"{k(a, '이나/나')} {b} {c.ko('tier')}인 {k(p.ko, '을/를')} 알려 주세요.",
             f"{c.ko('tier')} {a}, {b}에 해당하는 {p.ko} 이름 목록이 필요해요."],
            f"SELECT name FROM {p.table} WHERE {tier} IN ('{a}', '{b}')")


@template
def catalog_in_category(c: Ctx) -> Made:
    cat, col, price = c.lay.d.catalog, c.lay.d.category, c.lay.d.price
    v = c.rng.choice(col.values)
    return ([f"Show the name and {price.en} of every {cat.en} in the '{v}' {col.en}.",
             f"List the {v} {cat.en_pl}: name and {price.en}.",
             f"What {cat.en_pl} have {col.en} {v}? Give their names and {price.en}s."],
            [f"{k(col.ko, '이/가')} '{v}'인 {cat.ko}의 이름과 {k(price.ko, '을/를')} 보여 주세요.",
             f"'{v}' {col.ko}에 속하는 {cat.ko} 이름과 {price.ko} 목록을 알려 주세요.",
             f"{v} {cat.ko}에는 무엇이 있나요? 이름과 {price.ko}도 같이 알려 주세요."],
            f"SELECT name, {price.name} FROM {cat.table} WHERE {col.name} = '{v}'")


@template
def catalog_price_compare(c: Ctx) -> Made:
    cat, price = c.lay.d.catalog, c.lay.d.price
    x = c.one(f"SELECT {price.name} FROM {cat.table}")
    en_op, ko_op, op, order, en_ord, ko_ord = c.rng.choice([
        ("more than", "초과인", ">", "DESC", "most expensive first", "비싼 순으로"),
        ("at least", "이상인", ">=", "DESC", "highest first", "높은 순서로"),
        ("under", "미만인", "<", "ASC", "cheapest first", "싼 순으로")])
    unit_en, unit_ko, _ = c.lay.currency
    return ([f"Which {cat.en_pl} have a {price.en} of {en_op} {x}? Show name and {price.en}, {en_ord}.",
             f"Name and {price.en} of the {cat.en_pl} priced {en_op} {x} {unit_en}, {en_ord}."],
            [f"{price.ko} {x}{unit_ko} {ko_op} {cat.ko}의 이름과 {k(price.ko, '을/를')} {ko_ord} 보여 주세요.",
             f"{k(price.ko, '이/가')} {x}{unit_ko} {ko_op} {k(cat.ko, '을/를')} {ko_ord} 나열해 주세요. 이름과 "
             f"{price.ko}만요."],
            f"SELECT name, {price.name} FROM {cat.table} WHERE {price.name} {op} {x} ORDER BY {price.name} {order}")


@template
def catalog_two_filters(c: Ctx) -> Made:
    cat, col, size = c.lay.d.catalog, c.lay.d.category, c.lay.d.size
    v = c.rng.choice(col.values)
    x = c.one(f"SELECT {size.name} FROM {cat.table} WHERE {col.name} = '{v}'")
    if x is None:
        return None
    return ([f"Which {v} {cat.en_pl} have a {size.en} of {x} or less?",
             f"List the names of {cat.en_pl} with {col.en} '{v}' and {size.en} at most {x}."],
            [f"{k(col.ko, '이/가')} {v}이고 {k(size.ko, '이/가')} {x} 이하인 {cat.ko}의 이름은?",
             f"{v} {cat.ko} 중 {size.ko} {x} 이하인 것의 이름을 알려 주세요."],
            f"SELECT name FROM {cat.table} WHERE {col.name} = '{v}' AND {size.name} <= {x}")


@template
def catalog_per_category(c: Ctx) -> Made:
    cat, col, price = c.lay.d.catalog, c.lay.d.category, c.lay.d.price
    if c.rng.random() < 0.5:
        return ([f"How many {cat.en_pl} are there in each {col.en}?", f"Number of {cat.en_pl} per {col.en}."],
                [f"{col.ko}별 {cat.ko} 수를 알려 주세요.", f"{col.ko}마다 {k(cat.ko, '이/가')} 몇 개인지 세어 주세요."],
                f"SELECT {col.name}, COUNT(*) AS {cat.table}_count FROM {cat.table} GROUP BY {col.name}")
    return ([f"What is the average {price.en} per {col.en}?", f"Average {cat.en} {price.en} by {col.en}."],
            [f"{col.ko}별 평균 {k(price.ko, '은/는')} 얼마인가요?",
             f"{cat.ko}의 평균 {k(price.ko, '을/를')} {col.ko}별로 구해 주세요."],
            f"SELECT {col.name}, AVG({price.name}) AS avg_{price.name} FROM {cat.table} GROUP BY {col.name}")


@template
def catalog_top_k(c: Ctx) -> Made:
    cat, num = c.lay.d.catalog, c.rng.choice((c.lay.d.price, c.lay.d.size))
    n = c.rng.randint(2, 5)
    hi = c.rng.random() < 0.7
    en, ko = ("highest", "높은") if hi else ("lowest", "낮은")
    return ([f"Show the {n} {cat.en_pl} with the {en} {num.en}, with their {num.en}.",
             f"Top {n} {cat.en_pl} by {num.en} ({en} first): name and {num.en}.",
             f"Which {n} {cat.en_pl} have the {en} {num.en}?"],
            [f"{k(num.ko, '이/가')} 가장 {ko} {cat.ko} {n}개의 이름과 {k(num.ko, '을/를')} 보여 주세요.",
             f"{num.ko} {'상위' if hi else '하위'} {n}개 {cat.ko}의 이름과 {k(num.ko, '은/는')}?"],
            f"SELECT name, {num.name} FROM {cat.table} ORDER BY {num.name} {'DESC' if hi else 'ASC'} LIMIT {n}")


@template
def catalog_above_average(c: Ctx) -> Made:
    cat, price = c.lay.d.catalog, c.lay.d.price
    return ([f"Which {cat.en_pl} cost more than the average {price.en}? Show name and {price.en}.",
             f"List {cat.en_pl} priced above average, with their {price.en}."],
            [f"{k(price.ko, '이/가')} 평균보다 비싼 {cat.ko}의 이름과 {k(price.ko, '을/를')} 알려 주세요.",
             f"평균 {price.ko}보다 높은 {k(cat.ko, '을/를')} 이름과 {k(price.ko, '과/와')} 함께 보여 주세요."],
            f"SELECT name, {price.name} FROM {cat.table} WHERE {price.name} > (SELECT AVG({price.name}) FROM "
            f"{cat.table})")


@template
def place_codes(c: Ctx) -> Made:
    pl, code = c.lay.place, c.lay.code
    if c.rng.random() < 0.5:
        return ([f"Which distinct {code.en}s appear among the {pl.en_pl}?",
                 f"List each {code.en} of the {pl.en_pl} once."],
                [f"{pl.ko}에 있는 {k(code.ko, '을/를')} 중복 없이 보여 주세요.", f"{pl.ko} 테이블의 {code.ko} 종류는?"],
                f"SELECT DISTINCT {code.name} FROM {pl.table}")
    v = c.one(f"SELECT {code.name} FROM {pl.table}")
    return ([f"Which {pl.en_pl} have {code.en} '{v}'?", f"Names of the {pl.en_pl} whose {code.en} is {v}."],
            [f"{k(code.ko, '이/가')} {v}인 {pl.ko}의 이름은?",
             f"{code.ko} '{v}'에 해당하는 {pl.ko} 이름을 알려 주세요."],
            f"SELECT name FROM {pl.table} WHERE {code.name} = '{v}'")


@template
def header_status(c: Ctx) -> Made:
    h, st = c.lay.d.header, c.lay.col("status")
    if c.rng.random() < 0.5:
        v = c.rng.choice(c.lay.d.statuses)
        return ([f"How many {h.en_pl} have {c.en('status')} '{v}'?", f"Count the {v} {h.en_pl}.",
                 f"What is the number of {h.en_pl} whose {c.en('status')} is {v}?"],
                [f"{k(c.ko('status'), '이/가')} '{v}'인 {k(h.ko, '은/는')} 몇 건인가요?",
                 f"{v} 상태인 {h.ko} 수를 알려 주세요.",
                 f"{c.ko('status')} {v} {h.ko} 건수는?"],
                f"SELECT COUNT(*) FROM {h.table} WHERE {st} = '{v}'")
    return ([f"How many {h.en_pl} were not cancelled?", f"Count the {h.en_pl}, leaving out cancelled ones."],
            [f"취소되지 않은 {k(h.ko, '은/는')} 몇 건인가요?", f"취소된 것을 빼고 {h.ko} 건수를 세어 주세요."],
            f"SELECT COUNT(*) FROM {h.table} WHERE {st} <> 'cancelled'")


@template
def header_on_day(c: Ctx) -> Made:
    h, hd, st = c.lay.d.header, c.lay.col("h_date"), c.lay.col("status")
    day = c.one(f"SELECT {hd} FROM {h.table}")
    y, m, dd = day.split("-")
    if c.rng.random() < 0.5:
        return ([f"How many {h.en_pl} were made on {day}?", f"Count the {h.en_pl} dated {day}."],
                [f"{day}에 생긴 {k(h.ko, '은/는')} 몇 건인가요?",
                 f"{y}년 {int(m)}월 {int(dd)}일의 {h.ko} 건수를 알려 주세요."],
                f"SELECT COUNT(*) FROM {h.table} WHERE {hd} = '{day}'")
    return ([f"List the {h.key} and {c.en('status')} of the {h.en_pl} on {day}.",
             f"Show {h.key} and {c.en('status')} for {h.en_pl} dated {day}."],
            [f"{day}의 {h.ko} 번호와 {k(c.ko('status'), '을/를')} 보여 주세요.",
             f"{int(m)}월 {int(dd)}일({y}년) {h.ko}의 번호, {c.ko('status')} 목록은?"],
            f"SELECT {h.key}, {st} FROM {h.table} WHERE {hd} = '{day}'")


@template
def header_in_month(c: Ctx) -> Made:
    h, hd = c.lay.d.header, c.lay.col("h_date")
    first, last, y, m = month_range(c.one(f"SELECT {hd} FROM {h.table}"))
    month_en = calendar.month_name[m]
    return ([f"How many {h.en_pl} were there in {month_en} {y}?", f"Count the {h.en_pl} made during {y}-{m:02d}.",
             f"Number of {h.en_pl} in {month_en} of {y}?"],
            [f"{y}년 {m}월의 {k(h.ko, '은/는')} 몇 건인가요?", f"{y}년 {m}월 한 달 동안 {h.ko} 건수를 알려 주세요.",
             f"{y}-{m:02d} 기간의 {h.ko} 수는?"],
            f"SELECT COUNT(*) FROM {h.table} WHERE {hd} BETWEEN '{first}' AND '{last}'")


@template
def header_relative_day(c: Ctx) -> Made | None:
    h, hd, st = c.lay.d.header, c.lay.col("h_date"), c.lay.col("status")
    seen = c.one(f"SELECT {hd} FROM {h.table}")
    if c.rng.random() < 0.5:
        today = c.one(f"SELECT DATE('{seen}', '+1 day')")
        return ([f"Today is {today}. How many {h.en_pl} were made yesterday?",
                 f"As of {today}, count yesterday's {h.en_pl}."],
                [f"오늘이 {today}일 때 어제 {k(h.ko, '은/는')} 몇 건인가요?",
                 f"오늘 날짜가 {today}라면 어제의 {h.ko} 수는?"],
                f"SELECT COUNT(*) FROM {h.table} WHERE {hd} = DATE('{today}', '-1 day')")
    n = c.rng.choice((7, 30))
    today = c.one(f"SELECT DATE('{seen}', '+{c.rng.randint(0, 3)} day')")
    return ([f"As of {today}, how many non-cancelled {h.en_pl} were made in the last {n} days, today included?",
             f"Today is {today}. Count the {h.en_pl} of the past {n} days including today, except cancelled ones."],
            [f"오늘이 {today}일 때 오늘을 포함한 최근 {n}일 동안 취소되지 않은 {k(h.ko, '은/는')} 몇 건인가요?",
             f"{today} 기준으로 오늘까지 {n}일간의 {h.ko} 중 취소 건을 뺀 수를 알려 주세요."],
            f"SELECT COUNT(*) FROM {h.table} WHERE {hd} BETWEEN DATE('{today}', '-{n - 1} day') AND '{today}' "
            f"AND {st} <> 'cancelled'")


@template
def header_per_month(c: Ctx) -> Made:
    h, hd = c.lay.d.header, c.lay.col("h_date")
    y = c.rng.choice((2023, 2024))
    if c.rng.random() < 0.5:
        return ([f"How many {h.en_pl} were made in each month of {y}?", f"Monthly count of {h.en_pl} in {y}."],
                [f"{y}년 월별 {h.ko} 건수를 구해 주세요.", f"{y}년에 달마다 {k(h.ko, '이/가')} 몇 건이었나요?"],
                f"SELECT STRFTIME('%m', {hd}) AS month, COUNT(*) AS {h.table}_count FROM {h.table} "
                f"WHERE {hd} BETWEEN '{y}-01-01' AND '{y}-12-31' GROUP BY month ORDER BY month")
    return ([f"How many {h.en_pl} are there per year?", f"Count the {h.en_pl} for each year."],
            [f"연도별 {h.ko} 건수를 알려 주세요.", f"해마다 {k(h.ko, '이/가')} 몇 건인지 구해 주세요."],
            f"SELECT STRFTIME('%Y', {hd}) AS year, COUNT(*) AS {h.table}_count FROM {h.table} GROUP BY year ORDER BY "
            f"year")


@template
def people_by_year(c: Ctx) -> Made:
    p, pd = c.lay.d.people, c.lay.col("p_date")
    y = c.rng.choice((2023, 2024))
    if c.rng.random() < 0.5:
        return ([f"Which {p.en_pl} have a {c.en('p_date')} in {y}? Show name and {c.en('p_date')}.",
                 f"List {p.en_pl} who joined in {y}."],
                [f"{y}년에 가입한 {p.ko}의 이름과 {k(c.ko('p_date'), '을/를')} 보여 주세요.",
                 f"{k(c.ko('p_date'), '이/가')} {y}년인 {p.ko} 목록은?"],
                f"SELECT name, {pd} FROM {p.table} WHERE {pd} BETWEEN '{y}-01-01' AND '{y}-12-31'")
    return ([f"How many {p.en_pl} joined in each year?", f"Yearly number of new {p.en_pl} by {c.en('p_date')}."],
            [f"가입 연도별 {p.ko} 수를 구해 주세요.",
             f"{c.ko('p_date')} 기준으로 해마다 {k(p.ko, '이/가')} 몇 명 늘었나요?"],
            f"SELECT STRFTIME('%Y', {pd}) AS join_year, COUNT(*) AS {p.table}_count FROM {p.table} "
            f"GROUP BY join_year ORDER BY join_year")


@template
def rating_stats(c: Ctx) -> Made | None:
    if not c.has("rating"):
        return None
    r, stars = c.lay.d.rating, c.lay.col("stars")
    if c.rng.random() < 0.5:
        n = c.rng.randint(1, 5)
        return ([f"How many {r.en_pl} gave a {c.en('stars')} of {n}?",
                 f"Count the {r.en_pl} with {c.en('stars')} = {n}."],
                [f"{k(c.ko('stars'), '이/가')} {n}점인 {k(r.ko, '은/는')} 몇 개인가요?",
                 f"{n}점짜리 {r.ko} 개수를 알려 주세요."],
                f"SELECT COUNT(*) FROM {r.table} WHERE {stars} = {n}")
    return ([f"What is the average {c.en('stars')} of all {r.en_pl}?", f"Mean {c.en('stars')} across the {r.en_pl}?"],
            [f"{r.ko}의 평균 {k(c.ko('stars'), '은/는')} 얼마인가요?", f"전체 {r.ko} 평균 점수를 구해 주세요."],
            f"SELECT AVG({stars}) FROM {r.table}")


@template
def staff_hired(c: Ctx) -> Made | None:
    if not c.has("staff"):
        return None
    s, sd = c.lay.d.staff, c.lay.col("s_date")
    y = c.rng.choice((2023, 2024))
    return ([f"Which {s.en_pl} were hired in {y}? Give name and {c.en('s_date')}.",
             f"{s.en_pl.capitalize()} hired during {y}."],
            [f"{y}년에 입사한 {s.ko}의 이름과 {k(c.ko('s_date'), '을/를')} 알려 주세요.", f"{y}년 입사 {s.ko} 명단은?"],
            f"SELECT name, {sd} FROM {s.table} WHERE {sd} BETWEEN '{y}-01-01' AND '{y}-12-31'")
