"""`sllm serve --speculative-config`: speculation is invisible in outputs and visible in /metrics."""

import httpx
from openai import OpenAI

from tests.gateway.server import MODEL, run_server


def test_speculative_server_matches_plain_greedy_and_reports_acceptance(tmp_path):
    prompt = "SELECT name FROM users; SELECT name FROM users; SELECT name FROM"
    results = {}
    for name, spec in (("plain", None), ("ngram", {"method": "ngram", "num_speculative_tokens": 4})):
        with run_server(tmp_path / name, speculative_config=spec, num_kv_blocks=128) as srv:
            client = OpenAI(base_url=srv.base_url, api_key="EMPTY")
            out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
            results[name] = out.choices[0].text
            metrics = httpx.get(f"{srv.url}/metrics").text
            if spec:
                assert "sllm:spec_decode_num_draft_tokens" in metrics
                assert "sllm:spec_decode_draft_acceptance_rate" in metrics
                assert "sllm:request_spec_acceptance_rate_count" in metrics
            srv.assert_no_leak()
    assert results["ngram"] == results["plain"]
