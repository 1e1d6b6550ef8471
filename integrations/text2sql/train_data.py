"""Training data for the text-to-SQL adapter: generated SQLite schemas, questions and checked gold SQL.

Each schema is one domain of :mod:`.train_domains` (a place, an item and usually an event table) with
its column names, comments and rows varied by a seeded RNG. Questions come from bilingual templates
(counts, filters, aggregates per group, joins, top-k, dates, HAVING, subqueries), two or more
paraphrases each, and use values read back from the generated rows. Every gold query is executed on
its database and dropped unless it runs and returns rows. Prompts are made exactly as the evaluation
makes them: the seed template over ``Source.ddl()`` of the SQLite file.

Disjointness from the shipped evaluation set is enforced, not assumed: :func:`check_disjoint` raises
when a schema name, a table name or a question (case- and space-normalised) of the eval set appears.

Run ``python -m integrations.text2sql.train_data OUT.jsonl.gz --schemas N`` to write a file.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from integrations.text2sql.dataset import load_eval, render_prompt, schema_ddl, schema_names
from integrations.text2sql.train_domains import DOMAINS, Column, Domain

CITIES_KO = ("서울", "부산", "대구", "인천", "광주", "대전", "울산", "수원", "제주", "전주")
CITIES_EN = ("Seoul", "Busan", "Tokyo", "Osaka", "Berlin", "Paris", "London", "Chicago", "Toronto", "Sydney")
SIDES_EN = ("Central", "North", "South", "East", "West", "Harbor", "Hill")
SIDES_KO = ("중앙", "북부", "남부", "동부", "서부", "항구", "언덕")
SURNAMES = "김이박최정강조윤장임한오서신권황"
GIVEN = ("민준", "서연", "도윤", "지우", "하준", "서윤", "시우", "지민", "예은", "현우", "수아", "준서", "다은", "유진")
FIRST_EN = ("Alice", "Brian", "Chloe", "Daniel", "Emma", "Felix", "Grace", "Henry", "Iris", "Jack", "Lena", "Mason")
LAST_EN = ("Kim", "Lee", "Park", "Smith", "Brown", "Garcia", "Muller", "Tanaka", "Martin", "Wilson")


@dataclass(frozen=True)
class Example:
    schema: str
    lang: str
    question: str
    sql: str
    ddl: str

    def prompt(self) -> str:
        return render_prompt(self.ddl, self.question)


@dataclass
class Layout:
    """One generated schema: the domain plus this schema's naming choices."""

    name: str
    d: Domain
    city: str  # the place table's city column name
    has_event: bool
    korean_values: bool


# -- schema and rows ---------------------------------------------------------------------------------

def _comment(col: Column, kind: str) -> str:
    if kind == "cat":
        return " -- " + ", ".join(f"'{v}'" for v in col.values)
    if kind == "date":
        return " -- ISO date 'YYYY-MM-DD'"
    return f" -- {col.en} in {col.unit_en}" if col.unit_en else ""


def _ddl(lay: Layout) -> str:
    d = lay.d
    p, i, e = d.place, d.item, d.event
    parts = [
        f"CREATE TABLE {p.table} (\n  {p.key} INTEGER PRIMARY KEY,\n  name TEXT NOT NULL UNIQUE,\n"
        f"  {lay.city} TEXT NOT NULL,\n  {d.place_num.name} INTEGER NOT NULL{_comment(d.place_num, 'num')}\n);",
        f"CREATE TABLE {i.table} (\n  {i.key} INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
        f"  {p.key} INTEGER NOT NULL REFERENCES {p.table}({p.key}),\n"
        f"  {d.item_cat.name} TEXT NOT NULL,{_comment(d.item_cat, 'cat')}\n"
        f"  {d.item_num.name} INTEGER NOT NULL,{_comment(d.item_num, 'num')}\n"
        f"  {d.item_date.name} TEXT NOT NULL,{_comment(d.item_date, 'date')}\n"
        f"  {d.item_status.name} TEXT NOT NULL{_comment(d.item_status, 'cat')}\n);",
    ]
    if lay.has_event:
        parts.append(
            f"CREATE TABLE {e.table} (\n  {e.key} INTEGER PRIMARY KEY,\n"
            f"  {i.key} INTEGER NOT NULL REFERENCES {i.table}({i.key}),\n"
            f"  {d.event_date.name} TEXT NOT NULL,{_comment(d.event_date, 'date')}\n"
            f"  {d.event_num.name} INTEGER NOT NULL,{_comment(d.event_num, 'num')}\n"
            f"  {d.event_kind.name} TEXT NOT NULL{_comment(d.event_kind, 'cat')}\n);")
    return "\n\n".join(parts)


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2021, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _person(rng: random.Random, korean: bool) -> str:
    if korean:
        return rng.choice(SURNAMES) + rng.choice(GIVEN)
    return f"{rng.choice(FIRST_EN)} {rng.choice(LAST_EN)}"


def _fill(con: sqlite3.Connection, lay: Layout, rng: random.Random) -> None:
    d = lay.d
    cities = rng.sample(CITIES_KO if lay.korean_values else CITIES_EN, rng.randint(3, 5))
    sides = SIDES_KO if lay.korean_values else SIDES_EN
    noun = d.place.ko if lay.korean_values else d.place.en.title()
    n_place = rng.randint(4, 7)
    places = [(k + 1, f"{c} {s} {noun}", c, rng.randint(*d.place_num.values))
              for k, (c, s) in enumerate(zip((rng.choice(cities) for _ in range(n_place)),
                                             rng.sample(sides, n_place), strict=True))]
    con.executemany(f"INSERT INTO {d.place.table} VALUES (?, ?, ?, ?)", places)
    used: set[str] = set()
    items = []
    for k in range(rng.randint(12, 30)):
        name = _person(rng, lay.korean_values) if d.person_items else rng.choice(d.item_words)
        while name in used:
            if d.person_items:
                name = _person(rng, lay.korean_values)
            else:
                name = f"{name.split(' #')[0]} #{rng.randint(2, 99)}"
        used.add(name)
        # The last place often stays empty, so "which X has no Y" questions have an answer.
        items.append((k + 1, name, rng.randint(1, max(1, n_place - 1)), rng.choice(d.item_cat.values),
                      rng.randint(*d.item_num.values), _date(rng), rng.choice(d.item_status.values)))
    con.executemany(f"INSERT INTO {d.item.table} VALUES (?, ?, ?, ?, ?, ?, ?)", items)
    if lay.has_event:
        events = [(k + 1, rng.randint(1, len(items)), _date(rng), rng.randint(*d.event_num.values),
                   rng.choice(d.event_kind.values)) for k in range(rng.randint(25, 70))]
        con.executemany(f"INSERT INTO {d.event.table} VALUES (?, ?, ?, ?, ?)", events)
    con.commit()


# -- questions ---------------------------------------------------------------------------------------

@dataclass
class Ctx:
    lay: Layout
    con: sqlite3.Connection
    rng: random.Random

    def one(self, sql: str):
        rows = self.con.execute(sql).fetchall()
        return self.rng.choice(rows)[0] if rows else None


Template = Callable[[Ctx], tuple[list[str], list[str], str] | None]  # (en phrasings, ko phrasings, gold SQL)


def _alias(table: str, taken: set[str]) -> str:
    a = table[0]
    if a in taken:
        a = table[:2]
    taken.add(a)
    return a


def _templates() -> list[Template]:  # noqa: C901 - one flat list of small closures reads best here
    T: list[Template] = []

    def add(fn: Template) -> Template:
        T.append(fn)
        return fn

    @add
    def count_all(c: Ctx):
        i = c.lay.d.item
        return ([f"How many {i.en_pl} are there?", f"Count the {i.en_pl}.", f"What is the total number of {i.en_pl}?"],
                [f"{i.ko}은 모두 몇 명인가요?" if c.lay.d.person_items else f"{i.ko}는 모두 몇 개인가요?",
                 f"전체 {i.ko} 수를 알려주세요."], f"SELECT COUNT(*) FROM {i.table}")

    @add
    def count_cat(c: Ctx):
        d = c.lay.d
        v = c.rng.choice(d.item_cat.values)
        return ([f"How many {d.item.en_pl} have {d.item_cat.en} '{v}'?",
                 f"Count the {d.item.en_pl} whose {d.item_cat.en} is {v}."],
                [f"{d.item_cat.ko}이 {v}인 {d.item.ko}는 몇 개인가요?",
                 f"{d.item_cat.ko}가 '{v}'인 {d.item.ko} 수를 구해주세요."],
                f"SELECT COUNT(*) FROM {d.item.table} WHERE {d.item_cat.name} = '{v}'")

    @add
    def list_cat(c: Ctx):
        d = c.lay.d
        v = c.rng.choice(d.item_cat.values)
        return ([f"List the names of the {d.item.en_pl} with {d.item_cat.en} {v}.",
                 f"Which {d.item.en_pl} have {d.item_cat.en} '{v}'?"],
                [f"{d.item_cat.ko}이 {v}인 {d.item.ko}의 이름을 알려주세요.",
                 f"{v} {d.item_cat.ko}인 {d.item.ko} 이름을 보여주세요."],
                f"SELECT name FROM {d.item.table} WHERE {d.item_cat.name} = '{v}'")

    @add
    def list_status_two_cols(c: Ctx):
        d = c.lay.d
        v = c.rng.choice(d.item_status.values)
        n = d.item_num
        return ([f"Show the name and {n.en} of the {d.item.en_pl} whose {d.item_status.en} is {v}."],
                [f"{d.item_status.ko}가 {v}인 {d.item.ko}의 이름과 {n.ko}를 보여주세요."],
                f"SELECT name, {n.name} FROM {d.item.table} WHERE {d.item_status.name} = '{v}'")

    @add
    def num_greater(c: Ctx):
        d = c.lay.d
        x = c.one(f"SELECT {d.item_num.name} FROM {d.item.table}")
        op_en, op_ko, op = c.rng.choice([("more than", "초과인", ">"), ("at least", "이상인", ">="),
                                         ("less than", "미만인", "<")])
        order = "ASC" if op == "<" else "DESC"
        return ([f"Which {d.item.en_pl} have a {d.item_num.en} {op_en} {x}? Show name and {d.item_num.en}, "
                 f"{'smallest' if op == '<' else 'largest'} first."],
                [f"{d.item_num.ko}가 {x} {op_ko} {d.item.ko}의 이름과 {d.item_num.ko}를 "
                 f"{'작은' if op == '<' else '큰'} 순서로 보여주세요."],
                f"SELECT name, {d.item_num.name} FROM {d.item.table} WHERE {d.item_num.name} {op} {x} "
                f"ORDER BY {d.item_num.name} {order}")

    @add
    def place_in_city(c: Ctx):
        d, city = c.lay.d, c.lay.city
        v = c.one(f"SELECT {city} FROM {d.place.table}")
        return ([f"What are the names of the {d.place.en_pl} in {v}?", f"List the {d.place.en_pl} located in {v}."],
                [f"{v}에 있는 {d.place.ko}의 이름을 알려주세요.", f"{v}에 위치한 {d.place.ko}을 모두 보여주세요."],
                f"SELECT name FROM {d.place.table} WHERE {city} = '{v}'")

    @add
    def count_per_cat(c: Ctx):
        d = c.lay.d
        return ([f"How many {d.item.en_pl} are there per {d.item_cat.en}?",
                 f"Count the {d.item.en_pl} for each {d.item_cat.en}."],
                [f"{d.item_cat.ko}별 {d.item.ko} 수를 구해주세요.",
                 f"{d.item_cat.ko}마다 {d.item.ko}가 몇 개인지 알려주세요."],
                f"SELECT {d.item_cat.name}, COUNT(*) AS {d.item.table}_count FROM {d.item.table} GROUP BY "
                f"{d.item_cat.name}")

    @add
    def avg_per_status(c: Ctx):
        d = c.lay.d
        col = c.rng.choice([d.item_cat, d.item_status])
        return ([f"What is the average {d.item_num.en} of the {d.item.en_pl} per {col.en}?"],
                [f"{col.ko}별 {d.item.ko}의 평균 {d.item_num.ko}를 구해주세요."],
                f"SELECT {col.name}, AVG({d.item_num.name}) AS avg_{d.item_num.name} FROM {d.item.table} GROUP BY "
                f"{col.name}")

    @add
    def top_k(c: Ctx):
        d = c.lay.d
        k = c.rng.randint(1, 5)
        hi = c.rng.random() < 0.7
        en_adj, ko_adj = ("highest", "높은") if hi else ("lowest", "낮은")
        return ([f"Show the {k} {d.item.en_pl} with the {en_adj} {d.item_num.en}, with their {d.item_num.en}.",
                 f"Top {k} {d.item.en_pl} by {d.item_num.en} ({en_adj} first): name and {d.item_num.en}."],
                [f"{d.item_num.ko}가 가장 {ko_adj} {d.item.ko} {k}개의 이름과 {d.item_num.ko}를 보여주세요."],
                f"SELECT name, {d.item_num.name} FROM {d.item.table} ORDER BY {d.item_num.name} "
                f"{'DESC' if hi else 'ASC'} LIMIT {k}")

    @add
    def aggregate(c: Ctx):
        d = c.lay.d
        fn, en, ko = c.rng.choice([("MAX", "maximum", "최대"), ("MIN", "minimum", "최소"), ("AVG", "average", "평균"),
                                   ("SUM", "total", "합계")])
        return ([f"What is the {en} {d.item_num.en} of all {d.item.en_pl}?"],
                [f"전체 {d.item.ko}의 {d.item_num.ko} {ko}는 얼마인가요?"],
                f"SELECT {fn}({d.item_num.name}) FROM {d.item.table}")

    def join_ctx(c: Ctx):
        d = c.lay.d
        taken: set[str] = set()
        return d, _alias(d.item.table, taken), _alias(d.place.table, taken)

    @add
    def join_place_name(c: Ctx):
        d, a, b = join_ctx(c)
        v = c.one(f"SELECT p.name FROM {d.place.table} AS p JOIN {d.item.table} AS i ON i.{d.place.key} = "
                  f"p.{d.place.key}")
        return ([f"List the {d.item.en_pl} of the {d.place.en} '{v}'.", f"Which {d.item.en_pl} belong to {v}?"],
                [f"{v}에 속한 {d.item.ko}의 이름을 알려주세요."],
                f"SELECT {a}.name FROM {d.item.table} AS {a} JOIN {d.place.table} AS {b} ON {a}.{d.place.key} = "
                f"{b}.{d.place.key} "
                f"WHERE {b}.name = '{v}'")

    @add
    def join_city_count(c: Ctx):
        d, a, b = join_ctx(c)
        v = c.one(f"SELECT {c.lay.city} FROM {d.place.table}")
        return ([f"How many {d.item.en_pl} are at {d.place.en_pl} in {v}?"],
                [f"{v}에 있는 {d.place.ko}의 {d.item.ko}는 모두 몇 개인가요?"],
                f"SELECT COUNT(*) FROM {d.item.table} AS {a} JOIN {d.place.table} AS {b} ON {a}.{d.place.key} = "
                f"{b}.{d.place.key} "
                f"WHERE {b}.{c.lay.city} = '{v}'")

    @add
    def per_place(c: Ctx):
        d, a, b = join_ctx(c)
        return ([f"How many {d.item.en_pl} does each {d.place.en} have?",
                 f"Number of {d.item.en_pl} per {d.place.en}."],
                [f"{d.place.ko}별 {d.item.ko} 수를 구해주세요."],
                f"SELECT {b}.name, COUNT(*) AS {d.item.table}_count FROM {d.item.table} AS {a} JOIN {d.place.table} AS "
                f"{b} "
                f"ON {a}.{d.place.key} = {b}.{d.place.key} GROUP BY {b}.{d.place.key}, {b}.name")

    @add
    def having(c: Ctx):
        d, a, b = join_ctx(c)
        n = c.rng.randint(2, 6)
        return ([f"Which {d.place.en_pl} have at least {n} {d.item.en_pl}? Show the name and the count."],
                [f"{d.item.ko}가 {n}개 이상인 {d.place.ko}의 이름과 {d.item.ko} 수를 알려주세요."],
                f"SELECT {b}.name, COUNT(*) AS {d.item.table}_count FROM {d.item.table} AS {a} JOIN {d.place.table} AS "
                f"{b} "
                f"ON {a}.{d.place.key} = {b}.{d.place.key} GROUP BY {b}.{d.place.key}, {b}.name HAVING COUNT(*) >= {n}")

    @add
    def no_items(c: Ctx):
        d = c.lay.d
        return ([f"Which {d.place.en_pl} have no {d.item.en_pl}?"],
                [f"{d.item.ko}가 하나도 없는 {d.place.ko}의 이름은?"],
                f"SELECT name FROM {d.place.table} WHERE {d.place.key} NOT IN (SELECT {d.place.key} FROM "
                f"{d.item.table})")

    @add
    def above_avg(c: Ctx):
        d = c.lay.d
        return ([f"Which {d.item.en_pl} have a {d.item_num.en} above the average? Show name and {d.item_num.en}."],
                [f"{d.item_num.ko}가 평균보다 큰 {d.item.ko}의 이름과 {d.item_num.ko}를 알려주세요."],
                f"SELECT name, {d.item_num.name} FROM {d.item.table} WHERE {d.item_num.name} > "
                f"(SELECT AVG({d.item_num.name}) FROM {d.item.table})")

    @add
    def year_filter(c: Ctx):
        d = c.lay.d
        y = c.rng.randint(2021, 2024)
        return ([f"Which {d.item.en_pl} have a {d.item_date.en} in {y}? Show name and {d.item_date.en}."],
                [f"{d.item_date.ko}이 {y}년인 {d.item.ko}의 이름과 {d.item_date.ko}을 알려주세요."],
                f"SELECT name, {d.item_date.name} FROM {d.item.table} WHERE {d.item_date.name} BETWEEN '{y}-01-01' AND "
                f"'{y}-12-31'")

    @add
    def per_year(c: Ctx):
        d = c.lay.d
        return ([f"How many {d.item.en_pl} are there per year of {d.item_date.en}?"],
                [f"{d.item_date.ko} 연도별 {d.item.ko} 수를 구해주세요."],
                f"SELECT STRFTIME('%Y', {d.item_date.name}) AS year, COUNT(*) AS {d.item.table}_count FROM "
                f"{d.item.table} "
                f"GROUP BY year ORDER BY year")

    @add
    def in_list(c: Ctx):
        d = c.lay.d
        a, b = c.rng.sample(d.item_cat.values, 2)
        return ([f"How many {d.item.en_pl} have {d.item_cat.en} {a} or {b}?"],
                [f"{d.item_cat.ko}이 {a} 또는 {b}인 {d.item.ko}는 몇 개인가요?"],
                f"SELECT COUNT(*) FROM {d.item.table} WHERE {d.item_cat.name} IN ('{a}', '{b}')")

    @add
    def place_num(c: Ctx):
        d = c.lay.d
        x = c.one(f"SELECT {d.place_num.name} FROM {d.place.table}")
        return ([f"Show the {d.place.en_pl} with {d.place_num.en} of {x} or more, largest first: name and "
                 f"{d.place_num.en}."],
                [f"{d.place_num.ko}가 {x} 이상인 {d.place.ko}의 이름과 {d.place_num.ko}를 큰 순서로 보여주세요."],
                f"SELECT name, {d.place_num.name} FROM {d.place.table} WHERE {d.place_num.name} >= {x} ORDER BY "
                f"{d.place_num.name} DESC")

    def event_ctx(c: Ctx):
        d = c.lay.d
        taken: set[str] = set()
        return d, _alias(d.event.table, taken), _alias(d.item.table, taken)

    @add
    def event_month(c: Ctx):
        if not c.lay.has_event:
            return None
        d = c.lay.d
        day = c.one(f"SELECT {d.event_date.name} FROM {d.event.table}")
        y, m = day[:4], day[5:7]
        return ([f"How many {d.event.en_pl} happened in {y}-{m}?"],
                [f"{y}년 {int(m)}월의 {d.event.ko}은 몇 건인가요?"],
                f"SELECT COUNT(*) FROM {d.event.table} WHERE {d.event_date.name} BETWEEN '{y}-{m}-01' AND '{y}-{m}-31'")

    @add
    def event_day(c: Ctx):
        if not c.lay.has_event:
            return None
        d = c.lay.d
        day = c.one(f"SELECT {d.event_date.name} FROM {d.event.table}")
        return ([f"How many {d.event.en_pl} were on {day}?"], [f"{day}에 있었던 {d.event.ko}은 몇 건인가요?"],
                f"SELECT COUNT(*) FROM {d.event.table} WHERE {d.event_date.name} = '{day}'")

    @add
    def event_per_kind(c: Ctx):
        if not c.lay.has_event:
            return None
        d = c.lay.d
        fn, en, ko = c.rng.choice([("COUNT(*)", "number of", "건수"),
                                   (f"SUM({d.event_num.name})", f"total {d.event_num.en} of",
                                    f"{d.event_num.ko} 합계")])
        alias = "total" if fn.startswith("SUM") else f"{d.event.table}_count"
        return ([f"What is the {en} {d.event.en_pl} per {d.event_kind.en}?"],
                [f"{d.event_kind.ko}별 {d.event.ko} {ko}를 구해주세요."],
                f"SELECT {d.event_kind.name}, {fn} AS {alias} FROM {d.event.table} GROUP BY {d.event_kind.name}")

    @add
    def event_sum_kind(c: Ctx):
        if not c.lay.has_event:
            return None
        d = c.lay.d
        v = c.rng.choice(d.event_kind.values)
        return ([f"What is the total {d.event_num.en} of the {d.event.en_pl} with {d.event_kind.en} {v}?"],
                [f"{d.event_kind.ko}가 {v}인 {d.event.ko}의 {d.event_num.ko} 합계는 얼마인가요?"],
                f"SELECT SUM({d.event_num.name}) FROM {d.event.table} WHERE {d.event_kind.name} = '{v}'")

    @add
    def event_top_items(c: Ctx):
        if not c.lay.has_event:
            return None
        d, a, b = event_ctx(c)
        k = c.rng.randint(1, 3)
        return ([f"Which {k} {d.item.en_pl} have the largest total {d.event_num.en}? Show name and total."],
                [f"{d.event_num.ko} 합계가 가장 큰 {d.item.ko} {k}개의 이름과 합계를 보여주세요."],
                f"SELECT {b}.name, SUM({a}.{d.event_num.name}) AS total FROM {d.event.table} AS {a} JOIN "
                f"{d.item.table} AS {b} "
                f"ON {a}.{d.item.key} = {b}.{d.item.key} GROUP BY {b}.{d.item.key}, {b}.name ORDER BY total DESC LIMIT "
                f"{k}")

    @add
    def event_of_item(c: Ctx):
        if not c.lay.has_event:
            return None
        d, a, b = event_ctx(c)
        v = c.one(f"SELECT i.name FROM {d.item.table} AS i JOIN {d.event.table} AS e ON e.{d.item.key} = "
                  f"i.{d.item.key}")
        return ([f"List the {d.event_date.en} and {d.event_num.en} of the {d.event.en_pl} of {v}."],
                [f"{v}의 {d.event.ko} {d.event_date.ko}과 {d.event_num.ko}를 보여주세요."],
                f"SELECT {a}.{d.event_date.name}, {a}.{d.event_num.name} FROM {d.event.table} AS {a} JOIN "
                f"{d.item.table} AS {b} "
                f"ON {a}.{d.item.key} = {b}.{d.item.key} WHERE {b}.name = '{v}'")

    @add
    def event_per_city(c: Ctx):
        if not c.lay.has_event:
            return None
        d = c.lay.d
        taken: set[str] = set()
        a, b, p = (_alias(t, taken) for t in (d.event.table, d.item.table, d.place.table))
        return ([f"What is the average {d.event_num.en} of {d.event.en_pl} per {d.place.en} city?"],
                [f"{d.place.ko} 도시별 {d.event.ko}의 평균 {d.event_num.ko}를 구해주세요."],
                f"SELECT {p}.{c.lay.city}, AVG({a}.{d.event_num.name}) AS avg_{d.event_num.name} FROM {d.event.table} "
                f"AS {a} "
                f"JOIN {d.item.table} AS {b} ON {a}.{d.item.key} = {b}.{d.item.key} "
                f"JOIN {d.place.table} AS {p} ON {b}.{d.place.key} = {p}.{d.place.key} GROUP BY {p}.{c.lay.city}")

    return T


TEMPLATES = _templates()


# -- eval disjointness -------------------------------------------------------------------------------

def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def eval_names() -> tuple[set[str], set[str], set[str]]:
    """(schema names, table names, normalised questions) of the shipped evaluation set."""
    tables = {t.lower() for s in schema_names() for t in re.findall(r"CREATE TABLE (\w+)", schema_ddl(s))}
    return set(schema_names()), tables, {_norm(i.question) for i in load_eval()}


def check_disjoint(examples: Iterable[Example]) -> None:
    """Raises ``ValueError`` when any example shares a schema, a table or a question with the eval set."""
    schemas, tables, questions = eval_names()
    for ex in examples:
        used = {t.lower() for t in re.findall(r"CREATE TABLE (\w+)", ex.ddl)}
        if ex.schema in schemas or used & tables or _norm(ex.question) in questions:
            raise ValueError(f"training example overlaps the eval set: {ex.schema}: {ex.question!r}")


# -- generation --------------------------------------------------------------------------------------

def _layouts(n: int, rng: random.Random) -> Iterator[Layout]:
    for k in range(n):
        d = DOMAINS[k % len(DOMAINS)]
        yield Layout(f"{d.name}_{k}", d, rng.choice(("city", "city", "location", "region")), rng.random() < 0.75,
                     rng.random() < 0.5)


def generate(n_schemas: int, per_schema: int = 40, seed: int = 0, db_dir: Path | None = None) -> list[Example]:
    """``per_schema`` checked examples (at most; duplicates are dropped) for each of ``n_schemas`` schemas.

    The SQLite files are kept in ``db_dir`` (as ``<schema>.sqlite``) when given, else thrown away."""
    from integrations.text2sql.sources import Source

    rng = random.Random(seed)
    _, eval_tables, eval_questions = eval_names()
    out: list[Example] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(db_dir or tmp_dir)
        tmp.mkdir(parents=True, exist_ok=True)
        for lay in _layouts(n_schemas, rng):
            d = lay.d
            if {d.place.table, d.item.table, d.event.table} & eval_tables:
                raise ValueError(f"domain {d.name} reuses an eval table name")
            path = tmp / f"{lay.name}.sqlite"
            con = sqlite3.connect(path)
            con.executescript(_ddl(lay))
            _fill(con, lay, rng)
            source = Source(lay.name, f"sqlite:///{path}")
            ddl = source.ddl()
            ctx = Ctx(lay, con, rng)
            seen: set[str] = set()
            for _ in range(per_schema * 3):
                if len(seen) >= per_schema:
                    break
                made = rng.choice(TEMPLATES)(ctx)
                if made is None:
                    continue
                en, ko, sql = made
                lang = rng.choice(("en", "ko"))
                question = rng.choice(en if lang == "en" else ko)
                if question in seen or _norm(question) in eval_questions:
                    continue
                try:
                    rows = con.execute(sql).fetchall()
                except sqlite3.Error as exc:
                    raise ValueError(f"template made a broken gold query: {sql}: {exc}") from exc
                if not rows or rows == [(None,)] or rows == [(0,)]:
                    continue  # an empty answer teaches nothing about the question
                seen.add(question)
                out.append(Example(lay.name, lang, question, sql, ddl))
            con.close()
            source.close()
    check_disjoint(out)
    return out


def write(examples: Iterable[Example], path: Path) -> int:
    opener = gzip.open if str(path).endswith(".gz") else open
    n = 0
    with opener(path, "wt", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(json.dumps(asdict(ex), ensure_ascii=False) + "\n")
            n += 1
    return n


def read(path: Path) -> list[Example]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [Example(**json.loads(line)) for line in fh if line.strip()]


if __name__ == "__main__":
    import typer

    def main(out: Path, schemas: int = 240, per_schema: int = 40, seed: int = 0) -> None:
        n = write(generate(schemas, per_schema, seed), out)
        typer.echo(f"wrote {n} examples over {schemas} schemas to {out}")

    typer.run(main)
