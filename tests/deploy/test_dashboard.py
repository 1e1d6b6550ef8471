"""The Grafana dashboard shipped in deploy/ queries only metrics our /metrics exports: a real server
(an embedded tiny model and an upstream model, so both kinds of metrics exist) is scraped, and every
`sllm:` name in the dashboard's expressions must be one of its families, or a histogram's or
counter's series of one. The dashboard covers what the issue asks for."""

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

pytestmark = pytest.mark.default_model  # the tiny model borrows its tokenizer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "sllm.json"
SERIES = {"histogram": ("_bucket", "_sum", "_count", "_created"), "counter": ("_total", "_created")}


def _queried_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs and all(e.strip() for e in exprs)
    return {name for e in exprs for name in re.findall(r"\bsllm:[A-Za-z0-9_:]+", e)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, str]:
    """Family name -> type, scraped from a live server's /metrics."""
    tmp = tmp_path_factory.mktemp("dashboard")
    tiny = make_tiny_llama(tmp / "tiny", resolve_model("default"), layers=1)
    models = [{"name": "tiny", "model": str(tiny)},
              {"name": "remote", "upstream": [{"url": "http://127.0.0.1:9/v1"}]}]  # checked passively: never called
    with run_server(tmp, models=models) as server:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def _is_exported(name: str, exported: dict[str, str]) -> bool:
    if name in exported:
        return True
    return any(name == family + suffix for family, kind in exported.items() for suffix in SERIES.get(kind, ()))


def test_every_metric_the_dashboard_queries_is_exported(exported):
    missing = sorted(n for n in _queried_names() if not _is_exported(n, exported))
    assert not missing, f"the dashboard queries metrics /metrics does not export: {missing}"


def test_the_dashboard_shows_what_operators_need():
    names = _queried_names()
    wanted = {
        "requests": "sllm:request_success_total", "TTFT": "sllm:time_to_first_token_seconds_bucket",
        "TPOT": "sllm:request_time_per_output_token_seconds_bucket", "KV usage": "sllm:kv_cache_usage_perc",
        "queue": "sllm:num_requests_waiting", "job backlog": "sllm:job_backlog",
        "upstream health": "sllm:upstream_healthy",
    }
    assert {topic for topic, name in wanted.items() if name not in names} == set()
