"""Implausible candidates (an id or a string length summed, a column compared with itself) rank below plausible ones in
execution-guided selection, on the real demo databases."""

import asyncio
from collections import Counter

import pytest

from integrations.text2sql.ask import run_sql
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.plausibility import implausible
from integrations.text2sql.selection import aask_selected, ask_selected, choose, flag
from integrations.text2sql.sources import demo_source

TOP_BRANCH = ("SELECT branches.name, {agg} AS n FROM loans JOIN branches ON loans.branch_id = branches.branch_id "
              "GROUP BY branches.branch_id, branches.name ORDER BY n DESC LIMIT 1")


def test_implausible_marks_ids_summed_and_columns_compared_with_themselves():
    schema = demo_source("library").schema()
    assert {"loan_id", "book_id", "branch_id", "author_id"} <= schema.key_columns()
    assert "pages" not in schema.key_columns()
    flagged = {
        TOP_BRANCH.format(agg="SUM(loans.loan_id)"): "SUM over the key column loans.loan_id",
        "SELECT AVG(book_id) FROM loans": "AVG over the key column book_id",
        "SELECT total(loan_id) FROM loans": "TOTAL over the key column loan_id",
        TOP_BRANCH.format(agg="SUM(length(loans.loan_date))"): "SUM over a string length or position",
        "SELECT AVG(instr(title, 'a') + 1) FROM books": "AVG over a string length or position",
        "SELECT title FROM books WHERE books.book_id = books.book_id": "compares a column with itself",
        "SELECT COUNT(*) FROM loans WHERE due_date > due_date": "compares a column with itself",
        "SELECT name FROM members WHERE joined_on BETWEEN name AND name": "bounds a range by one column",
    }
    for sql, why in flagged.items():
        found = implausible(sql, schema)
        assert len(found) == 1 and why in found[0], (sql, found)
    for sql in (TOP_BRANCH.format(agg="COUNT(*)"), "SELECT SUM(pages) FROM books",
                "SELECT title, LENGTH(title) FROM books ORDER BY LENGTH(title) DESC LIMIT 1",
                "SELECT COUNT(*) FROM loans WHERE returned_on > due_date",
                "SELECT loan_id FROM loans WHERE '2024-06-01' BETWEEN loan_date AND due_date",
                "SELECT b.title FROM books AS b JOIN authors AS a ON b.author_id = a.author_id",
                "not sql at all ("):
        assert implausible(sql, schema) == [], sql


def test_a_plausible_result_outranks_more_votes_for_an_implausible_one():
    library = demo_source("library")
    schema = library.schema()
    sqls = [TOP_BRANCH.format(agg="SUM(loans.loan_id)"),  # greedy and sampled twice: the id sum
            TOP_BRANCH.format(agg="SUM(loan_id)"),
            TOP_BRANCH.format(agg="COUNT(*)")]  # once: the count the question asked for
    results = [run_sql(library, s) for s in sqls]
    assert results[0].rows != results[2].rows and all(r.rows for r in results)
    assert choose(results) == (0, 2)  # by votes alone the id sum wins
    assert flag(results, schema) == [0, 1]
    assert choose(results, flag(results, schema)) == (2, 1)

    # Same rows: the group wins on its votes, and answers with its plausible member.
    same = [run_sql(library, "SELECT title FROM books WHERE books.book_id = books.book_id AND genre = 'sf'"),
            run_sql(library, "SELECT title FROM books WHERE genre = 'sf'"),
            run_sql(library, "SELECT title FROM books WHERE genre = 'fantasy'")]
    assert choose(same, flag(same, schema)) == (1, 2)
    # Data still comes first: a plausible empty answer loses to an implausible one with rows.
    empty = [run_sql(library, "SELECT COUNT(*) FROM loans WHERE due_date > due_date"),
             run_sql(library, "SELECT title FROM books WHERE genre = 'no such genre'")]
    assert choose(empty, flag(empty, schema)) == (0, 1)


def test_ask_selected_reports_the_implausible_candidates_and_answers_with_a_plausible_one():
    library = demo_source("library")
    greedy = SQLGenerator(lambda prompt, guided: TOP_BRANCH.format(agg="SUM(loans.loan_id)") + ";")
    samples = iter([TOP_BRANCH.format(agg="SUM(loans.loan_id)"), TOP_BRANCH.format(agg="COUNT(*)")])
    sampler = SQLGenerator(lambda prompt, guided: next(samples) + ";")
    res = ask_selected(library, "Which branch handled the most loans?", greedy, sampler, 3)
    assert res.selection["implausible"] == [0, 1]
    assert res.selection["chosen"] == 2 and "COUNT(*)" in res.sql and res.ok


def _scripted(*sqls):
    """A generator answering with ``sqls`` in turn; it fails the test when asked once more."""
    it = iter(sqls)
    return SQLGenerator(lambda prompt, guided: next(it) + ";")


def test_sampling_on_doubt_only_when_the_greedy_answer_is_doubtful():
    library = demo_source("library")
    question = "Which branch handled the most loans?"
    sound = ask_selected(library, question, _scripted(TOP_BRANCH.format(agg="COUNT(*)")), _scripted(), 3,
                         when="doubt")  # the sampler is never called
    assert sound.ok and sound.selection["candidates"] == 1 and sound.selection["requested"] == 3
    assert sound.selection["when"] == "doubt" and sound.selection["chosen"] == 0

    doubts = {"implausible": TOP_BRANCH.format(agg="SUM(loans.loan_id)"),
              "empty": "SELECT name FROM branches WHERE city = 'no such city'",
              "does not run": "SELECT no_such_column FROM branches"}
    for why, greedy in doubts.items():
        res = ask_selected(library, question, _scripted(greedy),
                           _scripted(TOP_BRANCH.format(agg="COUNT(*)"), TOP_BRANCH.format(agg="COUNT(*)")), 3,
                           when="doubt")
        assert res.selection["candidates"] == 3 and res.selection["chosen"] == 1, why
        assert "COUNT(*)" in res.sql and res.selection["sql"][0].startswith(greedy.split(" FROM")[0]), why

    # Without execution there are no rows to doubt: the greedy query stands alone.
    plan_only = ask_selected(library, question, _scripted(doubts["empty"]), _scripted(), 3, when="doubt",
                             execute=False)
    assert plan_only.selection["candidates"] == 1
    with pytest.raises(ValueError, match="sample_when"):
        ask_selected(library, question, _scripted(), _scripted(), 3, when="sometimes")


def test_async_sampling_on_doubt():
    library = demo_source("library")

    def scripted(*sqls):
        it = iter(sqls)

        async def complete(prompt, guided):
            return next(it) + ";"
        return SQLGenerator(acomplete=complete)

    question = "Which branch handled the most loans?"
    res = asyncio.run(aask_selected(library, question, scripted(TOP_BRANCH.format(agg="SUM(loan_id)")),
                                    scripted(*[TOP_BRANCH.format(agg="COUNT(*)")] * 2), 3, when="doubt"))
    assert res.selection["candidates"] == 3 and res.selection["implausible"] == [0] and "COUNT(*)" in res.sql
    res = asyncio.run(aask_selected(library, question, scripted(TOP_BRANCH.format(agg="COUNT(*)")), scripted(), 3,
                                    when="doubt"))
    assert res.selection["candidates"] == 1 and res.timings["generation_ms"] >= 0


def test_eval_samples_on_doubt_only_for_doubtful_greedy_answers():
    from integrations.text2sql.dataset import load_eval, render_prompt, schema_ddl
    from integrations.text2sql.training.evaluate import evaluate

    items = load_eval()[:8]
    gold = {render_prompt(schema_ddl(i.schema), i.question): i.sql for i in items}
    asked = []
    perfect = SQLGenerator(lambda prompt, guided: gold[prompt] + ";")
    sampler = SQLGenerator(lambda prompt, guided: asked.append(prompt) or "SELECT 1;")
    mode = evaluate(perfect, items, ["adapter+doubt"], latency_samples=1, adapter=perfect, sampler=sampler,
                    k=3).modes[0]
    assert mode.matched == 8 and asked == []  # every gold answer runs, holds data and is plausible
    wrong = SQLGenerator(lambda prompt, guided: "SELECT COUNT(*) FROM no_such_table;")
    mode = evaluate(perfect, items, ["adapter+doubt"], latency_samples=0, adapter=wrong, sampler=perfect,
                    k=3).modes[0]
    assert mode.matched == 8  # every greedy answer failed, so each question got two samples: the gold
    assert mode.reachable == 8


def test_eval_counts_questions_a_candidate_got_right_though_selection_chose_another():
    """``reachable`` (pass@k) is selection's ceiling: here a wrong answer outvotes the gold 2 to 1."""
    from integrations.text2sql.dataset import load_eval, render_prompt, schema_ddl
    from integrations.text2sql.training.evaluate import evaluate

    items = load_eval()[:8]
    gold = {render_prompt(schema_ddl(i.schema), i.question): i.sql for i in items}
    drawn: Counter[str] = Counter()

    def gold_first(prompt, guided):  # each question's first sample is its gold, the second the greedy answer
        drawn[prompt] += 1
        return (gold[prompt] if drawn[prompt] == 1 else "SELECT 'no such answer'") + ";"

    wrong = SQLGenerator(lambda prompt, guided: "SELECT 'no such answer';")
    mode = evaluate(wrong, items, ["adapter+select"], latency_samples=0, adapter=wrong,
                    sampler=SQLGenerator(gold_first), k=3).modes[0]
    assert (mode.matched, mode.reachable) == (0, 8) and mode.reachable_rate == 1.0
