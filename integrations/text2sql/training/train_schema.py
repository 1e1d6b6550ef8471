"""One generated training database: a domain's roles laid out with this schema's own naming, DDL and rows.

:class:`Layout` holds the choices a seeded RNG makes per schema (which optional tables exist, column
names, comment style, table order, aliases); :func:`create` writes the tables and fills them with rows
that look like a Korean shop's: Korean and English names and cities mixed, dates over two years, some
events cancelled, some people and catalog items with no events, so anti-joins and zero counts have
answers.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta

from integrations.text2sql.training import train_columns
from integrations.text2sql.training.train_columns import Drawn
from integrations.text2sql.training.train_domains import (
    CITY_CODES,
    CITY_NAMES,
    HISTORIES,
    PLACE_CODES,
    PLACES,
    Column,
    Domain,
    Noun,
)

ROLES = ("place", "people", "catalog", "staff", "header", "line", "rating", "history")
SURNAMES = "김이박최정강조윤장임한오서신권황"
GIVEN = ("민준", "서연", "도윤", "지우", "하준", "서윤", "시우", "지민", "예은", "현우", "수아", "준서", "다은", "유진")
FIRST_EN = ("Alice", "Brian", "Chloe", "Daniel", "Emma", "Felix", "Grace", "Henry", "Iris", "Jack", "Lena", "Mason")
LAST_EN = ("Kim", "Lee", "Park", "Smith", "Brown", "Garcia", "Muller", "Tanaka", "Martin", "Wilson")
COMMENTS = ("좋아요", "최고예요", "그저 그래요", "별로예요", "Great", "Too slow", "Friendly staff", "다시 올게요",
            "Not worth it", "Loved it")
FIRST_DAY, DAYS = date(2023, 1, 1), 730
CURRENCIES = (("KRW", "원", 1), ("KRW", "원", 1), ("USD", "달러", 1300))  # (unit, Korean unit, KRW per unit)


@dataclass
class Layout:
    """One generated schema: the domain plus this schema's naming choices."""

    name: str
    d: Domain
    rng: random.Random
    place: Noun = field(init=False)
    code: Column = field(init=False)
    cols: dict[str, str] = field(init=False)  # logical column -> this schema's column name
    has_staff: bool = field(init=False)
    has_rating: bool = field(init=False)
    has_email: bool = field(init=False)
    checks: bool = field(init=False)  # enums as CHECK (x IN (...)) rather than a comment listing the values
    currency: tuple[str, str, int] = field(init=False)
    order: list[str] = field(init=False)
    alias: dict[str, str] = field(init=False)
    extras: dict[str, list[Drawn]] = field(init=False)  # role -> the attribute columns added after its own
    history: Noun = field(init=False)  # the staff's pay periods (in ``order`` only with staff, and not always)
    pay_words: tuple[str, str] = field(init=False)  # (English, Korean) for the history's amount

    def __post_init__(self) -> None:
        r, d = self.rng, self.d
        self.place, self.code = r.choice(PLACES), r.choice(PLACE_CODES)
        self.has_staff, self.has_rating, self.has_email = r.random() < 0.6, r.random() < 0.6, r.random() < 0.5
        self.checks = r.random() < 0.6
        self.currency = r.choice(CURRENCIES)
        stem = d.header.en.split()[-1]
        self.cols = {
            "p_date": r.choice(("signup_date", "joined_on", "created_on", "registered_on")),
            "tier": r.choice((d.tier.name, d.tier.name, "tier", "level")),
            "h_date": r.choice((f"{stem}_date", "created_on", "event_date", "placed_on")),
            "status": r.choice(("status", "status", "state")),
            "qty": r.choice(("quantity", "quantity", "qty")),
            "unit_price": r.choice(("unit_price", "unit_price", "price_paid")),
            "s_date": r.choice(("hire_date", "hired_on")),
            "stars": r.choice(("stars", "score")),
            "comment": r.choice(("comment", "review_text", "note")),
            "done_date": r.choice(("completed_on", "closed_on", "finished_on")),  # NULL while still open
        }
        head = ["place", "people", "catalog"] + (["staff"] if self.has_staff else [])
        if r.random() < 0.4:
            r.shuffle(head)  # SQLite accepts a REFERENCES to a table created later
        self.order = head + ["header", "line"] + (["rating"] if self.has_rating else [])
        self.history, *words = r.choice(HISTORIES)
        self.pay_words = tuple(words)
        since, until = r.choice((("from_date", "to_date"), ("start_date", "end_date"), ("valid_from", "valid_to")))
        self.cols |= {"pay": r.choice(("amount", "amount", self.pay_words[0])), "from": since, "to": until}
        if self.has_staff and r.random() < 0.5:
            self.order.append("history")
        self.alias = _aliases([self.noun(role).table for role in ROLES])
        self.extras = {}
        for t in column_catalog(self):
            # A person's or a staff member's city beside a place table worded the same would be two answers.
            words = {col.ko for col in t.columns} | ({self.place.ko} if t.role in ("people", "staff") else set())
            self.extras[t.role] = train_columns.draw(r, t.role, {col.name for col in t.columns}, words)

    def noun(self, role: str) -> Noun:
        return {"place": self.place, "history": self.history}.get(role) or getattr(self.d, role)

    def col(self, logical: str) -> str:
        return self.cols[logical]

    def column_words(self, logical: str) -> tuple[str, str]:
        """(English, Korean) words a question uses for a column, whatever this schema named it."""
        if logical == "tier":
            return self.d.tier.en, self.d.tier.ko
        en = {"p_date": "join date", "h_date": "date", "s_date": "hire date", "qty": "quantity",
              "done_date": "completion date"}
        # Keyed by logical role, or by this schema's column name where the name changes the words (score).
        ko = {"status": "상태", "p_date": "가입일", "h_date": "날짜", "s_date": "입사일", "stars": "별점",
              "done_date": "완료일", "qty": "수량", "unit_price": "단가", "score": "점수", "comment": "코멘트",
              "review_text": "후기 내용", "note": "메모"}
        return en.get(logical, self.cols[logical].replace("_", " ")), ko.get(self.cols[logical], ko.get(logical))

    def tables(self) -> set[str]:
        return {self.noun(role).table for role in self.order}


@dataclass(frozen=True)
class ColumnInfo:
    """One column of a generated table, as a question names it."""

    name: str  # this schema's column name
    kind: str  # key, fk, enum, text, number or date
    en: str
    ko: str
    values: tuple = ()  # an enum's allowed values
    unit_en: str = ""
    unit_ko: str = ""
    nullable: bool = False
    unique: bool = False  # one row per value (names, emails): a lookup key, not a filter to count by


@dataclass(frozen=True)
class TableInfo:
    role: str
    table: str
    en: str  # the table's noun, singular
    en_pl: str
    ko: str
    counter_ko: str  # what Korean counts its rows in: 명, 건, 개, 곳
    columns: tuple[ColumnInfo, ...]

    def of(self, *kinds: str) -> list[ColumnInfo]:
        return [col for col in self.columns if col.kind in kinds]

    def top(self, n: int) -> tuple[str, str]:
        """How a top-k names k of these rows: ("3 towns", "3곳"), and ("town", "1곳") for one."""
        return (f"{n} {self.en_pl}" if n > 1 else self.en), f"{n}{self.counter_ko}"

    def counted(self, n: int) -> tuple[str, str]:
        """n of these rows as a count: ("3 orders", "3건"), ("1 order", "1건")."""
        return f"{n} {self.en_pl if n > 1 else self.en}", f"{n}{self.counter_ko}"


_COUNTERS = {"place": "곳", "people": "명", "staff": "명", "header": "건", "line": "개", "rating": "개",
             "catalog": "개", "history": "건"}


def column_catalog(lay: Layout) -> list[TableInfo]:
    """Every table of this schema with its columns in DDL order: kind, name, words, values and units.

    The same Layout choices :func:`ddl` writes from, so a template can pick any table and any column
    without knowing its role (``tests`` check the catalog against the created database)."""
    d = lay.d

    def key(role: str, kind: str = "key") -> ColumnInfo:
        noun = lay.noun(role)
        return ColumnInfo(noun.key, kind, noun.key.replace("_", " "), f"{noun.ko} 번호")

    def named(logical: str, kind: str, **extra) -> ColumnInfo:
        en, ko = lay.column_words(logical)
        return ColumnInfo(lay.col(logical), kind, en, ko, **extra)

    def domain(col: Column, kind: str, unit: tuple[str, str] = ("", "")) -> ColumnInfo:
        values = col.values if kind == "enum" else ()
        return ColumnInfo(col.name, kind, col.en, col.ko, values, *unit)

    name = ColumnInfo("name", "text", "name", "이름", unique=True)  # UNIQUE or generated without repeats
    email = [ColumnInfo("email", "text", "email", "이메일", unique=True)] if lay.has_email else []
    money = lay.currency[:2]
    # "date" alone is ambiguous beside the completion date: the header's own date is named by its noun.
    event_date = ColumnInfo(lay.col("h_date"), "date", f"{d.header.en} date", f"{d.header.ko} 날짜")
    cols: dict[str, list[ColumnInfo]] = {
        "place": [key("place"), name, _place_code(lay)],
        "people": [key("people"), name] + email
        + [key("place", "fk"), named("p_date", "date"), named("tier", "enum", values=d.tier.values)],
        "catalog": [key("catalog"), name, domain(d.category, "enum"), domain(d.price, "number", money),
                    domain(d.size, "number", (d.size.unit_en, d.size.unit_ko))],
        "staff": [key("staff"), name, key("place", "fk"), named("s_date", "date")],
        "header": [key("header"), key("people", "fk")] + ([key("staff", "fk")] if lay.has_staff else [])
        + [event_date, named("done_date", "date", nullable=True),
           named("status", "enum", values=d.statuses)],
        "line": [key("line"), key("header", "fk"), key("catalog", "fk"), named("qty", "number"),
                 named("unit_price", "number", unit_en=money[0], unit_ko=money[1])],
        "rating": [key("rating"), key("header", "fk"), named("stars", "number", unit_ko="점"),
                   named("comment", "text", nullable=True)],
        "history": [key("history"), key("staff", "fk"),
                    ColumnInfo(lay.col("pay"), "number", *lay.pay_words, unit_en=money[0], unit_ko=money[1]),
                    ColumnInfo(lay.col("from"), "date", "start date", "시작일"),
                    ColumnInfo(lay.col("to"), "date", "end date", "종료일", nullable=True)],
    }
    return [TableInfo(role, lay.noun(role).table, lay.noun(role).en, lay.noun(role).en_pl, lay.noun(role).ko,
                      _COUNTERS[role], tuple(cols[role] + [_extra_info(lay, x) for x in lay.extras.get(role, ())]))
            for role in lay.order]


def _place_code(lay: Layout) -> ColumnInfo:
    """A country column holds each city's real country (``create``), more than the few the code lists."""
    code = lay.code
    values = tuple(sorted(set(CITY_CODES.values()))) if "country" in code.name else code.values
    return ColumnInfo(code.name, "enum", code.en, code.ko, values)


def _extra_info(lay: Layout, x: Drawn) -> ColumnInfo:
    e = x.spec
    if e.kind == "city":  # free text in the DDL; its values are cities, found through the value hints
        return ColumnInfo(x.name, "enum", e.en, e.ko, CITY_NAMES)
    if e.kind == "text":
        return ColumnInfo(x.name, "text", e.en, e.ko, unique=True)
    units = lay.currency[:2] if e.money else (e.unit_en, e.unit_ko)
    return ColumnInfo(x.name, e.kind, e.en, e.ko, e.values if e.kind == "enum" else (), *units)


def _extra_ddl(lay: Layout, x: Drawn, last: bool) -> str:
    e, comma = x.spec, "" if last else ","
    if e.kind == "enum":
        return _enum(lay, x.name, e.values, last)
    sql_type = {"city": "TEXT NOT NULL", "text": "TEXT NOT NULL UNIQUE", "date": "TEXT NOT NULL"}.get(e.kind,
                                                                                                    "INTEGER NOT NULL")
    if e.check and lay.checks:
        sql_type += f" CHECK ({x.name} BETWEEN {e.values[0]} AND {e.values[1]})"
    note = f"{e.note or e.en} in {lay.currency[0]}" if e.money else e.note
    return f"  {x.name} {sql_type}{comma}" + (f" -- {note}" if note else "")


def _extra_value(lay: Layout, x: Drawn, key: int, cities: list[str]) -> object:
    e, r = x.spec, lay.rng
    if e.kind == "enum":
        return r.choice(e.values)
    if e.kind == "city":
        return r.choice(cities)
    if e.kind == "text":
        return f"{x.name[:1].upper()}{100000 + key * 7}"
    if e.kind == "date":
        return _day(r)
    low, high = e.values
    if e.money:
        low, high = max(1, low // lay.currency[2]), max(2, high // lay.currency[2])
        return r.randrange(low, high + 1, 100 if high > 10000 else 1)
    return r.randint(low, high)


def _with_comma(line: str) -> str:
    """A table's last column line, now followed by another: the comma goes before its comment."""
    head, sep, note = line.partition(" -- ")
    return (head if head.endswith(",") else head + ",") + (f" -- {note}" if sep else "")


_KEYWORDS = {"as", "by", "do", "if", "in", "is", "no", "of", "on", "or", "to", "and", "asc", "end", "not", "set"}


def _aliases(tables: list[str]) -> dict[str, str]:
    """Short aliases in the eval's style (order_items -> oi), unique within the schema, keyed by role."""
    out: dict[str, str] = {}
    for role, table in zip(ROLES, tables, strict=True):
        words = table.split("_")
        cand = "".join(w[0] for w in words) if len(words) > 1 else table[0]
        for longer in (cand, table[:2], table[:3], table):
            if longer not in out.values() and longer not in _KEYWORDS:
                cand = longer
                break
        out[role] = cand
    return out


def _enum(lay: Layout, col: str, values: tuple, last: bool = False) -> str:
    comma = "" if last else ","
    listed = ", ".join(f"'{v}'" for v in values)
    if lay.checks:
        return f"  {col} TEXT NOT NULL CHECK ({col} IN ({listed})){comma}"
    return f"  {col} TEXT NOT NULL{comma} -- " + (listed if lay.rng.random() < 0.5 else ", ".join(values))


def _table(name: str, lines: list[str]) -> str:
    return f"CREATE TABLE {name} (\n" + "\n".join(lines) + "\n);"


def ddl(lay: Layout) -> str:
    d, c = lay.d, lay.col
    fk = {role: f"  {lay.noun(role).key} INTEGER NOT NULL REFERENCES {lay.noun(role).table}({lay.noun(role).key}),"
          for role in ROLES}
    iso = " -- ISO date 'YYYY-MM-DD'"
    pk = {role: f"  {lay.noun(role).key} INTEGER PRIMARY KEY," for role in ROLES}
    code_note = "ISO 3166-1 alpha-2 code, e.g. 'KR', 'US'" if "country" in lay.code.name else "short region code"
    unit = lay.currency[0]
    size_note = f" -- {d.size.en} in {d.size.unit_en}" if d.size.unit_en else ""
    parts = {
        "place": [pk["place"], "  name TEXT NOT NULL UNIQUE,", f"  {lay.code.name} TEXT NOT NULL -- {code_note}"],
        "people": [pk["people"], "  name TEXT NOT NULL,"] + (["  email TEXT NOT NULL UNIQUE,"] if lay.has_email else [])
        + [fk["place"], f"  {c('p_date')} TEXT NOT NULL,{iso}", _enum(lay, c("tier"), d.tier.values, last=True)],
        "catalog": [pk["catalog"], "  name TEXT NOT NULL,",
                    f"  {d.category.name} TEXT NOT NULL, -- " + ", ".join(d.category.values),
                    f"  {d.price.name} INTEGER NOT NULL, -- {d.price.en} in {unit}",
                    f"  {d.size.name} INTEGER NOT NULL{size_note}"],
        "staff": [pk["staff"], "  name TEXT NOT NULL,", fk["place"], f"  {c('s_date')} TEXT NOT NULL{iso}"],
        "header": [pk["header"], fk["people"]] + ([fk["staff"]] if lay.has_staff else [])
        + [f"  {c('h_date')} TEXT NOT NULL,{iso}", f"  {c('done_date')} TEXT,{iso}, NULL until completed",
           _enum(lay, c("status"), d.statuses, last=True)],
        "line": [pk["line"], fk["header"], fk["catalog"], f"  {c('qty')} INTEGER NOT NULL,",
                 f"  {c('unit_price')} INTEGER NOT NULL -- price paid per unit in {unit}"],
        "rating": [pk["rating"], fk["header"],
                   f"  {c('stars')} INTEGER NOT NULL CHECK ({c('stars')} BETWEEN 1 AND 5),",
                   f"  {c('comment')} TEXT"],
        "history": [pk["history"], fk["staff"], f"  {c('pay')} INTEGER NOT NULL, -- {lay.pay_words[0]} in {unit}",
                    f"  {c('from')} TEXT NOT NULL,{iso}", f"  {c('to')} TEXT{iso}, NULL for the current one"],
    }
    for role, drawn in lay.extras.items():
        if drawn:
            parts[role][-1] = _with_comma(parts[role][-1])
            parts[role] += [_extra_ddl(lay, x, last=i == len(drawn) - 1) for i, x in enumerate(drawn)]
    return "\n\n".join(_table(lay.noun(role).table, parts[role]) for role in lay.order)


# -- rows ----------------------------------------------------------------------------------------------

def _names(rng: random.Random, n: int, korean_share: float) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        if rng.random() < korean_share:
            out.add(rng.choice(SURNAMES) + rng.choice(GIVEN))
        else:
            out.add(f"{rng.choice(FIRST_EN)} {rng.choice(LAST_EN)}")
    names = sorted(out)  # a set's order follows the per-process string hash: sort first, so a seed is a file
    rng.shuffle(names)
    return names


def _day(rng: random.Random) -> str:
    return (FIRST_DAY + timedelta(days=rng.randrange(DAYS))).isoformat()


def _insert(con: sqlite3.Connection, lay: Layout, role: str, rows: list[tuple], own_cities: list[str]) -> None:
    """The role's rows, each followed by its drawn extra columns' values."""
    table = lay.noun(role).table
    rows = [row + tuple(_extra_value(lay, x, row[0], own_cities) for x in lay.extras.get(role, ())) for row in rows]
    if rows:
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def _pay_periods(lay: Layout, n_staff: int) -> list[tuple]:
    """One to four consecutive pay periods per staff member, each higher than the last; the last is open
    (no end date) unless the member has left."""
    r, rows = lay.rng, []
    for member in range(1, n_staff + 1):
        start = FIRST_DAY - timedelta(days=r.randint(0, 900))
        pay = r.randrange(2_500_000, 8_000_000, 10_000) // lay.currency[2]
        periods = r.randint(1, 4)
        for p in range(periods):
            end = start + timedelta(days=r.randint(150, 400))
            still_open = p == periods - 1 and r.random() < 0.85
            rows.append((len(rows) + 1, member, pay, start.isoformat(), None if still_open else end.isoformat()))
            start, pay = end + timedelta(days=1), pay + pay * r.randint(2, 12) // 100
    return rows


def create(con: sqlite3.Connection, lay: Layout) -> None:
    """Creates the tables and fills them."""
    con.executescript(ddl(lay))
    r, d = lay.rng, lay.d
    ko_share = r.choice((0.3, 0.5, 0.7))
    cities = r.sample(CITY_NAMES, r.randint(4, 7))
    # The free-text city columns hold other cities than the place table, so the value hints tell a question
    # about a member's own city from one about the place a member belongs to.
    own_cities = r.sample([city for city in CITY_NAMES if city not in cities], r.randint(3, 6))
    codes = lay.code.values
    _insert(con, lay, "place", [(k + 1, city, CITY_CODES[city] if "country" in lay.code.name else r.choice(codes))
                                for k, city in enumerate(cities)], own_cities)
    # The last place is often left without people, so zero counts and anti-joins have something to find.
    n_home = len(cities) - (1 if r.random() < 0.6 else 0)
    people = _names(r, r.randint(14, 30), ko_share)
    _insert(con, lay, "people", [
        (k + 1, name) + ((f"user{k + 1}@{r.choice(('mail.kr', 'example.com', 'shop.io'))}",) if lay.has_email else ())
        + (r.randint(1, n_home), _day(r), r.choice(d.tier.values)) for k, name in enumerate(people)], own_cities)
    words = list(d.words) + [f"{w} Special" for w in d.words[:3]]
    items = r.sample(words, r.randint(min(7, len(words)), len(words)))
    low, high = (max(1, v // lay.currency[2]) for v in d.price.values)
    prices = [r.randrange(low, high + 1, 100 if high > 10000 else 1) for _ in items]
    _insert(con, lay, "catalog", [(k + 1, w, r.choice(d.category.values), prices[k], r.randint(*d.size.values))
                                  for k, w in enumerate(items)], own_cities)
    staff = _names(r, r.randint(3, 6), ko_share)
    if lay.has_staff:
        _insert(con, lay, "staff", [(k + 1, n, r.randint(1, len(cities)), _day(r)) for k, n in enumerate(staff)],
                own_cities)
    if "history" in lay.order:
        _insert(con, lay, "history", _pay_periods(lay, len(staff)), own_cities)
    buyers = r.sample(range(1, len(people) + 1), max(2, len(people) - r.randint(1, 4)))
    sold = r.sample(range(1, len(items) + 1), max(2, len(items) - r.randint(0, 2)))
    weights = [1.0] * (len(d.statuses) - 1) + [0.4]  # 'cancelled' is last and rarer
    headers, lines, ratings = [], [], []
    for h in range(1, r.randint(30, 80) + 1):
        status = r.choices(d.statuses, weights)[0]
        day = _day(r)
        done = (date.fromisoformat(day) + timedelta(days=r.randint(0, 12))).isoformat() if (
            status != "cancelled" and r.random() < 0.6) else None
        headers.append((h, r.choice(buyers)) + ((r.randint(1, len(staff)),) if lay.has_staff else ())
                       + (day, done, status))
        for item in r.sample(sold, r.randint(1, min(3, len(sold)))):
            price = prices[item - 1] if r.random() < 0.8 else prices[item - 1] * 9 // 10
            lines.append((len(lines) + 1, h, item, r.randint(1, 5), price))
        if status != "cancelled" and r.random() < 0.6:
            ratings.append((len(ratings) + 1, h, r.randint(1, 5), r.choice(COMMENTS + (None,))))
    _insert(con, lay, "header", headers, own_cities)
    _insert(con, lay, "line", lines, own_cities)
    if lay.has_rating:
        _insert(con, lay, "rating", ratings, own_cities)
    con.commit()
