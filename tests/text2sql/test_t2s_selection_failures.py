"""Execution-guided selection when parts of it fail: a sample's model call, every candidate's query,
values that cannot be hashed, a value built to exhaust memory."""

import asyncio

import pytest

from integrations.text2sql.ask import run_sql
from integrations.text2sql.errors import ExecutionError, GenerationError
from integrations.text2sql.execute import run_query
from integrations.text2sql.generate import SQLGenerator
from integrations.text2sql.gold_order import normalise_row
from integrations.text2sql.selection import aask_selected, choose, result_key
from integrations.text2sql.sources import demo_source

COUNT = "SELECT COUNT(*) FROM customers"


def scripted(*answers):
    """An async model whose n-th call answers answers[n]; an exception there is raised (a failed call)."""
    it = iter(answers)

    async def complete(prompt, guided):
        answer = next(it)
        if isinstance(answer, BaseException):
            raise answer
        if answer == "slow":
            await asyncio.sleep(30)
        return answer + ";"
    return SQLGenerator(acomplete=complete)


@pytest.mark.parametrize("when", ["always", "doubt"])
def test_a_sample_whose_model_call_failed_is_a_candidate_fewer(when):
    shop = demo_source("shop")
    greedy = "SELECT nope FROM customers" if when == "doubt" else COUNT  # on doubt: a greedy query that fails
    res = asyncio.run(aask_selected(shop, "How many customers?", scripted(greedy),
                                    scripted(COUNT, RuntimeError("upstream 500"), COUNT), 4, when=when))
    assert res.selection["candidates"] == 3 and res.selection["requested"] == 4
    assert res.sql.startswith(COUNT) and res.rows[0][0] > 0


def test_a_failed_greedy_call_fails_the_question_and_stops_the_samples():
    shop = demo_source("shop")
    sampler = scripted("slow", "slow")

    async def ask():
        start = asyncio.get_running_loop().time()
        with pytest.raises(GenerationError):
            await aask_selected(shop, "How many customers?", scripted(RuntimeError("at capacity")), sampler, 3)
        await asyncio.sleep(0)
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return asyncio.get_running_loop().time() - start, pending

    took, pending = asyncio.run(ask())
    assert took < 10 and pending == []  # the two 30-second samples were cancelled, not awaited


def test_when_nothing_runs_an_unsafe_greedy_query_does_not_outrank_a_safe_candidate():
    shop = demo_source("shop")
    results = [run_sql(shop, "DELETE FROM customers"), run_sql(shop, "SELECT nope FROM customers")]
    assert results[0].error.code == "unsafe_sql" and not results[1].executed
    assert choose(results) == (1, 0)
    assert choose(results[:1]) == (0, 0)  # all unsafe: the greedy one, refused as before


def test_rows_holding_lists_and_dicts_are_compared_and_counted():
    """PostgreSQL's arrays and JSON come back as lists and dicts, which cannot be hashed."""
    assert normalise_row([[1, 2], {"b": 1, "a": 2}, 0.123456]) == ("[1, 2]", '{"a": 2, "b": 1}', 0.1235)

    class Ran:  # the part of an AskResult that selection reads
        ok = executed = True
        error = None

        def __init__(self, rows):
            self.rows = rows

    a, b, c = Ran([([1, 2], {"k": 1})]), Ran([([1, 2], {"k": 1})]), Ran([([3], {"k": 1})])
    assert result_key(a) == result_key(b) != result_key(c)
    assert choose([c, a, b]) == (1, 2)


def test_one_value_cannot_grow_past_the_cap_and_outrun_the_time_limit():
    """SQLite checks the time limit between steps, and randomblob() builds its value in one: without a cap a
    query took a second and 400 MB under a 0.2 s limit."""
    shop = demo_source("shop")
    with pytest.raises(ExecutionError, match="too big"):
        run_query(shop, "SELECT length(randomblob(400000000))", timeout_s=0.2)
    assert run_query(shop, "SELECT length(randomblob(1000000))").rows == [(1000000,)]
