"""Optional attribute columns a generated table may carry beyond its role's own.

The role skeleton of :mod:`.train_schema` gives every schema the same few columns per table, so a model
trained on it alone learns habits no real database keeps: a city is always a joined place table, an event
has no number of its own, a person no attribute but a tier. Workflow tables carry more: a member's own
city, a delivery's weight, fee and destination, a staff member's position and salary. Each schema draws a
few of these per table (:func:`draw`), under one of a few names each; they are written after the role's
columns, filled with plausible rows, and listed in ``column_catalog`` like any other column, so the
schema-agnostic templates ask about them by their words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    names: tuple[str, ...]  # what a schema may call it; one is drawn per schema
    kind: str  # enum (listed values), city (a free-text city: its values are the schema's cities), number, date
    en: str
    ko: str
    values: tuple = ()  # an enum's values; (low, high) of a number
    unit_en: str = ""
    unit_ko: str = ""
    money: bool = False  # in the schema's currency (its unit and scale)
    note: str = ""  # the DDL comment ("" for none)


def _e(names: str, kind: str, en: str, ko: str, values: tuple = (), unit_en: str = "", unit_ko: str = "",
       money: bool = False, note: str = "") -> Extra:
    return Extra(tuple(names.split()), kind, en, ko, tuple(values), unit_en, unit_ko, money, note)


EXTRAS: dict[str, tuple[Extra, ...]] = {
    "place": (
        _e("population", "number", "population", "인구", (20000, 9000000), unit_ko="명"),
        _e("opened_year founded_year", "number", "opening year", "개설 연도", (1990, 2023)),
    ),
    "people": (
        _e("city home_city", "city", "city", "거주 도시"),
        _e("age", "number", "age", "나이", (18, 80), unit_ko="세"),
        _e("points reward_points", "number", "reward points", "적립 포인트", (0, 50000), unit_ko="점"),
        _e("birth_year", "number", "birth year", "출생 연도", (1950, 2006)),
        _e("gender sex", "enum", "gender", "성별", ("F", "M")),
        _e("channel signup_channel", "enum", "sign-up channel", "가입 경로", ("web", "app", "store", "referral")),
    ),
    "staff": (
        _e("position job_title", "enum", "position", "직책", ("manager", "senior", "junior", "intern")),
        _e("salary monthly_salary", "number", "salary", "급여", (2000000, 9000000), money=True,
           note="monthly salary"),
        _e("work_city base_city", "city", "work city", "근무 도시"),
        _e("shift", "enum", "shift", "근무 시간대", ("day", "night", "weekend")),
    ),
    "catalog": (
        _e("release_year launch_year", "number", "release year", "출시 연도", (2005, 2024)),
        _e("weight_g", "number", "weight", "무게", (50, 5000), "g", "g", note="weight in grams"),
        _e("origin origin_country", "enum", "country of origin", "원산지", ("KR", "JP", "US", "DE", "CN")),
        _e("rating avg_rating", "number", "rating", "평점", (1, 5), note="1-5"),
        _e("is_active", "enum", "active flag", "판매 여부", ("Y", "N")),
    ),
    "header": (
        _e("dest_city destination_city to_city", "city", "destination city", "도착 도시"),
        _e("fee service_fee charge", "number", "fee", "요금", (1000, 90000), money=True),
        _e("weight_kg", "number", "weight", "무게", (1, 400), "kg", "kg", note="weight in kilograms"),
        _e("distance_km", "number", "distance", "거리", (1, 900), "km", "km"),
        _e("channel order_channel", "enum", "channel", "접수 경로", ("web", "app", "phone", "walk_in")),
        _e("priority", "enum", "priority", "우선순위", ("low", "normal", "high", "urgent")),
        _e("payment_method pay_method", "enum", "payment method", "결제 수단", ("card", "cash", "transfer", "points")),
        _e("due_date due_on", "date", "due date", "마감일", note="ISO date 'YYYY-MM-DD'"),
        _e("reference_no code", "text", "reference number", "참조 번호"),
    ),
    "line": (
        _e("discount_pct discount_rate", "number", "discount", "할인율", (0, 50), "%", "%", note="percent"),
    ),
    "rating": (
        _e("rated_on reviewed_on", "date", "rating date", "평가일", note="ISO date 'YYYY-MM-DD'"),
        _e("channel source", "enum", "source", "작성 경로", ("app", "web", "kiosk")),
    ),
}


@dataclass(frozen=True)
class Drawn:
    """One extra column in one schema: its spec and the name this schema gave it."""

    spec: Extra
    name: str


def draw(rng: random.Random, role: str, taken: set[str], taken_words: set[str]) -> list[Drawn]:
    """None, one or two extras for a table of ``role``, none named or worded like a column it has."""
    n = rng.choices((0, 1, 2), (0.35, 0.4, 0.25))[0]
    pool = [e for e in EXTRAS.get(role, ()) if not set(e.names) & taken and e.ko not in taken_words]
    return [Drawn(e, rng.choice(e.names)) for e in rng.sample(pool, min(n, len(pool)))]
