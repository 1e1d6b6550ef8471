"""Schema-agnostic question templates over one table: any table of the schema, any suitable column.

The role templates of :mod:`.train_templates` ask about fixed columns, so a model trained on them alone
learns which column a question usually means, not how to find it in the DDL. These pick a random table
of :func:`~.train_schema.column_catalog` and a random column of the kind they need, and name both by
their own words ("patients whose insurance coverage is 'private'"), so the only way to the gold column is
to read the words against the schema. Same contract as :mod:`.train_templates`: English phrasings,
Korean phrasings and the gold SQL in the eval's style (no alias on one table), or ``None``.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass

from integrations.text2sql.grammar import GrammarOptions
from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_schema import ColumnInfo, TableInfo, column_catalog
from integrations.text2sql.training.train_templates import Ctx, Made, Template, month_range, weighted_registry

TEMPLATES: list[Template] = []
# The share of text filters phrased by the value alone, as users do ("Computer Science teachers"): the column
# is then found in the prompt's value hints (value_hints), not in the question's words.
BARE_VALUES = 0.4
IN_LISTS = 0.15  # the share of value filters that name two or three values ("in Tokyo, Osaka or Paris")
WEIGHTS: list[float] = []  # how often train_data draws each template, relative to the others of this family

# (SQL, English adjective, Korean word, alias prefix) of the aggregates over a number column.
AGGREGATES = (("AVG", "average", "평균", "avg"), ("SUM", "total", "합계", "total"),
              ("MAX", "highest", "최댓값", "max"), ("MIN", "lowest", "최솟값", "min"))


# The filters, lists and groups the eval's one-table questions are made of weigh most; IS NULL, DISTINCT
# and date gaps are rarer in questions and would crowd the header table.
template = weighted_registry(TEMPLATES, WEIGHTS)


@dataclass
class Cond:
    """A WHERE condition and how a question says it: after the noun in English, before it in Korean."""

    sql: str
    en: list[str]  # "whose price is over 5000"
    ko: list[str]  # "가격이 5000원 초과인"


def lit(value: object) -> str:
    return str(value) if isinstance(value, int | float) else "'" + str(value).replace("'", "''") + "'"


def count_of(t: TableInfo) -> str:
    """The eval's name for a row count: ``COUNT(*) AS teacher_count`` on ``teachers``; a long noun loses its
    first words (``ticket_line_count``), since the grammar bounds an output alias (``max_alias_chars``)."""
    words = t.en.split()
    while len(words) > 1 and len("_".join(words)) + len("_count") > GrammarOptions.max_alias_chars:
        words = words[1:]
    return "_".join(words) + "_count"


def pick_table(c: Ctx, *kinds: str) -> tuple[TableInfo, ColumnInfo] | None:
    """A random table that has a column of one of ``kinds``, and one such column."""
    tables = [t for t in column_catalog(c.lay) if t.of(*kinds)]
    if not tables:
        return None
    t = c.rng.choice(tables)
    return t, c.rng.choice(t.of(*kinds))


def sortable(t: TableInfo) -> list[ColumnInfo]:
    """Number and date columns without NULLs (SQLite sorts NULL first: an "earliest" would be a NULL)."""
    return [col for col in t.of("number", "date") if not col.nullable]


def shown(c: Ctx, t: TableInfo, avoid: ColumnInfo, n: int) -> list[ColumnInfo]:
    """``n`` columns to list (a name first when the table has one), never the filtered column."""
    cols = [col for col in t.columns if col.name != avoid.name and col.kind != "fk"]
    first = [col for col in cols if col.name == "name"] or cols[:1]
    rest = [col for col in cols if col not in first]
    return (first + c.rng.sample(rest, min(n - 1, len(rest))))[:n]


def and_en(cols: list[ColumnInfo]) -> str:
    """``name, email and join date``"""
    words = [col.en for col in cols]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def and_ko(cols: list[ColumnInfo], pair: str) -> str:
    """``이름, 이메일과 가입일을``: the last two joined by 과/와, ``pair`` on the last word."""
    words = [col.ko for col in cols]
    if len(words) == 1:
        return k(words[0], pair)
    return ", ".join(words[:-2] + [k(words[-2], "과/와")]) + " " + k(words[-1], pair)


def number_text(c: Ctx, x: int, unit: str, space: bool) -> str:
    text = f"{x:,}" if x >= 10000 and c.rng.random() < 0.5 else str(x)
    return f"{text}{' ' if space else ''}{unit}" if unit and c.rng.random() < 0.7 else text


def condition(c: Ctx, t: TableInfo, col: ColumnInfo) -> Cond | None:
    """A filter on ``col`` with a value read from the rows (None when the column has none)."""
    v = c.one(f"SELECT {col.name} FROM {t.table} WHERE {col.name} IS NOT NULL")
    if v is None:
        return None
    en, ko, name = col.en, col.ko, col.name
    if col.kind in ("enum", "text") and not col.unique and c.rng.random() < IN_LISTS:
        return in_list(c, t, col)
    if col.kind in ("enum", "text"):
        # A bare value ("'Y'인") names its column only when no other column of the table may hold it.
        if c.rng.random() < BARE_VALUES and not any(v in o.values for o in t.columns if o is not col):
            return Cond(f"{name} = {lit(v)}", [f"with '{v}'", f"with {v}"], [f"'{v}'인", f"{v}인"])
        return Cond(f"{name} = {lit(v)}", [f"whose {en} is '{v}'", f"with {en} '{v}'", f"where the {en} is {v}"],
                    [f"{k(ko, '이/가')} '{v}'인", f"{ko} {v}인", f"{k(ko, '이/가')} {v}인"])
    if col.kind in ("fk", "key"):
        return Cond(f"{name} = {v}", [f"whose {en} is {v}", f"with {en} {v}"],
                    [f"{k(ko, '이/가')} {v}인", f"{ko} {v}번인"])
    if col.kind == "number":
        return number_condition(c, t, col, v)
    return date_condition(c, col, v)


def in_list(c: Ctx, t: TableInfo, col: ColumnInfo) -> Cond | None:
    """``col IN (...)`` over two or three of its stored values, listed as people list them."""
    values = sorted({v for (v,) in c.con.execute(f"SELECT DISTINCT {col.name} FROM {t.table} WHERE {col.name} "
                                                 "IS NOT NULL")})
    if len(values) < 3:
        return None
    picked = c.rng.sample(values, c.rng.choice((2, 3)))
    sql = f"{col.name} IN ({', '.join(lit(v) for v in picked)})"
    en_list = " or ".join(picked) if len(picked) == 2 else f"{picked[0]}, {picked[1]} or {picked[2]}"
    ko_list = ", ".join(picked)
    return Cond(sql, [f"whose {col.en} is {en_list}", f"in {en_list}", f"with {col.en} {en_list}"],
                [f"{k(col.ko, '이/가')} {ko_list} 중 하나인", f"{' 또는 '.join(picked)}인", f"{col.ko} {ko_list}인"])


def nice(x: int) -> int:
    """A round threshold near ``x`` (two significant digits), as a person would say it."""
    if x < 100:
        return x
    step = 10 ** (len(str(x)) - 2)
    return max(step, round(x / step) * step)


def korean_amount(x: int) -> str | None:
    """``x`` in Korean myriads (2000000000 -> 20억, 35000 -> 3만 5천), or None when it reads no shorter."""
    eok, rest = divmod(x, 100_000_000)
    man, rest = divmod(rest, 10_000)
    cheon, rest = divmod(rest, 1000)
    if rest or (not eok and not man):
        return None
    parts = [f"{eok}억"] * bool(eok) + [f"{man}만"] * bool(man) + [f"{cheon}천"] * bool(cheon)
    return " ".join(parts)


def number_condition(c: Ctx, t: TableInfo, col: ColumnInfo, x: int) -> Cond:
    en, ko = col.en, col.ko
    op = c.rng.choice((">", "<", ">=", "<=", "BETWEEN", "="))
    if op in (">", "<", ">=", "<=") and c.rng.random() < 0.5:
        x = nice(x)
    xe, xk = number_text(c, x, col.unit_en, True), number_text(c, x, col.unit_ko, False)
    myriads = korean_amount(x)
    if myriads and c.rng.random() < 0.6:
        xk = f"{myriads}{' ' + col.unit_ko if col.unit_ko else ''}"
    if op == "=":
        return Cond(f"{col.name} = {x}", [f"whose {en} is exactly {xe}", f"with a {en} of {xe}"],
                    [f"{k(ko, '이/가')} {xk}인", f"{ko} {xk}인"])
    if op == "BETWEEN":
        lo, hi = sorted((x, c.one(f"SELECT {col.name} FROM {t.table}")))
        return Cond(f"{col.name} BETWEEN {lo} AND {hi}", [f"whose {en} is between {lo} and {hi}",
                                                          f"with {en} from {lo} to {hi}"],
                    [f"{k(ko, '이/가')} {lo} 이상 {hi} 이하인", f"{ko} {lo}에서 {hi} 사이인"])
    words = {">": (["over", "more than", "above"], ["초과인", "보다 큰"]),
             "<": (["under", "less than", "below"], ["미만인", "보다 작은"]),
             ">=": (["at least", "no less than"], ["이상인"]),
             "<=": (["at most", "no more than"], ["이하인"])}[op]
    en_w = [f"whose {en} is {w} {xe}" for w in words[0]] + [f"with a {en} of {words[0][0]} {xe}"]
    ko_w = [f"{k(ko, '이/가')} {xk}{'' if w.startswith('보다') else ' '}{w}" for w in words[1]]
    return Cond(f"{col.name} {op} {x}", en_w, ko_w)


def date_condition(c: Ctx, col: ColumnInfo, day: str) -> Cond:
    en, ko, name = col.en, col.ko, col.name
    first, last, y, m = month_range(day)
    shape = c.rng.choice(("year", "month", "day", "after", "before"))
    if shape == "year":
        return Cond(f"{name} BETWEEN '{y}-01-01' AND '{y}-12-31'", [f"whose {en} is in {y}", f"with a {en} in {y}"],
                    [f"{k(ko, '이/가')} {y}년인", f"{ko} 기준 {y}년인"])
    if shape == "month":
        month = calendar.month_name[m]
        return Cond(f"{name} BETWEEN '{first}' AND '{last}'", [f"whose {en} is in {month} {y}",
                                                               f"with a {en} during {y}-{m:02d}"],
                    [f"{k(ko, '이/가')} {y}년 {m}월인", f"{ko} 기준 {y}년 {m}월인"])
    if shape == "day":
        return Cond(f"{name} = '{day}'", [f"whose {en} is {day}", f"with {en} {day}"],
                    [f"{k(ko, '이/가')} {day}인", f"{ko} {int(day[:4])}년 {int(day[5:7])}월 {int(day[8:])}일인"])
    # 이후 and 이전 include the day itself, as "on or after" and "on or before" do.
    op, en_w, ko_w = (">=", "on or after", "이후인") if shape == "after" else ("<=", "on or before", "이전인")
    return Cond(f"{name} {op} '{day}'", [f"whose {en} is {en_w} {day}", f"with a {en} {en_w} {day}"],
                [f"{k(ko, '이/가')} {day} {ko_w}"])


def filtered(c: Ctx, lookup: bool) -> tuple[TableInfo, ColumnInfo, Cond] | None:
    """A random table, column and condition; ``lookup`` allows a unique column (one row, found by name)."""
    tables = [t for t in column_catalog(c.lay) if filterable(t, lookup)]
    t = c.rng.choice(tables)
    col = c.rng.choice(filterable(t, lookup))
    cond = condition(c, t, col)
    return (t, col, cond) if cond else None


def filterable(t: TableInfo, lookup: bool) -> list[ColumnInfo]:
    return [col for col in t.of("enum", "text", "number", "date", "fk") if lookup or not col.unique]


def order_words(col: ColumnInfo, desc: bool) -> tuple[str, str]:
    """(English, Korean) for sorting by ``col``, e.g. ("highest price first", "가격이 높은 순으로")."""
    if col.kind == "date":
        return ((f"newest {col.en} first", f"{k(col.ko, '이/가')} 최근인 순으로") if desc
                else (f"oldest {col.en} first", f"{k(col.ko, '이/가')} 오래된 순으로"))
    if col.kind == "number":
        return ((f"highest {col.en} first", f"{k(col.ko, '이/가')} 큰 순서로") if desc
                else (f"lowest {col.en} first", f"{k(col.ko, '이/가')} 작은 순서로"))
    return f"sorted by {col.en}", f"{col.ko} 순으로"


@template(2)
def count_filtered(c: Ctx) -> Made | None:
    got = filtered(c, lookup=False)
    if got is None:
        return None
    t, _, cond = got
    e, q = c.rng.choice(cond.en), c.rng.choice(cond.ko)
    return ([f"How many {t.en_pl} are there {e}?", f"Count the {t.en_pl} {e}.",
             f"Give me the number of {t.en_pl} {e}.", f"What is the number of {t.en_pl} {c.rng.choice(cond.en)}?"],
            [f"{q} {k(t.ko, '은/는')} 몇 {t.counter_ko}인가요?", f"{q} {t.ko} 수를 알려주세요.",
             f"{q} {k(t.ko, '이/가')} 몇 {t.counter_ko}인지 구해 주세요.", f"{c.rng.choice(cond.ko)} {t.ko} 수는?"],
            f"SELECT COUNT(*) FROM {t.table} WHERE {cond.sql}")


@template(3)
def list_filtered(c: Ctx) -> Made | None:
    got = filtered(c, lookup=True)
    if got is None:
        return None
    t, col, cond = got
    cols = shown(c, t, col, c.rng.choice((1, 2, 2)))
    e, q = c.rng.choice(cond.en), c.rng.choice(cond.ko)
    sql = f"SELECT {', '.join(x.name for x in cols)} FROM {t.table} WHERE {cond.sql}"
    en_tail, ko_head = "", ""
    if sortable(t) and c.rng.random() < 0.4:
        by, desc = c.rng.choice(sortable(t)), c.rng.random() < 0.6
        en_o, ko_o = order_words(by, desc)
        sql += f" ORDER BY {by.name}{' DESC' if desc else ''}"
        en_tail, ko_head = f", {en_o}", f"{ko_o} "
    return ([f"List the {and_en(cols)} of the {t.en_pl} {e}{en_tail}.",
             f"Show the {and_en(cols)} of every {t.en} {e}{en_tail}.",
             f"For the {t.en_pl} {e}, give their {and_en(cols)}{en_tail}.",
             f"I need the {and_en(cols)} of {t.en_pl} {e}{en_tail}."],
            [f"{q} {t.ko}의 {and_ko(cols, '을/를')} {ko_head}보여주세요.",
             f"{q} {t.ko}의 {and_ko(cols, '을/를')} {ko_head}알려 주세요.",
             f"{q} {t.ko} 목록을 {ko_head}보여 주세요. {', '.join(x.ko for x in cols)}만요."],
            sql)


@template(2.5)
def per_group(c: Ctx) -> Made | None:
    picked = pick_table(c, "enum", "fk")
    if picked is None:
        return None
    t, g = picked
    nums = [x for x in t.of("number") if x.name != g.name]
    if nums and c.rng.random() < 0.5:
        x, (fn, en_a, ko_a, prefix) = c.rng.choice(nums), c.rng.choice(AGGREGATES)
        alias = f"{prefix}_{x.name}"
        sql = f"SELECT {g.name}, {fn}({x.name}) AS {alias} FROM {t.table} GROUP BY {g.name}"
        desc = c.rng.random() < 0.4
        tail = ", largest first" if desc else ""
        en = [f"What is the {en_a} {x.en} of the {t.en_pl} per {g.en}{tail}?",
              f"{en_a.capitalize()} {x.en} of {t.en_pl} by {g.en}{tail}.",
              f"For each {g.en}, give the {en_a} {x.en} of its {t.en_pl}{tail}."]
        if desc:
            return (en, [f"{g.ko}별 {t.ko} {x.ko} {k(ko_a, '을/를')} 큰 순서로 보여주세요.",
                         f"{t.ko}의 {x.ko} {k(ko_a, '을/를')} {g.ko}마다 구해서 큰 순으로 정렬해 주세요."],
                    f"{sql} ORDER BY {alias} DESC")
        return (en, [f"{g.ko}별 {t.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요.",
                     f"{g.ko}마다 {t.ko}의 {x.ko} {k(ko_a, '은/는')} 얼마인가요?",
                     f"{t.ko}의 {g.ko} 기준 {x.ko} {ko_a}"],
                sql)
    alias = count_of(t)
    sql = f"SELECT {g.name}, COUNT(*) AS {alias} FROM {t.table} GROUP BY {g.name}"
    roll = c.rng.random()
    n = c.group_count(f"SELECT COUNT(*) FROM {t.table} GROUP BY {g.name}") if roll < 0.3 else None
    if n is not None:
        (some, _), th = t.counted(n), c.threshold()
        return ([f"Which {g.en} values have {th.en.format(n=some)}? Show each with its count.",
                 f"List every {g.en} with {th.en_after.format(n=some)}, and how many."],
                [f"{k(t.ko, '이/가')} {th.ko.format(n=f'{n}{t.counter_ko}')} {k(g.ko, '과/와')} 그 수를 보여주세요.",
                 f"{t.ko} 수가 {th.ko.format(n=f'{n}{t.counter_ko}')} {k(g.ko, '과/와')} 그 {t.ko} 수를 알려 주세요."],
                f"{sql} HAVING COUNT(*) {th.op} {n}")
    desc = roll < 0.6
    tail = ", most first" if desc else ""
    en = [f"How many {t.en_pl} are there per {g.en}{tail}?", f"Count the {t.en_pl} for each {g.en}{tail}.",
          f"Number of {t.en_pl} by {g.en}{tail}", f"Give me the {t.en} count per {g.en}{tail}."]
    if desc:
        return (en, [f"{g.ko}별 {t.ko} 수를 많은 순서로 보여주세요.",
                     f"{g.ko}마다 {t.ko} 수를 세어 많은 순으로 알려 주세요."],
                f"{sql} ORDER BY {alias} DESC")
    return (en, [f"{g.ko}별 {t.ko} 수를 구해주세요.",
                 f"{g.ko}마다 {k(t.ko, '이/가')} 몇 {t.counter_ko}인지 알려주세요.",
                 f"{g.ko} 기준으로 {k(t.ko, '을/를')} 세어 주세요."], sql)


@template(1.5)
def aggregate(c: Ctx) -> Made | None:
    picked = pick_table(c, "number", "date")
    if picked is None:
        return None
    t, x = picked
    where, e, q = "", "", ""
    if c.rng.random() < 0.5:
        others = [col for col in filterable(t, lookup=False) if col.name != x.name]
        cond = condition(c, t, c.rng.choice(others)) if others else None
        if cond:
            where, e, q = f" WHERE {cond.sql}", " " + c.rng.choice(cond.en), c.rng.choice(cond.ko) + " "
    if x.kind == "date":
        fn, en_a, ko_a = c.rng.choice((("MIN", "earliest", "가장 이른"), ("MAX", "latest", "가장 최근인")))
        return ([f"What is the {en_a} {x.en} among the {t.en_pl}{e}?", f"Give me the {en_a} {x.en} of {t.en_pl}{e}."],
                [f"{q}{t.ko}의 {x.ko} 중 {ko_a} 날은 언제인가요?",
                 f"{q}{t.ko} 중 {ko_a} {k(x.ko, '을/를')} 알려주세요."],
                f"SELECT {fn}({x.name}) FROM {t.table}{where}")
    fn, en_a, ko_a, _ = c.rng.choice(AGGREGATES)
    return ([f"What is the {en_a} {x.en} of the {t.en_pl}{e}?", f"Give me the {en_a} {x.en} over {t.en_pl}{e}.",
             f"I need the {en_a} {x.en} of all {t.en_pl}{e}."],
            [f"{q}{t.ko}의 {x.ko} {k(ko_a, '은/는')} 얼마인가요?", f"{q}{t.ko}의 {x.ko} {k(ko_a, '을/를')} 구해주세요.",
             f"{q}{t.ko} {x.ko} {k(ko_a, '을/를')} 알려 주세요."],
            f"SELECT {fn}({x.name}) FROM {t.table}{where}")


@template(0.5)
def count_distinct(c: Ctx) -> Made | None:
    picked = pick_table(c, "enum", "fk")
    if picked is None:
        return None
    t, g = picked
    return ([f"How many different {g.en} values appear among the {t.en_pl}?",
             f"Count the distinct {g.en} values of the {t.en_pl}.",
             f"How many distinct {g.en} values do {t.en_pl} have?"],
            [f"{t.ko}의 {k(g.ko, '은/는')} 몇 가지인가요?", f"{t.ko}에 나오는 서로 다른 {g.ko}의 수를 알려주세요.",
             f"{t.ko}에서 중복 없이 센 {g.ko} 수는?"],
            f"SELECT COUNT(DISTINCT {g.name}) FROM {t.table}")


@template(1)
def top_k(c: Ctx) -> Made | None:
    t = c.rng.choice([t for t in column_catalog(c.lay) if sortable(t)])
    x = c.rng.choice(sortable(t))
    cols = shown(c, t, x, c.rng.choice((1, 1, 2)))
    n, desc = c.rng.randint(1, 5), c.rng.random() < 0.7
    if x.kind == "date":
        en_a, ko_a, ko_rank, ko_order = (("most recent", "가장 최근인", "최근", "최근") if desc
                                         else ("earliest", "가장 이른", "오래된", "오래된"))
    else:
        en_a, ko_a, ko_rank, ko_order = (("highest", "가장 큰", "상위", "높은") if desc
                                         else ("lowest", "가장 작은", "하위", "낮은"))
    amount = f"{n}{t.counter_ko}"
    some = f"{n} {t.en_pl}" if n > 1 else t.en
    both = cols + [x]
    return ([f"Show the {and_en(both)} of the {some} with the {en_a} {x.en}.",
             f"Top {some} by {x.en} ({en_a} first): {and_en(both)}.",
             f"Which {some} {'have' if n > 1 else 'has'} the {en_a} {x.en}? Give {and_en(both)}."],
            [f"{k(x.ko, '이/가')} {ko_a} {t.ko} {amount}의 {and_ko(both, '을/를')} 보여주세요.",
             f"{x.ko} 기준 {ko_rank} {amount} {t.ko}의 {', '.join(col.ko for col in both)} 목록",
             f"{x.ko} {ko_order} 순으로 {t.ko} {amount}의 {and_ko(both, '을/를')} 알려주세요."],
            f"SELECT {', '.join(col.name for col in cols)}, {x.name} FROM {t.table} ORDER BY {x.name}"
            f"{' DESC' if desc else ''} LIMIT {n}")


@template(0.5)
def null_or_not(c: Ctx) -> Made | None:
    tables = [t for t in column_catalog(c.lay) if any(col.nullable for col in t.columns)]
    if not tables:
        return None
    t = c.rng.choice(tables)
    x = c.rng.choice([col for col in t.columns if col.nullable])
    show = shown(c, t, x, 1)[0]
    if c.rng.random() < 0.5:
        return ([f"How many {t.en_pl} have no {x.en}?", f"Count the {t.en_pl} whose {x.en} is missing.",
                 f"How many {t.en_pl} were left without a {x.en}?"],
                [f"{k(x.ko, '이/가')} 없는 {k(t.ko, '은/는')} 몇 {t.counter_ko}인가요?",
                 f"{k(x.ko, '이/가')} 비어 있는 {t.ko} 수를 알려주세요."],
                f"SELECT COUNT(*) FROM {t.table} WHERE {x.name} IS NULL")
    return ([f"List the {show.en} and {x.en} of the {t.en_pl} that have a {x.en}.",
             f"Show {show.en} and {x.en} for every {t.en} with a {x.en} filled in."],
            [f"{k(x.ko, '이/가')} 있는 {t.ko}의 {k(show.ko, '과/와')} {k(x.ko, '을/를')} 보여주세요.",
             f"{k(x.ko, '이/가')} 비어 있지 않은 {t.ko}의 {show.ko}, {x.ko} 목록을 알려 주세요."],
            f"SELECT {show.name}, {x.name} FROM {t.table} WHERE {x.name} IS NOT NULL")


@template(0.5)
def distinct_values(c: Ctx) -> Made | None:
    picked = pick_table(c, "enum", "fk")
    if picked is None:
        return None
    t, g = picked
    return ([f"Which {g.en} values appear among the {t.en_pl}?", f"List each {g.en} of the {t.en_pl} once.",
             f"What different {g.en} values do the {t.en_pl} have?"],
            [f"{t.ko}의 {k(g.ko, '을/를')} 중복 없이 보여주세요.", f"{t.ko}에 있는 {g.ko} 종류를 알려주세요.",
             f"{t.ko}에 나오는 {g.ko} 목록"],
            f"SELECT DISTINCT {g.name} FROM {t.table}")


@template(0.5)
def days_between(c: Ctx) -> Made | None:
    """Days from a table's own date to its later, nullable one (a completion date): JULIANDAY differences."""
    tables = [t for t in column_catalog(c.lay) if len(t.of("date")) >= 2 and any(x.nullable for x in t.of("date"))]
    if not tables:
        return None
    t = c.rng.choice(tables)
    end = c.rng.choice([x for x in t.of("date") if x.nullable])
    start = c.rng.choice([x for x in t.of("date") if not x.nullable])
    s_en, s_ko = start.en, start.ko
    gap = f"JULIANDAY({end.name}) - JULIANDAY({start.name})"
    shape = c.rng.random()
    if shape < 0.4:
        return ([f"What is the average number of days from {s_en} to {end.en} for the {t.en_pl}?",
                 f"On average, how many days pass between the {s_en} and the {end.en} of {t.en_pl}?"],
                [f"{t.ko}의 {s_ko}부터 {end.ko}까지 평균 며칠이 걸렸나요?",
                 f"{k(end.ko, '이/가')} 있는 {t.ko}의 {s_ko}에서 {end.ko}까지 평균 일수를 구해주세요."],
                f"SELECT AVG({gap}) FROM {t.table} WHERE {end.name} IS NOT NULL")
    if shape < 0.7:
        return ([f"How many {t.en_pl} have their {end.en} on the same day as their {s_en}?",
                 f"Count the {t.en_pl} whose {end.en} equals the {s_en}."],
                [f"{k(end.ko, '이/가')} {k(s_ko, '과/와')} 같은 날인 {k(t.ko, '은/는')} 몇 {t.counter_ko}인가요?",
                 f"{s_ko} 당일에 {k(end.ko, '이/가')} 찍힌 {t.ko} 수를 알려주세요."],
                f"SELECT COUNT(*) FROM {t.table} WHERE {end.name} = {start.name}")
    n = c.rng.randint(1, 8)
    return ([f"How many {t.en_pl} took more than {n} days from {s_en} to {end.en}?",
             f"Count the {t.en_pl} whose {end.en} is over {n} days after their {s_en}."],
            [f"{s_ko}부터 {end.ko}까지 {n}일보다 오래 걸린 {k(t.ko, '은/는')} 몇 {t.counter_ko}인가요?",
             f"{k(end.ko, '이/가')} {s_ko}보다 {n}일 넘게 늦은 {t.ko} 수를 구해주세요."],
            f"SELECT COUNT(*) FROM {t.table} WHERE {gap} > {n}")


@template(0.5)
def dates_compared(c: Ctx) -> Made | None:
    """Rows whose one date falls after (or before) another of their own: ``returned_on > due_on``."""
    tables = [t for t in column_catalog(c.lay) if len(t.of("date")) >= 2]
    if not tables:
        return None
    t = c.rng.choice(tables)
    a, b = c.rng.sample(t.of("date"), 2)
    later = c.rng.random() < 0.6
    op, en_w, ko_w = (">", "after", "늦은") if later else ("<", "before", "이른")
    where = f"{a.name} {op} {b.name}"
    if c.rng.random() < 0.5:
        return ([f"How many {t.en_pl} have a {a.en} {en_w} their {b.en}?",
                 f"Count the {t.en_pl} whose {a.en} is {en_w} the {b.en}."],
                [f"{k(a.ko, '이/가')} {b.ko}보다 {ko_w} {k(t.ko, '은/는')} 몇 {t.counter_ko}인가요?",
                 f"{b.ko}보다 {k(a.ko, '이/가')} {ko_w} {t.ko} 수를 알려주세요."],
                f"SELECT COUNT(*) FROM {t.table} WHERE {where}")
    cols = shown(c, t, a, 2)
    cols = cols if a in cols else cols[:1] + [a]
    return ([f"Which {t.en_pl} have a {a.en} {en_w} their {b.en}? Show the {and_en(cols)}.",
             f"List the {and_en(cols)} of the {t.en_pl} whose {a.en} is {en_w} the {b.en}."],
            [f"{k(a.ko, '이/가')} {b.ko}보다 {ko_w} {t.ko}의 {and_ko(cols, '을/를')} 보여주세요.",
             f"{b.ko}보다 {k(a.ko, '이/가')} {ko_w} {t.ko} 목록을 알려 주세요. {', '.join(x.ko for x in cols)}만요."],
            f"SELECT {', '.join(x.name for x in cols)} FROM {t.table} WHERE {where}")
