"""Every error path answers in the OpenAI shape with the right status, and the SDK raises the
matching exception class; the server stays healthy and leaks no KV block afterwards."""

import json

import httpx
import openai
import pytest

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

BODY_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("errors"), max_model_len=256, max_request_body_bytes=BODY_LIMIT) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": USER, "max_tokens": -1}, "max_tokens"),
    ({"messages": USER, "max_tokens": "ten"}, "max_tokens"),
    ({"messages": USER, "temperature": "hot"}, "temperature"),
    ({"messages": USER, "temperature": 5}, "temperature"),
    ({"messages": USER, "n": 100000}, "n"),
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"messages": USER, "stop": 3}, "stop"),
    ({"messages": USER, "seed": "x"}, "seed"),
    ({"messages": USER, "stream_options": "yes"}, "stream_options"),
    ({"messages": USER, "top_logprobs": 3}, "top_logprobs"),
    ({"messages": USER, "stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"messages": USER, "logit_bias": {"hello": 5}}, "logit_bias"),
    ({"messages": USER, "logit_bias": {"1": 500}}, "logit_bias"),
    ({"messages": USER, "logit_bias": {str(10**9): 1}}, "logit_bias"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "no spaces"}}]},
     "tools[0].function.name"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
     "tools[0].function.parameters"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"messages": USER, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "nonsense"}}}}}}, "response_format.json_schema.schema"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
     "messages[0].content[0]"),
])
def test_chat_bad_requests_are_400(server, client, body, param):
    err = _error(httpx.post(f"{server.base_url}/chat/completions", json=body), 400)
    assert err["type"] == "invalid_request_error" and err["param"] and err["param"].startswith(param.split("[")[0])
    assert err["param"] == param or param in err["param"]
    rest = {k: v for k, v in body.items() if k != "messages"}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=body["messages"], extra_body=rest)


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "hi", "suffix": "end"}, "suffix"),
    ({"prompt": "hi", "n": 2, "best_of": 1}, "best_of"),
    ({"prompt": "hi", "n": 2, "best_of": 3, "stream": True}, "best_of"),
    ({"prompt": "hi", "echo": True, "logprobs": 1}, "echo"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [10**9]}, "prompt"),
    ({"prompt": {"text": "hi"}}, "prompt"),
    ({"prompt": "hi", "logprobs": 50}, "logprobs"),
    ({"prompt": "hi", "top_p": 0}, "top_p"),
    ({"prompt": "hi", "min_tokens": 20, "max_tokens": 5}, "min_tokens"),
    ({"prompt": "hi", "seed": 2**64}, "seed"),  # past torch's seeds: the engine raised a ValueError
])
def test_completion_bad_requests_are_400(server, client, body, param):
    err = _error(httpx.post(f"{server.base_url}/completions", json=body), 400)
    assert err["param"] and err["param"].startswith(param)
    rest = {k: v for k, v in body.items() if k != "prompt"}
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=body["prompt"], extra_body=rest)


def test_context_overflow_names_the_numbers(server, client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model=MODEL, prompt="one two three", max_tokens=300)
    msg = exc.value.body["message"]
    assert "256" in msg and "303" in msg and exc.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 300}],
                                       stream=True)
    assert "256" in exc.value.body["message"]


def test_malformed_json_is_400(server):
    resp = httpx.post(f"{server.base_url}/chat/completions", content=b'{"messages": [', headers={
        "content-type": "application/json"})
    assert "JSON" in _error(resp, 400)["message"]


def test_unknown_model_is_404(client):
    for call in (lambda: client.models.retrieve("gpt-9"),
                 lambda: client.completions.create(model="gpt-9", prompt="hi"),
                 lambda: client.chat.completions.create(model="gpt-9", messages=USER),
                 lambda: client.responses.create(model="gpt-9", input="hi")):
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        assert exc.value.body["code"] == "model_not_found"


def test_unknown_route_and_response_are_404(server, client):
    _error(httpx.get(f"{server.base_url}/nothing-here"), 404)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_missing")
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_missing")
    assert exc.value.body["param"] == "previous_response_id"


def test_responses_bad_requests_are_400(client):
    for kw in ({"input": "hi", "max_output_tokens": 0},
               {"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]},
               {"input": "hi", "tools": [{"type": "web_search"}]},
               {"input": "hi", "text": {"format": {"type": "yaml"}}},
               {"input": [{"type": "function_call_output", "output": "x"}]},
               {"input": [{"type": "item_reference", "id": "x"}]},
               {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
               {"input": 5}):
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model=MODEL, **kw)


def test_unknown_fields_are_ignored_but_known_ones_typed(server):
    ok = httpx.post(f"{server.base_url}/chat/completions",
                    json={"messages": USER, "max_tokens": 2, "service_tier": "auto", "frobnicate": {"x": 1}})
    assert ok.status_code == 200


def test_body_too_large_is_413(server, client):
    big = {"prompt": "x" * (BODY_LIMIT + 10), "max_tokens": 1}
    err = _error(httpx.post(f"{server.base_url}/completions", json=big), 413)
    assert str(BODY_LIMIT) in err["message"]
    # Without content-length (chunked), the limit still holds.
    chunks = (json.dumps(big).encode()[i:i + 4096] for i in range(0, BODY_LIMIT + 200, 4096))
    _error(httpx.post(f"{server.base_url}/completions", content=chunks,
                      headers={"content-type": "application/json"}), 413)
    with pytest.raises(openai.APIStatusError) as exc:
        client.completions.create(model=MODEL, prompt="x" * (BODY_LIMIT + 10), max_tokens=1)
    assert exc.value.status_code == 413


def test_still_healthy(server, client):
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert client.chat.completions.create(model=MODEL, messages=USER, max_tokens=3).choices[0].message.content
