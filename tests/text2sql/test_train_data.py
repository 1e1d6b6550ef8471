"""The adapter's training data: every gold query runs on its own generated database and returns rows,
the prompts are exactly the evaluation's, and nothing of the shipped eval set (schema, table, question)
appears in it."""

import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from integrations.text2sql.dataset import load_eval
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.sources import Source
from integrations.text2sql.training import (
    train_data,
    train_edge_templates,
    train_history_templates,
    train_path_templates,
    train_table_templates,
)
from integrations.text2sql.training.korean_particles import attach, final_consonant
from integrations.text2sql.training.train_domains import DOMAINS, HISTORIES, PLACES
from integrations.text2sql.training.train_schema import ROLES, Layout, column_catalog, create, ddl
from integrations.text2sql.training.train_templates import Ctx


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train-dbs")
    # One schema per domain, so every domain's tables and templates are exercised.
    return train_data.generate(len(DOMAINS), per_schema=30, seed=7, db_dir=folder), folder


def test_every_gold_query_runs_on_its_database_and_returns_rows(generated):
    examples, folder = generated
    assert len(examples) > 10 * len(DOMAINS)
    for ex in examples:
        con = sqlite3.connect(f"file:{folder / ex.schema}.sqlite?mode=ro", uri=True)
        try:
            assert con.execute(ex.sql).fetchall(), ex.sql
        finally:
            con.close()


def test_both_languages_and_many_kinds_of_query(generated):
    examples, _ = generated
    assert {e.lang for e in examples} == {"ko", "en"}
    sql = " ".join(e.sql for e in examples)
    for kind in ("COUNT(*)", "GROUP BY", "HAVING", " JOIN ", "ORDER BY", "LIMIT", "BETWEEN", "NOT IN", "AVG(",
                 "LEFT JOIN", "IS NULL", "DATE(", "STRFTIME(", "DISTINCT", "<> 'cancelled'", " IN ('"):
        assert kind in sql, kind
    assert re.search(r"SUM\(\w+\.\w+ \* \w+\.\w+\)", sql)  # revenue as SUM(quantity * unit_price)
    for lang in ("ko", "en"):  # Korean as varied as English, not one template
        shapes = {re.sub(r"[0-9]+", "N", e.question.split(" ")[0]) for e in examples if e.lang == lang}
        assert len(shapes) > 20, lang


def test_about_half_each_language_and_most_joining(generated):
    examples, _ = generated
    ko = sum(e.lang == "ko" for e in examples) / len(examples)
    assert 0.4 <= ko <= 0.6
    joins = [e.sql.count(" JOIN ") for e in examples]
    assert sum(j > 0 for j in joins) / len(joins) >= 0.4  # the role and edge templates' joins
    assert sum(j >= 2 for j in joins) / len(joins) >= 0.07  # three tables or more: role templates, 45% of draws
    assert max(joins) >= 3  # people -> header -> line -> catalog


def test_having_thresholds_say_more_than_for_greater_and_at_least_for_greater_or_equal(generated):
    """Every group threshold once said "at least", and the adapter wrote ``>=`` for "more than" too."""
    examples, _ = generated
    having = [e for e in examples if " HAVING " in e.sql]
    ops = {re.search(r"HAVING .*? (>=|>) ", e.sql).group(1) for e in having}
    assert ops == {">", ">="}
    for e in having:
        strict = re.search(r"HAVING .*? > ", e.sql) is not None
        words = ("more than", "over ", "초과", "넘게") if strict else ("at least", "or more", "이상")
        assert any(w in e.question for w in words), (e.question, e.sql)


def test_korean_particles_follow_the_final_consonant():
    assert [attach(w, "은/는") for w in ("회원", "요금제", "Seoul", "3")] == ["회원은", "요금제는", "Seoul은", "3은"]
    assert [attach(w, "이/가") for w in ("요금제", "상태", "'gold'", "2")] == ["요금제가", "상태가", "'gold'가", "2가"]
    assert [attach(w, "을/를") for w in ("가격", "수량", "bank")] == ["가격을", "수량을", "bank을"]
    assert [attach(w, "과/와") for w in ("이름", "날짜")] == ["이름과", "날짜와"]
    # 로 after a vowel and after ㄹ, 으로 after any other final consonant.
    assert [attach(w, "으로/로") for w in ("서울", "부산", "바다", "7", "6")] == ["서울로", "부산으로", "바다로", "7로",
                                                                              "6으로"]
    assert final_consonant("값") and not final_consonant("")


def test_no_wrong_particle_after_a_korean_noun(generated):
    examples, _ = generated
    pairs = (("이", "가"), ("은", "는"), ("을", "를"), ("과", "와"))
    nouns = {getattr(d, role).ko for d in DOMAINS for role in ROLES if role not in ("place", "history")}
    nouns |= {n for d in DOMAINS for n in (d.tier.ko, d.category.ko, d.price.ko, d.size.ko)}
    nouns |= {p.ko for p in PLACES} | {"상태", "가입일", "날짜", "입사일", "별점", "수량"}
    nouns |= {"단가", "완료일", "이름", "번호", "점수", "메모"}  # the schema-agnostic templates' column words
    nouns |= {h.ko for h, *_ in HISTORIES} | {words[-1] for _, *words in HISTORIES}
    for ex in (e for e in examples if e.lang == "ko"):
        for noun in nouns:
            for with_final, without in pairs:
                wrong = without if final_consonant(noun) else with_final
                assert f"{noun}{wrong} " not in ex.question, (noun, ex.question)


def test_prompts_are_the_evaluation_prompts(generated):
    examples, folder = generated
    # only its prompt() is used; with the value hints the trained adapter is asked with
    gen = SQLGenerator(complete=lambda prompt, guided: "", value_hints=True)
    assert sum(1 for ex in examples if ex.hints) >= 5
    for ex in examples[:: max(1, len(examples) // 12)] + [ex for ex in examples if ex.hints][:6]:
        source = Source(ex.schema, f"sqlite:///{folder / ex.schema}.sqlite")
        assert ex.prompt() == gen.prompt(source, ex.question)
        source.close()


def test_gold_queries_fit_the_grammar_the_adapter_is_asked_under(generated):
    """Training and serving agree: the typed, key-joined, alias-free grammar admits the golds (all but
    the few that need a table twice, which only aliases can write). No training column is named by a
    keyword either: the grammar writes those quoted (``"plan"``), the way the model never saw them."""
    import xgrammar as xgr

    from integrations.text2sql.adapter import SHIPPED, adapter_style
    from integrations.text2sql.schema import quote_ident

    examples, folder = generated
    options = adapter_style(SHIPPED).grammar
    assert options is not None and options.typed_comparisons and options.foreign_key_joins
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    compiled, refused = {}, []
    sample = examples[:: max(1, len(examples) // 80)]
    for ex in sample:
        if ex.schema not in compiled:
            source = Source(ex.schema, f"sqlite:///{folder / ex.schema}.sqlite")
            compiled[ex.schema] = compiler.compile_grammar(source.grammar(options))
            source.close()
        m = xgr.GrammarMatcher(compiled[ex.schema], terminate_without_stop_token=True)
        if not (m.accept_string(ex.sql + ";") and m.is_terminated()):
            refused.append(ex.sql)
    assert all(" AS " in sql.split(" FROM ", 1)[1] for sql in refused), refused
    assert len(refused) <= len(sample) // 20, refused
    for db in folder.glob("*.sqlite"):
        con = sqlite3.connect(db)
        try:
            names = [(t, c) for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                     for c in [row[1] for row in con.execute(f"PRAGMA table_info({t})")]]
        finally:
            con.close()
        assert all(quote_ident(n) == n for pair in names for n in pair), [p for p in names if quote_ident(p[1]) != p[1]]


def test_disjoint_from_the_eval_set(generated):
    examples, _ = generated
    schemas, tables, questions = train_data.eval_names()
    assert {"shop", "hr", "school", "library", "delivery"} <= schemas and "customers" in tables
    train_data.check_disjoint(examples)  # raises on any overlap
    for d in DOMAINS:  # every domain and every place table, not only the ones sampled above
        assert not {getattr(d, role).table for role in ROLES if role not in ("place", "history")} & tables
    assert not {p.table for p in PLACES} & tables and not {h.table for h, *_ in HISTORIES} & tables
    assert len(DOMAINS) >= 14
    used = {train_data._norm(e.question) for e in examples}
    assert not used & questions


def test_check_disjoint_refuses_an_eval_question_or_table():
    ex = train_data.generate(1, per_schema=3, seed=1)[0]
    item = load_eval()[0]
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example(ex.schema, item.lang, f"  {item.question.upper()} ", ex.sql,
                                                      ex.ddl)])
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example(ex.schema, ex.lang, ex.question, ex.sql,
                                                      ex.ddl + "\n\nCREATE TABLE Customers (id INTEGER);")])
    with pytest.raises(ValueError, match="overlaps"):
        train_data.check_disjoint([train_data.Example("shop", ex.lang, ex.question, ex.sql, ex.ddl)])


def _schemas_with_every_table(n: int) -> list[Layout]:
    """Layouts (one per domain, as far as ``n`` goes) that have the optional staff and rating tables."""
    out = []
    for d in DOMAINS[:n]:
        every = {"staff", "rating", "history"}
        seed = next(s for s in range(200) if every <= set(Layout("x", d, random.Random(s)).order))
        out.append(Layout(f"{d.name}_every", d, random.Random(seed)))
    return out


def test_column_catalog_is_the_created_database():
    for lay in _schemas_with_every_table(len(DOMAINS)):
        con = sqlite3.connect(":memory:")
        create(con, lay)
        tables = column_catalog(lay)
        assert [t.role for t in tables] == lay.order and set(lay.order) == set(ROLES)
        for t in tables:
            info = con.execute(f"PRAGMA table_info({t.table})").fetchall()
            assert [row[1] for row in info] == [col.name for col in t.columns]
            for col, row in zip(t.columns, info, strict=True):
                assert col.nullable == (not row[3] and not row[5]), (t.table, col.name)  # NOT NULL or the key
                if col.kind == "enum":
                    used = {v for (v,) in con.execute(f"SELECT DISTINCT {col.name} FROM {t.table}")}
                    assert used <= set(col.values), (t.table, col.name)
                assert col.en and col.ko
        con.close()


def test_tables_carry_extra_attribute_columns_that_templates_ask_about():
    """Beyond each role's own columns, schemas draw a member's own city, an event's fee or weight, a staff
    member's position...; their cities are not the place table's, so a value names one column."""
    from integrations.text2sql.training.train_columns import EXTRAS

    drawn: dict[str, set[str]] = {}
    asked = set()
    for seed in range(40):
        lay = Layout("x", DOMAINS[seed % len(DOMAINS)], random.Random(seed))
        con = sqlite3.connect(":memory:")
        create(con, lay)
        places = {name for (name,) in con.execute(f"SELECT name FROM {lay.place.table}")}
        for t in column_catalog(lay):
            names = [col.name for col in t.columns]
            assert len(names) == len(set(names)), t.table
            for x in lay.extras.get(t.role, ()):
                drawn.setdefault(t.role, set()).add(x.spec.en)
                if x.spec.kind == "city":
                    assert x.spec.ko != lay.place.ko
                    values = {v for (v,) in con.execute(f"SELECT DISTINCT {x.name} FROM {t.table}")}
                    assert values and not values & places, (t.table, x.name)
        ctx = Ctx(lay, con, lay.rng)
        extra_names = {x.name for xs in lay.extras.values() for x in xs}
        for make in train_table_templates.TEMPLATES * 4:
            made = make(ctx)
            if made is not None:
                con.execute(made[2]).fetchall()
                asked |= {name for name in extra_names if re.search(rf"\b{name}\b", made[2])}
        con.close()
    assert set(drawn) == set(EXTRAS)  # every role gets some
    assert sum(len(v) for v in drawn.values()) >= 20 and len(asked) >= 15


def test_small_number_ranges_are_checked_and_bare_values_name_one_column():
    """A level of 1 to 5 reads as CHECK (level BETWEEN 1 AND 5) where the schema writes CHECKs, and its
    rows stay inside; a value two columns of one table may hold (two Y/N flags, two city columns) is
    always said with its column's word, never bare."""
    checked, guarded = 0, 0
    for seed in range(60):
        lay = Layout("x", DOMAINS[seed % len(DOMAINS)], random.Random(seed))
        con = sqlite3.connect(":memory:")
        create(con, lay)
        tables = {t.table: t for t in column_catalog(lay)}
        for t in column_catalog(lay):
            for x in lay.extras.get(t.role, ()):
                if x.spec.check and lay.checks:
                    low, high = x.spec.values
                    assert f"{x.name} INTEGER NOT NULL CHECK ({x.name} BETWEEN {low} AND {high})" in \
                        ddl(lay)
                    (lo, hi), = con.execute(f"SELECT MIN({x.name}), MAX({x.name}) FROM {t.table}")
                    assert low <= lo <= hi <= high
                    checked += 1
        ctx = Ctx(lay, con, random.Random(seed))
        for t in tables.values():
            for col in t.of("enum"):
                for _ in range(6):
                    cond = train_table_templates.condition(ctx, t, col)
                    if cond is None or " IN (" in cond.sql:
                        continue
                    value = cond.sql.split(" = ")[1].strip("'")
                    if any(value in o.values for o in t.columns if o is not col):
                        guarded += 1
                        assert all(col.en in e for e in cond.en) and all(col.ko in q for q in cond.ko), cond
        con.close()
    assert checked >= 5 and guarded >= 20


def test_table_templates_cover_every_table_with_golds_that_run():
    seen_roles, seen_templates = set(), set()
    for lay in _schemas_with_every_table(5):
        con = sqlite3.connect(":memory:")
        create(con, lay)
        ctx, role_of = Ctx(lay, con, lay.rng), {t.table: t.role for t in column_catalog(lay)}
        for make in train_table_templates.TEMPLATES * 12:
            made = make(ctx)
            if made is None:
                continue
            en, ko, sql = made
            assert 2 <= len(en) <= 4 and 2 <= len(ko) <= 4, make.__name__
            assert " JOIN " not in sql and " AS " not in sql.split(" FROM ")[1], sql  # one table, no alias
            con.execute(sql).fetchall()  # raises on a broken gold
            (table,) = re.findall(r" FROM (\w+)", sql)
            seen_roles.add(role_of[table])
            seen_templates.add(make.__name__)
            # A question names its table by its noun.
            noun = next(t for t in column_catalog(lay) if t.table == table)
            assert all(noun.en in q or noun.en_pl in q for q in en), en
            assert all(noun.ko in q for q in ko), ko
        con.close()
    assert seen_roles == set(ROLES)
    assert seen_templates == {t.__name__ for t in train_table_templates.TEMPLATES}


def test_table_templates_name_the_filtered_column_by_its_words_or_its_value():
    lay = _schemas_with_every_table(1)[0]
    con = sqlite3.connect(":memory:")
    create(con, lay)
    ctx = Ctx(lay, con, lay.rng)
    bare = lists = 0
    for _ in range(200):
        got = train_table_templates.filtered(ctx, lookup=True)
        if got is None:
            continue
        t, col, cond = got
        assert cond.sql.startswith(col.name + " ")
        if all(col.en in e for e in cond.en) and all(col.ko in q for q in cond.ko):
            continue
        # a text filter said by its value alone (or two or three of them): the value hints name the column
        values = re.findall(r"'([^']*)'", cond.sql.split(" IN ", 1)[1]) if " IN (" in cond.sql else \
            [cond.sql.split(" = ", 1)[1].strip("'")]
        assert col.kind in ("enum", "text") and all(v in q for v in values for q in cond.en + cond.ko), cond
        bare += 1
        lists += len(values) > 1
    assert bare > 0 and lists > 0
    con.close()


def test_edge_templates_join_any_foreign_key_with_golds_that_run():
    """Every edge (a child's key column and its parent) is asked about, by both tables' own words."""
    seen_edges, seen_templates, all_edges = set(), set(), set()
    for lay in _schemas_with_every_table(5):
        con = sqlite3.connect(":memory:")
        create(con, lay)
        ctx = Ctx(lay, con, lay.rng)
        nouns = {t.table: t for t in column_catalog(lay)}
        all_edges |= {(e.child.role, e.parent.role) for e in train_edge_templates.edges(ctx)}
        for make in train_edge_templates.TEMPLATES * 12:
            made = make(ctx)
            if made is None:
                continue
            en, ko, sql = made
            assert 2 <= len(en) <= 4 and 2 <= len(ko) <= 4, make.__name__
            con.execute(sql).fetchall()  # raises on a broken gold; train_data drops empty answers
            (child, parent, key, key_again), = re.findall(r"FROM (\w+) JOIN (\w+) ON \1\.(\w+) = \2\.(\w+)", sql)
            assert key == key_again == next(c.name for c in nouns[parent].of("key")), sql
            assert " AS " not in sql.split(" FROM ")[1], sql  # columns named by table, no alias
            seen_edges.add((nouns[child].role, nouns[parent].role))
            seen_templates.add(make.__name__)
            # The child by its noun; the parent by its noun, or by the name of one of its rows ("belong to
            # 정하준"), whose column the prompt's value hints then show.
            t, p = nouns[child], nouns[parent]
            assert all(t.en in q or t.en_pl in q for q in en), (t.en, en)
            assert all(t.ko in q for q in ko), (t.ko, ko)
            value = re.findall(r"= '([^']*)'$", sql)
            assert all(p.en in q or p.en_pl in q or value and value[0] in q for q in en), (p.en, en)
            assert all(p.ko in q or value and value[0] in q for q in ko), (p.ko, ko)
        con.close()
    assert seen_edges == all_edges and len(all_edges) >= 6
    assert seen_templates == {t.__name__ for t in train_edge_templates.TEMPLATES}


def test_path_templates_join_through_the_table_no_word_names():
    """Two keys in a row (child -> middle -> far end): the golds join on both declared keys, run, and the
    question names the child and the far end only."""
    seen_templates, seen_paths = set(), set()
    for lay in _schemas_with_every_table(5):
        con = sqlite3.connect(":memory:")
        create(con, lay)
        ctx = Ctx(lay, con, lay.rng)
        nouns = {t.table: t for t in column_catalog(lay)}
        for make in train_path_templates.TEMPLATES * 12:
            made = make(ctx)
            if made is None:
                continue
            en, ko, sql = made
            con.execute(sql).fetchall()
            (child, mid, k1, k1b, top, left, k2, k2b), = re.findall(
                r"FROM (\w+) JOIN (\w+) ON \1\.(\w+) = \2\.(\w+) JOIN (\w+) ON (\w+)\.(\w+) = \5\.(\w+)", sql)
            assert left == mid and top not in (child, mid) and k1 == k1b and k2 == k2b, sql
            assert k1 == next(c.name for c in nouns[mid].of("key")) and k2 == next(c.name for c in nouns[top].of("key"))
            ch, far = nouns[child], nouns[top]
            assert all(ch.en in q or ch.en_pl in q for q in en) and all(ch.ko in q for q in ko), en + ko
            value = re.findall(r"= '([^']*)'$", sql)
            assert all(far.en in q or far.en_pl in q or value and value[0] in q for q in en), en
            seen_templates.add(make.__name__)
            seen_paths.add((ch.role, nouns[mid].role, far.role))
        con.close()
    assert seen_templates == {t.__name__ for t in train_path_templates.TEMPLATES}
    assert {("line", "header", "people"), ("rating", "header", "people"), ("line", "header", "staff")} <= seen_paths
    # a header's people and its staff both have a place: "per place" would not say which, so neither is asked
    assert not {p for p in seen_paths if p[0] == "header" and p[2] == "place"}


def test_history_templates_read_current_as_an_open_period():
    """A pay history's current row is the one whose end date is NULL: every "current" question says so in
    its gold, every gold runs, and schemas without the table get no such question."""
    seen = set()
    for lay in _schemas_with_every_table(4):
        con = sqlite3.connect(":memory:")
        create(con, lay)
        ctx = Ctx(lay, con, lay.rng)
        until = lay.col("to")
        for make in train_history_templates.TEMPLATES * 8:
            made = make(ctx)
            if made is None:
                continue
            en, ko, sql = made
            assert con.execute(sql).fetchall(), sql
            if make.__name__ != "several_periods":
                assert f"{until} IS NULL" in sql and all("current" in q or "now" in q for q in en), (en, sql)
                assert all("현재" in q or "지금" in q for q in ko), ko
            seen.add(make.__name__)
        con.close()
    assert seen == {t.__name__ for t in train_history_templates.TEMPLATES}
    lay = next(Layout("x", DOMAINS[0], random.Random(s)) for s in range(100)
               if "history" not in Layout("x", DOMAINS[0], random.Random(s)).order)
    con = sqlite3.connect(":memory:")
    create(con, lay)
    assert all(make(Ctx(lay, con, lay.rng)) is None for make in train_history_templates.TEMPLATES)


def test_shares_of_the_schema_agnostic_families(generated):
    examples, _ = generated
    for family, low, high in ((train_data.TABLE_TEMPLATES, 0.2, 0.4), (train_data.EDGE_TEMPLATES, 0.15, 0.35),
                              (train_data.PATH_TEMPLATES, 0.05, 0.2)):
        names = {t.__name__ for t in family}
        share = sum(e.template in names for e in examples) / len(examples)
        assert low <= share <= high, (family, share)
    assert all(e.template for e in examples)


def test_a_seed_gives_the_same_file_in_every_process(tmp_path):
    """Python salts string hashes per process; nothing generated may depend on a set's order."""
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"h{hash_seed}.jsonl"
        subprocess.run([sys.executable, "-m", "integrations.text2sql.training.train_data", str(out), "--schemas", "3",
                        "--per-schema", "8"], check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed},
                       cwd=Path(__file__).resolve().parents[2], capture_output=True)
        outs.append(out.read_text(encoding="utf-8"))
    assert outs[0] == outs[1] and outs[0].count("\n") >= 12


def test_round_thresholds_and_korean_myriads():
    from integrations.text2sql.training.train_table_templates import korean_amount, nice

    assert [nice(x) for x in (7, 99, 1234, 987654, 2_049_000_000)] == [7, 99, 1200, 990000, 2_000_000_000]
    assert korean_amount(2_000_000_000) == "20억" and korean_amount(35_000) == "3만 5천"
    assert korean_amount(2_100_000) == "210만" and korean_amount(100_010_000) == "1억 1만"
    assert korean_amount(123_456) is None and korean_amount(5000) is None


def test_shards_number_their_schemas_apart():
    first = train_data.generate(2, per_schema=3, seed=1)
    second = train_data.generate(2, per_schema=3, seed=2, start=2)
    assert {e.schema for e in first} == {f"{d.name}_{k}" for k, d in enumerate(DOMAINS[:2])}
    assert {e.schema for e in second} == {f"{d.name}_{k}" for k, d in enumerate(DOMAINS[:4]) if k >= 2}
