"""Rate limits per API key across two replicas on one database (SQLite file, then a real PostgreSQL
server): the `x-ratelimit-*` headers count down whichever replica answers, a key over its requests
or its tokens per minute gets OpenAI's 429 from either replica, and `sllm keys usage` lists what
every replica recorded. Two in-process servers on a tiny random model each (cheap to load)."""

import io
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, redirect_stdout
from pathlib import Path

import openai
import pytest

from engine.loader import resolve_model
from gateway.cli import create_key, key_usage
from gateway.limits.rate_limits import WINDOW_S
from tests.engine.conftest import make_tiny_llama
from tests.gateway.jobs_helpers import DbReader, database_for
from tests.gateway.server import RunningServer, run_server

pytestmark = pytest.mark.default_model  # the tiny model borrows its tokenizer


def _printed(fn, **kwargs) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        fn(**kwargs)
    return out.getvalue().strip()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny", resolve_model("default"), layers=1)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def replicas(request, tiny_model: Path, tmp_path_factory) -> Iterator[tuple[str, dict[str, str], list]]:
    """Keys made first (as `sllm keys create` would), so both replicas start with keys on."""
    tmp = tmp_path_factory.mktemp("rate-limits")
    db_url = database_for(request, tmp)
    keys = {"rpm": _printed(create_key, name="three-a-minute", db=db_url, rpm=3, tpm=None),
            "tpm": _printed(create_key, name="ten-tokens", db=db_url, rpm=None, tpm=10),
            "free": _printed(create_key, name="unlimited", db=db_url, rpm=None, tpm=None),
            "routed": _printed(create_key, name="ten-routed-tokens", db=db_url, rpm=None, tpm=10)}
    with ExitStack() as stack:
        pair = [stack.enter_context(run_server(tmp, db=db_url, model=str(tiny_model), served_model_name="tiny",
                                               max_num_seqs=2)) for _ in range(2)]
        # A third replica with no model of its own, routing `remote` to the first (as compose.yaml's do).
        upstream = {"name": "remote", "upstream": [{"url": pair[0].base_url, "model": "tiny",
                                                    "api_key": keys["free"]}]}
        router = stack.enter_context(run_server(tmp, db=db_url, models=[upstream]))
        yield db_url, keys, [*pair, router]


def _client(server: RunningServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def _clear_of_the_minute_boundary() -> None:
    """The counters are per clock minute: start a test's requests well inside one."""
    while time.time() % WINDOW_S > WINDOW_S - 10:
        time.sleep(0.2)


def _usage_recorded(db_url: str, key: str, requests: int) -> None:
    sql = "SELECT coalesce(sum(u.requests), 0) FROM key_usage u JOIN api_keys k ON k.id = u.key_id WHERE k.name = ?"
    deadline = time.monotonic() + 20
    with DbReader(db_url) as db:
        while db.execute(sql, (key,)).fetchone()[0] < requests:
            assert time.monotonic() < deadline, "the replicas never recorded the usage"
            time.sleep(0.05)


def test_a_key_over_its_requests_per_minute_gets_429_from_either_replica(replicas):
    db_url, keys, (a, b, _router) = replicas
    _clear_of_the_minute_boundary()
    remaining = []
    for server in (a, b, a):
        raw = _client(server, keys["rpm"]).models.with_raw_response.list()
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        assert "x-ratelimit-limit-tokens" not in raw.headers  # this key has no token limit
        remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
    assert remaining == [2, 1, 0]
    for server in (b, a):
        with pytest.raises(openai.RateLimitError) as exc:
            _client(server, keys["rpm"]).models.list()
        assert exc.value.body["code"] == "rate_limit_exceeded" and exc.value.body["type"] == "requests"
        assert "three-a-minute" in exc.value.body["message"]
        headers = exc.value.response.headers
        assert 1 <= int(headers["retry-after"]) <= WINDOW_S
        assert headers["x-ratelimit-remaining-requests"] == "0"
    # Another key is not affected, and one without limits gets no such headers.
    raw = _client(b, keys["free"]).models.with_raw_response.list()
    assert raw.parse().data[0].id == "tiny" and not any(h.startswith("x-ratelimit") for h in raw.headers)


def test_a_key_over_its_tokens_per_minute_gets_429_and_usage_is_listed(replicas):
    db_url, keys, (a, b, _router) = replicas
    _clear_of_the_minute_boundary()
    raw = _client(a, keys["tpm"]).completions.with_raw_response.create(model="tiny", prompt="Hello there",
                                                                        max_tokens=8, temperature=0)
    assert (raw.headers["x-ratelimit-limit-tokens"], raw.headers["x-ratelimit-remaining-tokens"]) == ("10", "10")
    usage = raw.parse().usage
    assert usage.total_tokens >= 10
    _usage_recorded(db_url, "ten-tokens", 1)
    for server in (b, a):
        with pytest.raises(openai.RateLimitError) as exc:
            _client(server, keys["tpm"]).completions.create(model="tiny", prompt="Hi", max_tokens=1)
        assert exc.value.body["type"] == "tokens" and exc.value.body["code"] == "rate_limit_exceeded"
        assert exc.value.response.headers["x-ratelimit-remaining-tokens"] == "0"

    rows = [json.loads(line) for line in _printed(key_usage, db=db_url, by="hour", as_json=True).splitlines()]
    assert [(r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in rows if r["key"] == "ten-tokens"] == [
        (1, usage.prompt_tokens, usage.completion_tokens)]
    assert {r["key"] for r in rows} <= {"ten-tokens", "three-a-minute", "unlimited",
                                        "ten-routed-tokens"}  # refused requests: not usage
    table = _printed(key_usage, db=db_url, by="day", as_json=False)
    assert "ten-tokens" in table and "prompt_tokens" in table


def test_a_routed_answer_counts_its_tokens_too(replicas):
    db_url, keys, (a, _b, router) = replicas
    _clear_of_the_minute_boundary()
    answer = _client(router, keys["routed"]).completions.create(model="remote", prompt="Hello there", max_tokens=8,
                                                                temperature=0)
    assert answer.usage.total_tokens >= 10
    _usage_recorded(db_url, "ten-routed-tokens", 1)
    with pytest.raises(openai.RateLimitError) as exc:
        _client(a, keys["routed"]).completions.create(model="tiny", prompt="Hi", max_tokens=1)
    assert exc.value.body["type"] == "tokens"
