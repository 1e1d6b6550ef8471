"""Implausible candidates (an id summed, a column compared with itself) rank below plausible ones in
execution-guided selection, on the real demo databases."""

from integrations.text2sql.ask import run_sql
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.plausibility import implausible, key_columns
from integrations.text2sql.selection import ask_selected, choose, flag
from integrations.text2sql.sources import demo_source

TOP_BRANCH = ("SELECT branches.name, {agg} AS n FROM loans JOIN branches ON loans.branch_id = branches.branch_id "
              "GROUP BY branches.branch_id, branches.name ORDER BY n DESC LIMIT 1")


def test_implausible_marks_ids_summed_and_columns_compared_with_themselves():
    schema = demo_source("library").schema()
    assert {"loan_id", "book_id", "branch_id", "author_id"} <= key_columns(schema)
    assert "pages" not in key_columns(schema)
    flagged = {
        TOP_BRANCH.format(agg="SUM(loans.loan_id)"): "SUM over the key column loans.loan_id",
        "SELECT AVG(book_id) FROM loans": "AVG over the key column book_id",
        "SELECT total(loan_id) FROM loans": "TOTAL over the key column loan_id",
        "SELECT title FROM books WHERE books.book_id = books.book_id": "compares a column with itself",
        "SELECT COUNT(*) FROM loans WHERE due_date > due_date": "compares a column with itself",
        "SELECT name FROM members WHERE joined_on BETWEEN name AND name": "bounds a range by one column",
    }
    for sql, why in flagged.items():
        found = implausible(sql, schema)
        assert len(found) == 1 and why in found[0], (sql, found)
    for sql in (TOP_BRANCH.format(agg="COUNT(*)"), "SELECT SUM(pages) FROM books",
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
