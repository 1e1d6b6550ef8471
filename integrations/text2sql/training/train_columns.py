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
    check: bool = False  # a small number range the DDL states as CHECK (x BETWEEN low AND high)


def _e(names: str, kind: str, en: str, ko: str, values: tuple = (), unit_en: str = "", unit_ko: str = "",
       money: bool = False, note: str = "", check: bool = False) -> Extra:
    return Extra(tuple(names.split()), kind, en, ko, tuple(values), unit_en, unit_ko, money, note, check)


EXTRAS: dict[str, tuple[Extra, ...]] = {
    "place": (
        _e("population", "number", "population", "인구", (20000, 9000000), unit_ko="명"),
        _e("opened_year founded_year", "number", "opening year", "개설 연도", (1990, 2023)),
        _e("area_km2 land_area", "number", "area", "면적", (30, 2000), "km²", "km²", note="square kilometres"),
        _e("annual_budget yearly_budget", "number", "annual budget", "연간 예산", (500000000, 90000000000),
           money=True),
        _e("climate_zone", "enum", "climate zone", "기후대", ("temperate", "cold", "warm")),
        _e("is_coastal coastal", "enum", "coastal flag", "해안 여부", ("Y", "N")),
        _e("time_zone tz", "enum", "time zone", "시간대", ("KST", "JST", "CET", "EST")),
    ),
    "people": (
        _e("city home_city", "city", "city", "거주 도시"),
        _e("age", "number", "age", "나이", (18, 80), unit_ko="세"),
        _e("points reward_points", "number", "reward points", "적립 포인트", (0, 50000), unit_ko="점"),
        _e("birth_year", "number", "birth year", "출생 연도", (1950, 2006)),
        _e("gender sex", "enum", "gender", "성별", ("F", "M")),
        _e("channel signup_channel", "enum", "sign-up channel", "가입 경로", ("web", "app", "store", "referral")),
        _e("date_of_birth born_on", "date", "date of birth", "생년월일", note="ISO date 'YYYY-MM-DD'"),
        _e("phone phone_no", "text", "phone number", "전화번호"),
        _e("member_level loyalty_level", "number", "level", "레벨", (1, 5), check=True),
        _e("occupation job", "enum", "occupation", "직업", ("student", "office_worker", "self_employed", "retired")),
        _e("height_cm", "number", "height", "키", (140, 200), "cm", "cm"),
        _e("visit_count visits", "number", "number of visits", "방문 횟수", (0, 300), unit_ko="회"),
        _e("preferred_language lang", "enum", "preferred language", "선호 언어", ("ko", "en", "ja", "zh")),
        _e("is_vip vip", "enum", "VIP flag", "VIP 여부", ("Y", "N")),
    ),
    "staff": (
        _e("position job_title", "enum", "position", "직책", ("manager", "senior", "junior", "intern")),
        _e("salary monthly_salary", "number", "salary", "급여", (2000000, 9000000), money=True,
           note="monthly salary"),
        _e("work_city base_city", "city", "work city", "근무 도시"),
        _e("shift", "enum", "shift", "근무 시간대", ("day", "night", "weekend")),
        _e("team team_name", "enum", "team", "팀", ("sales", "support", "ops", "it")),
        _e("rank_level job_level", "number", "job level", "직급 단계", (1, 7), check=True),
        _e("years_experience career_years", "number", "years of experience", "경력 연수", (0, 30), "years", "년"),
        _e("is_full_time full_time", "enum", "full-time flag", "정규직 여부", ("Y", "N")),
        _e("license_class licence_type", "enum", "license class", "면허 종류", ("A", "B", "C")),
        _e("extension ext_no", "text", "extension number", "내선 번호"),
    ),
    "catalog": (
        _e("release_year launch_year", "number", "release year", "출시 연도", (2005, 2024)),
        _e("weight_g", "number", "weight", "무게", (50, 5000), "g", "g", note="weight in grams"),
        _e("origin origin_country", "enum", "country of origin", "원산지", ("KR", "JP", "US", "DE", "CN")),
        _e("rating avg_rating", "number", "rating", "평점", (1, 5), note="1-5"),
        _e("is_active", "enum", "active flag", "판매 여부", ("Y", "N")),
        _e("brand maker", "enum", "brand", "브랜드", ("Acme", "Nova", "Orbit", "Zenith")),
        _e("color colour", "enum", "color", "색상", ("red", "blue", "black", "white")),
        _e("size_label", "enum", "size label", "사이즈", ("S", "M", "L", "XL")),
        _e("duration_min length_min", "number", "duration", "소요 시간", (10, 180), "minutes", "분"),
        _e("min_age age_limit", "number", "minimum age", "이용 연령", (0, 19), unit_ko="세"),
        _e("warranty_months", "number", "warranty", "보증 기간", (0, 36), "months", "개월"),
        _e("supplier vendor", "enum", "supplier", "공급업체", ("Hanil", "Daesung", "Kopo", "Sejin")),
        _e("calories kcal", "number", "calories", "열량", (50, 1200), "kcal", "kcal"),
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
        _e("from_city origin_city", "city", "departure city", "출발 도시"),
        _e("duration_min minutes", "number", "duration", "소요 시간", (5, 240), "minutes", "분"),
        _e("party_size guests", "number", "party size", "인원 수", (1, 12), unit_ko="명", check=True),
        _e("is_gift gift", "enum", "gift flag", "선물 여부", ("Y", "N")),
        _e("scheduled_on planned_date", "date", "scheduled date", "예정일", note="ISO date 'YYYY-MM-DD'"),
        _e("tip tip_amount", "number", "tip", "팁", (0, 20000), money=True),
        _e("delivery_method shipping_method", "enum", "delivery method", "배송 방식",
           ("standard", "express", "pickup")),
    ),
    "line": (
        _e("discount_pct discount_rate", "number", "discount", "할인율", (0, 50), "%", "%", note="percent"),
        _e("tax tax_amount", "number", "tax", "세금", (0, 9000), money=True),
        _e("is_returned returned", "enum", "returned flag", "반품 여부", ("Y", "N")),
        _e("option_size variant", "enum", "option", "옵션", ("S", "M", "L")),
        _e("line_no position_no", "number", "line number", "줄 번호", (1, 20)),
    ),
    "rating": (
        _e("rated_on reviewed_on", "date", "rating date", "평가일", note="ISO date 'YYYY-MM-DD'"),
        _e("channel source", "enum", "source", "작성 경로", ("app", "web", "kiosk")),
        _e("helpful_votes likes", "number", "helpful votes", "추천 수", (0, 500), unit_ko="개"),
        _e("would_recommend recommend", "enum", "recommendation flag", "추천 의향", ("Y", "N")),
        _e("aspect review_aspect", "enum", "aspect", "평가 항목", ("price", "quality", "service", "speed")),
    ),
}


@dataclass(frozen=True)
class Drawn:
    """One extra column in one schema: its spec and the name this schema gave it."""

    spec: Extra
    name: str


def draw(rng: random.Random, role: str, taken: set[str], taken_words: set[str]) -> list[Drawn]:
    """None, one or two extras for a table of ``role``, none named or worded like a column it has."""
    n = rng.choices((0, 1, 2, 3), (0.2, 0.35, 0.3, 0.15))[0]
    pool = [e for e in EXTRAS.get(role, ()) if not set(e.names) & taken and e.ko not in taken_words]
    return [Drawn(e, rng.choice(e.names)) for e in rng.sample(pool, min(n, len(pool)))]
