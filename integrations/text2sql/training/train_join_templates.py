"""Question templates that join two to five tables of a generated schema: counts through a lookup,
per-group aggregates, revenue (SUM(quantity * unit_price)), top-k over a grouped join, HAVING, anti-joins
(NOT IN, LEFT JOIN ... IS NULL), LEFT JOIN counts that keep zero rows, and people -> header -> line ->
catalog chains. Same contract as :mod:`.train_templates`.
"""

from __future__ import annotations

from integrations.text2sql.training.korean_particles import attach as k
from integrations.text2sql.training.train_templates import Ctx, Made, Template

TEMPLATES: list[Template] = []


def template(fn: Template) -> Template:
    TEMPLATES.append(fn)
    return fn


def revenue(c: Ctx) -> str:
    a = c.a("line")
    return f"SUM({a}.{c.lay.col('qty')} * {a}.{c.lay.col('unit_price')})"


@template
def people_in_place(c: Ctx) -> Made:
    p, pl = c.lay.d.people, c.lay.place
    a, b = c.a("people"), c.a("place")
    v = c.one(f"SELECT x.name FROM {pl.table} AS x JOIN {p.table} AS y ON y.{pl.key} = x.{pl.key}")
    frm = f"FROM {c.src('people')}{c.join('place', 'people', 'place')}"
    if c.rng.random() < 0.5:
        return ([f"How many {p.en_pl} live in {v}?", f"Count the {p.en_pl} from {v}.",
                 f"What is the number of {p.en_pl} whose {pl.en} is {v}?"],
                [f"{v}에 사는 {k(p.ko, '은/는')} 몇 명인가요?", f"{v} {p.ko} 수를 세어 주세요.",
                 f"{k(pl.ko, '이/가')} {v}인 {k(p.ko, '은/는')} 모두 몇 명이에요?"],
                f"SELECT COUNT(*) {frm} WHERE {b}.name = '{v}'")
    tier = c.lay.col("tier")
    t = c.one(f"SELECT {tier} FROM {p.table}")
    return ([f"List the names of {t} {p.en_pl} in {v}.", f"Which {p.en_pl} from {v} have {c.lay.d.tier.en} {t}?"],
            [f"{v}에 사는 {c.lay.d.tier.ko} {t} {p.ko}의 이름을 알려 주세요.",
             f"{k(c.lay.d.tier.ko, '이/가')} {t}이면서 {v}에 있는 {k(p.ko, '을/를')} 보여 주세요."],
            f"SELECT {a}.name {frm} WHERE {b}.name = '{v}' AND {a}.{tier} = '{t}'")


@template
def people_per_place(c: Ctx) -> Made:
    p, pl = c.lay.d.people, c.lay.place
    a, b = c.a("people"), c.a("place")
    if c.rng.random() < 0.5:
        return ([f"How many {p.en_pl} does each {pl.en} have?", f"Number of {p.en_pl} per {pl.en} name.",
                 f"Count {p.en_pl} by {pl.en}."],
                [f"{pl.ko}별 {p.ko} 수를 구해 주세요.", f"{pl.ko}마다 {k(p.ko, '이/가')} 몇 명인지 알려 주세요."],
                f"SELECT {b}.name, COUNT(*) AS {p.table}_count FROM "
                f"{c.src('people')}{c.join('place', 'people', 'place')}"
                f" GROUP BY {b}.{pl.key}, {b}.name")
    return ([f"For every {pl.en}, including those with none, how many {p.en_pl} are there?",
             f"List all {pl.en_pl} with their number of {p.en_pl}, showing 0 where there are none."],
            [f"{k(p.ko, '이/가')} 없는 {pl.ko}도 포함해서 {pl.ko}별 {p.ko} 수를 보여 주세요.",
             f"모든 {pl.ko}의 {p.ko} 수를 알려 주세요. 없으면 0으로요."],
            f"SELECT {b}.name, COUNT({a}.{p.key}) AS {p.table}_count FROM {c.src('place')}"
            f"{c.join('people', 'people', 'place', 'LEFT JOIN')} GROUP BY {b}.{pl.key}, {b}.name")


@template
def place_without_people(c: Ctx) -> Made:
    p, pl = c.lay.d.people, c.lay.place
    a, b = c.a("people"), c.a("place")
    sql = (f"SELECT {b}.name FROM {c.src('place')}{c.join('people', 'people', 'place', 'LEFT JOIN')} "
           f"WHERE {a}.{p.key} IS NULL") if c.rng.random() < 0.5 else (
        f"SELECT name FROM {pl.table} WHERE {pl.key} NOT IN (SELECT {pl.key} FROM {p.table})")
    return ([f"Which {pl.en_pl} have no {p.en_pl}?", f"List the {pl.en_pl} without any {p.en}."],
            [f"{k(p.ko, '이/가')} 한 명도 없는 {pl.ko}의 이름은?",
             f"{p.ko} 없는 {k(pl.ko, '을/를')} 찾아 주세요."], sql)


@template
def headers_of_person(c: Ctx) -> Made:
    p, h = c.lay.d.people, c.lay.d.header
    hd, st = c.lay.col("h_date"), c.lay.col("status")
    a, b = c.a("header"), c.a("people")
    v = c.one(f"SELECT name FROM {p.table} WHERE {p.key} IN (SELECT {p.key} FROM {h.table})")
    return ([f"Show the date and {c.en('status')} of every {h.en} by {v}.",
             f"List {v}'s {h.en_pl}: {c.en('h_date')} and {c.en('status')}."],
            [f"{v}의 {h.ko} 날짜와 {k(c.ko('status'), '을/를')} 보여 주세요.",
             f"{k(v, '이/가')} 한 {h.ko} 목록({c.ko('h_date')}, {c.ko('status')})을 알려 주세요."],
            f"SELECT {a}.{hd}, {a}.{st} FROM {c.src('header')}{c.join('people', 'header', 'people')} WHERE {b}.name = "
            f"'{v}'")


@template
def top_people_by_headers(c: Ctx) -> Made:
    p, h = c.lay.d.people, c.lay.d.header
    b, n = c.a("people"), c.rng.randint(1, 5)
    frm = f"FROM {c.src('header')}{c.join('people', 'header', 'people')}"
    group = f"GROUP BY {b}.{p.key}, {b}.name"
    if c.rng.random() < 0.5:
        return ([f"Which {n} {p.en_pl} have the most {h.en_pl}? Show name and count.",
                 f"Top {n} {p.en_pl} by number of {h.en_pl}."],
                [f"{h.ko} 건수가 가장 많은 {p.ko} {n}명의 이름과 건수를 알려 주세요.",
                 f"{k(h.ko, '이/가')} 많은 순으로 {p.ko} 상위 {n}명은?"],
                f"SELECT {b}.name, COUNT(*) AS {h.table}_count {frm} {group} ORDER BY {h.table}_count DESC LIMIT {n}")
    m, th = c.rng.randint(2, 5), c.threshold()
    return ([f"Which {p.en_pl} have {th.en.format(n=m)} {h.en_pl}? Give name and count.",
             f"List {p.en_pl} with {th.en_after.format(n=m)} {h.en_pl}, with how many."],
            [f"{h.ko} 건수가 {th.ko.format(n=f'{m}건')} {p.ko}의 이름과 건수를 보여 주세요.",
             f"{k(h.ko, '을/를')} {th.ko_adverb.format(n=f'{m}번')} 한 {k(p.ko, '은/는')} 누구인가요? "
             "건수도 알려 주세요."],
            f"SELECT {b}.name, COUNT(*) AS {h.table}_count {frm} {group} HAVING COUNT(*) {th.op} {m}")


@template
def people_without_headers(c: Ctx) -> Made:
    p, h = c.lay.d.people, c.lay.d.header
    a, b = c.a("header"), c.a("people")
    sql = (f"SELECT {b}.name FROM {c.src('people')}{c.join('header', 'header', 'people', 'LEFT JOIN')} "
           f"WHERE {a}.{h.key} IS NULL") if c.rng.random() < 0.5 else (
        f"SELECT name FROM {p.table} WHERE {p.key} NOT IN (SELECT {p.key} FROM {h.table})")
    return ([f"Which {p.en_pl} have never made a {h.en}?", f"List the {p.en_pl} with no {h.en_pl} at all.",
             f"Who among the {p.en_pl} has no {h.en}?"],
            [f"{h.ko} 기록이 한 번도 없는 {p.ko}의 이름은?",
             f"한 번도 {k(h.ko, '이/가')} 없었던 {k(p.ko, '을/를')} 알려 주세요.",
             f"{h.ko} 없는 {p.ko} 명단을 보여 주세요."], sql)


@template
def catalog_never_sold(c: Ctx) -> Made:
    cat, ln, d = c.lay.d.catalog, c.lay.d.line, c.lay.d
    a, b = c.a("line"), c.a("catalog")
    sql = (f"SELECT {b}.name FROM {c.src('catalog')}{c.join('line', 'line', 'catalog', 'LEFT JOIN')} "
           f"WHERE {a}.{ln.key} IS NULL") if c.rng.random() < 0.5 else (
        f"SELECT name FROM {cat.table} WHERE {cat.key} NOT IN (SELECT {cat.key} FROM {ln.table})")
    return ([f"Which {cat.en_pl} has nobody {d.verb_en}?", f"List the {cat.en_pl} that never appear in any {ln.en}."],
            [f"아무도 {d.verb_ko} 적 없는 {cat.ko}의 이름은?",
             f"{ln.ko}에 한 번도 나오지 않은 {k(cat.ko, '을/를')} 알려 주세요."],
            sql)


@template
def revenue_per_catalog(c: Ctx) -> Made:
    cat, col = c.lay.d.catalog, c.lay.d.category
    b = c.a("catalog")
    frm = f"FROM {c.src('line')}{c.join('catalog', 'line', 'catalog')}"
    if c.rng.random() < 0.5:
        n = c.rng.randint(1, 5)
        return ([f"Which {n} {cat.en_pl} brought in the most revenue (quantity times unit price)?",
                 f"Top {n} {cat.en_pl} by revenue: name and revenue."],
                [f"매출(수량 x 단가)이 가장 큰 {cat.ko} {n}개의 이름과 매출은?",
                 f"매출 상위 {n}개 {k(cat.ko, '을/를')} 매출과 함께 알려 주세요."],
                f"SELECT {b}.name, {revenue(c)} AS revenue {frm} GROUP BY {b}.{cat.key}, {b}.name "
                f"ORDER BY revenue DESC LIMIT {n}")
    return ([f"What is the revenue per {col.en}?", f"Total sales (quantity x unit price) by {cat.en} {col.en}."],
            [f"{col.ko}별 매출을 구해 주세요.", f"{cat.ko} {col.ko}마다 수량 곱하기 단가의 합계는?"],
            f"SELECT {b}.{col.name}, {revenue(c)} AS revenue {frm} GROUP BY {b}.{col.name}")


@template
def revenue_of_headers(c: Ctx) -> Made:
    h, hd, st = c.lay.d.header, c.lay.col("h_date"), c.lay.col("status")
    a = c.a("header")
    frm = f"FROM {c.src('header')}{c.join('line', 'line', 'header')}"
    if c.rng.random() < 0.5:
        return ([f"What is the total revenue of all {h.en_pl} that were not cancelled?",
                 f"Sum quantity times unit price over non-cancelled {h.en_pl}."],
                [f"취소되지 않은 {h.ko}의 총매출은 "
                 f"얼마인가요?", "취소 건을 제외한 전체 매출(수량 x 단가)을 알려 주세요."],
                f"SELECT {revenue(c)} AS revenue {frm} WHERE {a}.{st} <> 'cancelled'")
    y = c.rng.choice((2023, 2024))
    return ([f"What was the revenue per month in {y}, excluding cancelled {h.en_pl}?",
             f"Monthly revenue for {y} without cancelled {h.en_pl}."],
            [f"{y}년 월별 매출을 취소 건은 빼고 구해 주세요.",
             f"{y}년 달마다 매출이 얼마였나요? 취소된 {k(h.ko, '은/는')} 제외해 주세요."],
            f"SELECT STRFTIME('%Y-%m', {a}.{hd}) AS month, {revenue(c)} AS revenue {frm} "
            f"WHERE {a}.{hd} BETWEEN '{y}-01-01' AND '{y}-12-31' AND {a}.{st} <> 'cancelled' GROUP BY month ORDER BY "
            f"month")


@template
def catalog_of_person(c: Ctx) -> Made:
    p, cat, d = c.lay.d.people, c.lay.d.catalog, c.lay.d
    b, pc = c.a("people"), c.a("catalog")
    chain = (f"FROM {c.src('people')}{c.join('header', 'header', 'people')}{c.join('line', 'line', 'header')}"
             f"{c.join('catalog', 'line', 'catalog')}")
    if c.rng.random() < 0.5:
        v = c.one(f"SELECT name FROM {p.table} WHERE {p.key} IN (SELECT {p.key} FROM {d.header.table})")
        return ([f"Which {cat.en_pl} has {v} {d.verb_en}?", f"List the distinct {cat.en_pl} {v} {d.verb_en}."],
                [f"{k(v, '이/가')} {d.verb_ko} {cat.ko}의 이름을 중복 없이 알려 주세요.",
                 f"{v} 님이 {d.verb_ko} {cat.ko} 목록은?"],
                f"SELECT DISTINCT {pc}.name {chain} WHERE {b}.name = '{v}'")
    pl = c.lay.place
    v = c.one(f"SELECT x.name FROM {pl.table} AS x JOIN {p.table} AS y ON y.{pl.key} = x.{pl.key}")
    return ([f"Which {cat.en_pl} did {p.en_pl} from {v} order? List each once.",
             f"Distinct {cat.en} names that {p.en_pl} living in {v} {d.verb_en}."],
            [f"{v}에 사는 {k(p.ko, '이/가')} {d.verb_ko} {cat.ko}의 이름을 중복 없이 보여 주세요.",
             f"{v} {k(p.ko, '이/가')} {d.verb_ko} {k(cat.ko, '을/를')} 알려 주세요."],
            f"SELECT DISTINCT {pc}.name {chain}{c.join('place', 'people', 'place')} WHERE {c.a('place')}.name = '{v}'")


@template
def revenue_per_place(c: Ctx) -> Made:
    pl, st = c.lay.place, c.lay.col("status")
    b = c.a("place")
    frm = (f"FROM {c.src('header')}{c.join('people', 'header', 'people')}{c.join('place', 'people', 'place')}"
           f"{c.join('line', 'line', 'header')}")
    return ([f"What is the revenue per {pl.en}, excluding cancelled ones, highest first?",
             f"Rank {pl.en_pl} by revenue (quantity x unit price), leaving out cancellations."],
            [f"{pl.ko}별 매출을 취소 건 빼고 높은 순으로 보여 주세요.",
             f"취소된 건을 제외하고 {pl.ko}마다 매출이 얼마인지 큰 순서로 알려 주세요."],
            f"SELECT {b}.name, {revenue(c)} AS revenue {frm} WHERE {c.a('header')}.{st} <> 'cancelled' "
            f"GROUP BY {b}.{pl.key}, {b}.name ORDER BY revenue DESC")


@template
def quantity_per_catalog_for_tier(c: Ctx) -> Made:
    p, cat, tier = c.lay.d.people, c.lay.d.catalog, c.lay.col("tier")
    t = c.rng.choice(c.lay.d.tier.values)
    pc, ln = c.a("catalog"), c.a("line")
    frm = (f"FROM {c.src('line')}{c.join('header', 'line', 'header')}{c.join('people', 'header', 'people')}"
           f"{c.join('catalog', 'line', 'catalog')}")
    return ([f"How many units of each {cat.en} did {p.en_pl} with {c.en('tier')} '{t}' take in total?",
             f"Total quantity per {cat.en} for {p.en_pl} with {c.lay.d.tier.en} {t}."],
            [f"{c.lay.d.tier.ko} {t} {p.ko}의 {cat.ko}별 총수량을 구해 주세요.",
             f"{k(c.lay.d.tier.ko, '이/가')} {t}인 {p.ko} 기준으로 {cat.ko}마다 수량 합계는?"],
            f"SELECT {pc}.name, SUM({ln}.{c.lay.col('qty')}) AS total_quantity {frm} "
            f"WHERE {c.a('people')}.{tier} = '{t}' GROUP BY {pc}.{cat.key}, {pc}.name")


@template
def spend_per_person(c: Ctx) -> Made:
    p, st = c.lay.d.people, c.lay.col("status")
    b, n = c.a("people"), c.rng.randint(1, 5)
    return ([f"Which {n} {p.en_pl} spent the most, not counting cancelled ones? Show name and total.",
             f"Top {n} spenders among the {p.en_pl} (quantity x unit price, no cancellations)."],
            [f"취소 건을 빼고 가장 많이 쓴 {p.ko} {n}명의 이름과 금액은?",
             f"지출 합계 상위 {n}명의 {k(p.ko, '을/를')} 알려 주세요. 취소는 제외요."],
            f"SELECT {b}.name, {revenue(c)} AS total_spent FROM {c.src('people')}{c.join('header', 'header', 'people')}"
            f"{c.join('line', 'line', 'header')} WHERE {c.a('header')}.{st} <> 'cancelled' "
            f"GROUP BY {b}.{p.key}, {b}.name ORDER BY total_spent DESC LIMIT {n}")


@template
def staff_queries(c: Ctx) -> Made | None:
    if not c.has("staff"):
        return None
    s, h, pl = c.lay.d.staff, c.lay.d.header, c.lay.place
    a = c.a("staff")
    if c.rng.random() < 0.5:
        v = c.one(f"SELECT x.name FROM {pl.table} AS x JOIN {s.table} AS y ON y.{pl.key} = x.{pl.key}")
        return ([f"Which {s.en_pl} work in {v}?", f"Names of the {s.en_pl} based in {v}."],
                [f"{v}에서 일하는 {s.ko}의 이름은?", f"{v} 소속 {k(s.ko, '을/를')} 알려 주세요."],
                f"SELECT {a}.name FROM {c.src('staff')}{c.join('place', 'staff', 'place')} WHERE {c.a('place')}.name = "
                f"'{v}'")
    return ([f"How many {h.en_pl} did each {s.en} handle? Most first.", f"Number of {h.en_pl} per {s.en}, descending."],
            [f"{s.ko}별로 처리한 {h.ko} 건수를 많은 순으로 보여 주세요.",
             f"{s.ko}마다 {k(h.ko, '이/가')} 몇 건인지 큰 순서로 알려 주세요."],
            f"SELECT {a}.name, COUNT(*) AS {h.table}_count FROM {c.src('header')}{c.join('staff', 'header', 'staff')} "
            f"GROUP BY {a}.{s.key}, {a}.name ORDER BY {h.table}_count DESC")


@template
def rating_queries(c: Ctx) -> Made | None:
    if not c.has("rating"):
        return None
    r, h, p = c.lay.d.rating, c.lay.d.header, c.lay.d.people
    stars, hd, st = c.lay.col("stars"), c.lay.col("h_date"), c.lay.col("status")
    ra, ha, pa = c.a("rating"), c.a("header"), c.a("people")
    pick = c.rng.randrange(4 if c.has("staff") else 3)
    if pick == 0:
        return ([f"Which non-cancelled {h.en_pl} have not been rated yet? Show {h.key} and {c.en('h_date')}.",
                 f"List {h.en_pl} without any {r.en}, excluding cancelled ones."],
                [f"아직 {k(r.ko, '이/가')} 없는 {h.ko}의 번호와 날짜를 보여 주세요. 취소 건은 빼고요.",
                 f"평가가 달리지 않은 {h.ko} 목록은? 취소된 건 제외."],
                f"SELECT {ha}.{h.key}, {ha}.{hd} FROM "
                f"{c.src('header')}{c.join('rating', 'rating', 'header', 'LEFT JOIN')} "
                f"WHERE {ra}.{r.key} IS NULL AND {ha}.{st} <> 'cancelled'")
    if pick == 1:
        n = c.rng.choice((1, 2))
        return ([f"Who gave {n} {c.en('stars')} or fewer? Show the {p.en} name, {c.en('stars')} and comment.",
                 f"List low {r.en_pl} ({c.en('stars')} <= {n}) with the {p.en}'s name."],
                [f"{c.ko('stars')} {n}점 이하를 준 {p.ko}의 이름, {c.ko('stars')}, 코멘트를 보여 주세요.",
                 f"{n}점 이하 {k(r.ko, '을/를')} 남긴 {p.ko} 이름과 점수, 내용을 알려 주세요."],
                f"SELECT {pa}.name, {ra}.{stars}, {ra}.{c.lay.col('comment')} FROM {c.src('rating')}"
                f"{c.join('header', 'rating', 'header')}{c.join('people', 'header', 'people')} WHERE {ra}.{stars} <= "
                f"{n}")
    if pick == 2:
        return ([f"What is the average {c.en('stars')} each {p.en} gave?",
                 f"Average {r.en} {c.en('stars')} per {p.en}."],
                [f"{p.ko}별 평균 {k(c.ko('stars'), '을/를')} 구해 주세요.", f"{p.ko}마다 준 {c.ko('stars')} 평균은?"],
                f"SELECT {pa}.name, AVG({ra}.{stars}) AS avg_{stars} FROM {c.src('rating')}"
                f"{c.join('header', 'rating', 'header')}{c.join('people', 'header', 'people')} "
                f"GROUP BY {pa}.{p.key}, {pa}.name")
    s, x, th = c.lay.d.staff, c.rng.choice((3, 3.5, 4)), c.threshold()
    sa = c.a("staff")
    return ([f"Which {s.en_pl} have an average {c.en('stars')} of {th.en.format(n=x)}? Show name and average.",
             f"{s.en_pl.capitalize()} whose {h.en_pl} average {th.en_after.format(n=x)} {c.en('stars')}."],
            [f"평균 {k(c.ko('stars'), '이/가')} {th.ko.format(n=x)} {s.ko}의 이름과 평균을 알려 주세요.",
             f"{c.ko('stars')} 평균 {th.ko.format(n=f'{x}점')} {k(s.ko, '은/는')} 누구인가요?"],
            f"SELECT {sa}.name, AVG({ra}.{stars}) AS avg_{stars} FROM "
            f"{c.src('rating')}{c.join('header', 'rating', 'header')}"
            f"{c.join('staff', 'header', 'staff')} GROUP BY {sa}.{s.key}, {sa}.name "
            f"HAVING AVG({ra}.{stars}) {th.op} {x}")


@template
def busy_places(c: Ctx) -> Made:
    p, pl = c.lay.d.people, c.lay.place
    b, n, th = c.a("place"), c.rng.randint(2, 6), c.threshold()
    return ([f"Which {pl.en_pl} have {th.en.format(n=n)} {p.en_pl}? Show name and count.",
             f"List {pl.en_pl} with {th.en_after.format(n=n)} {p.en_pl}, with the number."],
            [f"{k(p.ko, '이/가')} {th.ko.format(n=f'{n}명')} {pl.ko}의 이름과 인원수를 알려 주세요.",
             f"{p.ko} 수가 {th.ko.format(n=n)} {k(pl.ko, '을/를')} {p.ko} 수와 함께 보여 주세요."],
            f"SELECT {b}.name, COUNT(*) AS {p.table}_count FROM {c.src('people')}{c.join('place', 'people', 'place')}"
            f" GROUP BY {b}.{pl.key}, {b}.name HAVING COUNT(*) {th.op} {n}")


@template
def spend_of_person(c: Ctx) -> Made:
    p, h, st = c.lay.d.people, c.lay.d.header, c.lay.col("status")
    v = c.one(f"SELECT name FROM {p.table} WHERE {p.key} IN (SELECT {p.key} FROM {h.table})")
    return ([f"How much has {v} spent in total, cancelled {h.en_pl} excluded?",
             f"Total amount (quantity x unit price) of {v}'s non-cancelled {h.en_pl}?"],
            [f"{k(v, '이/가')} 쓴 총금액은 얼마인가요? 취소 건은 빼 주세요.",
             f"취소되지 않은 {v}의 {h.ko} 합계 금액을 알려 주세요."],
            f"SELECT {revenue(c)} AS total_spent FROM {c.src('people')}{c.join('header', 'header', 'people')}"
            f"{c.join('line', 'line', 'header')} WHERE {c.a('people')}.name = '{v}' AND {c.a('header')}.{st} <> "
            f"'cancelled'")


@template
def headers_per_place_in_year(c: Ctx) -> Made:
    h, pl, hd, p = c.lay.d.header, c.lay.place, c.lay.col("h_date"), c.lay.d.people
    b, y = c.a("place"), c.rng.choice((2023, 2024))
    return ([f"How many {h.en_pl} came from each {pl.en} in {y}?",
             f"Per {pl.en} of the {p.en}, how many {h.en_pl} were made in {y}?"],
            [f"{y}년 {pl.ko}별 {h.ko} 건수를 구해 주세요.", f"{y}년에 {pl.ko}마다 {k(h.ko, '이/가')} 몇 건 있었나요?"],
            f"SELECT {b}.name, COUNT(*) AS {h.table}_count FROM {c.src('header')}{c.join('people', 'header', 'people')}"
            f"{c.join('place', 'people', 'place')} WHERE {c.a('header')}.{hd} BETWEEN '{y}-01-01' AND '{y}-12-31' "
            f"GROUP BY {b}.{pl.key}, {b}.name")


@template
def headers_by_tier_and_status(c: Ctx) -> Made:
    p, h, tier, st, hd = c.lay.d.people, c.lay.d.header, c.lay.col("tier"), c.lay.col("status"), c.lay.col("h_date")
    t, v = c.rng.choice(c.lay.d.tier.values), c.rng.choice(c.lay.d.statuses)
    a, b = c.a("header"), c.a("people")
    return ([f"Show the {p.en} name and date of {v} {h.en_pl} made by {t} {p.en_pl}.",
             f"List name and {c.en('h_date')} for {h.en_pl} with {c.en('status')} {v} from {p.en_pl} whose "
             f"{c.en('tier')} is {t}."],
            [f"{c.ko('tier')} {t} {p.ko}의 {v} 상태 {h.ko}에 대해 이름과 날짜를 보여 주세요.",
             f"{k(c.ko('status'), '이/가')} {v}인 {h.ko} 중 {c.ko('tier')} {t} {p.ko}의 이름, 날짜는?"],
            f"SELECT {b}.name, {a}.{hd} FROM {c.src('header')}{c.join('people', 'header', 'people')} "
            f"WHERE {b}.{tier} = '{t}' AND {a}.{st} = '{v}'")


@template
def big_sellers(c: Ctx) -> Made:
    cat = c.lay.d.catalog
    b = c.a("catalog")
    krw = c.rng.choice((100000, 200000, 500000, 1000000)) if c.lay.d.price.values[1] > 50000 else 50000
    x, th = krw // c.lay.currency[2], c.threshold()
    return ([f"Which {cat.en_pl} have revenue of {th.en.format(n=x)}? Show name and revenue.",
             f"{cat.en_pl.capitalize()} whose total sales are {th.en_after.format(n=x)}, with the amount."],
            [f"매출이 {th.ko.format(n=x)} {cat.ko}의 이름과 매출을 알려 주세요.",
             f"총매출이 {th.ko.format(n=x)} {k(cat.ko, '은/는')} 무엇인가요?"],
            f"SELECT {b}.name, {revenue(c)} AS revenue FROM {c.src('line')}{c.join('catalog', 'line', 'catalog')} "
            f"GROUP BY {b}.{cat.key}, {b}.name HAVING {revenue(c)} {th.op} {x}")


@template
def yesterday_per_place(c: Ctx) -> Made:
    pl, h, hd, st = c.lay.place, c.lay.d.header, c.lay.col("h_date"), c.lay.col("status")
    b = c.a("place")
    today = c.one(f"SELECT DATE({hd}, '+1 day') FROM {h.table}")
    return ([f"Today is {today}. What was yesterday's revenue per {pl.en}, cancelled {h.en_pl} excluded?",
             f"As of {today}, give revenue by {pl.en} for yesterday, not counting cancellations."],
            [f"오늘이 {today}일 때 어제 {pl.ko}별 매출을 취소 건 빼고 알려 주세요.",
             f"오늘 날짜가 {today}라면 어제의 {pl.ko}별 매출은? 취소된 {k(h.ko, '은/는')} 제외."],
            f"SELECT {b}.name, {revenue(c)} AS revenue FROM {c.src('header')}{c.join('people', 'header', 'people')}"
            f"{c.join('place', 'people', 'place')}{c.join('line', 'line', 'header')} "
            f"WHERE {c.a('header')}.{hd} = DATE('{today}', '-1 day') AND {c.a('header')}.{st} <> 'cancelled' "
            f"GROUP BY {b}.{pl.key}, {b}.name")


@template
def header_contents(c: Ctx) -> Made:
    h, cat, qty = c.lay.d.header, c.lay.d.catalog, c.lay.col("qty")
    n = c.one(f"SELECT {h.key} FROM {h.table}")
    la, ca = c.a("line"), c.a("catalog")
    return ([f"What is in {h.en} {n}? Show each {cat.en} name and quantity.",
             f"List the {cat.en_pl} and quantities of {h.en} number {n}."],
            [f"{n}번 {h.ko}에 들어 있는 {cat.ko} 이름과 {k('수량', '을/를')} 보여 주세요.",
             f"{h.ko} 번호 {n}의 {cat.ko}별 수량은?"],
            f"SELECT {ca}.name, {la}.{qty} FROM {c.src('line')}{c.join('catalog', 'line', 'catalog')} "
            f"WHERE {la}.{h.key} = {n}")


@template
def buyers_of_item(c: Ctx) -> Made:
    p, cat, d = c.lay.d.people, c.lay.d.catalog, c.lay.d
    v = c.one(f"SELECT name FROM {cat.table} WHERE {cat.key} IN (SELECT {cat.key} FROM {d.line.table})")
    ha, quoted = c.a("header"), f"'{v}'"
    return ([f"How many different {p.en_pl} {d.verb_en} {v}?", f"Count distinct {p.en_pl} who {d.verb_en} '{v}'."],
            [f"{k(v, '을/를')} {d.verb_ko} {k(p.ko, '은/는')} 몇 명인가요? 중복 없이 세어 주세요.",
             f"{k(quoted, '을/를')} {d.verb_ko} 서로 다른 {p.ko} 수는?"],
            f"SELECT COUNT(DISTINCT {ha}.{p.key}) FROM {c.src('line')}{c.join('header', 'line', 'header')}"
            f"{c.join('catalog', 'line', 'catalog')} WHERE {c.a('catalog')}.name = '{v}'")


@template
def tier_counts_per_place(c: Ctx) -> Made:
    p, pl, tier = c.lay.d.people, c.lay.place, c.lay.col("tier")
    t = c.rng.choice(c.lay.d.tier.values)
    a, b = c.a("people"), c.a("place")
    # The filter sits in the ON clause, so a place with no such people still shows up with 0.
    return ([f"For every {pl.en}, how many {p.en_pl} have {c.en('tier')} '{t}'? Include {pl.en_pl} with none.",
             f"Count the {t} {p.en_pl} in each {pl.en}, showing 0 where there are none."],
            [f"{pl.ko}별로 {c.ko('tier')} {t}인 {p.ko} 수를 알려 주세요. 없는 {pl.ko}도 0으로 보여 주세요.",
             f"모든 {pl.ko}에 대해 {k(c.ko('tier'), '이/가')} {t}인 {k(p.ko, '이/가')} 몇 명인지 구해 주세요."],
            f"SELECT {b}.name, COUNT({a}.{p.key}) AS {p.table}_count FROM {c.src('place')} LEFT JOIN {c.src('people')} "
            f"ON {a}.{pl.key} = {b}.{pl.key} AND {a}.{tier} = '{t}' GROUP BY {b}.{pl.key}, {b}.name")
