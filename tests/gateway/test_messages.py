"""Anthropic's Messages API through the official `anthropic` SDK on the default model: create, stream
(the event sequence the SDK assembles), tools with tool_choice any and tool, a tool_result round trip,
count_tokens, `x-api-key` auth, and errors in Anthropic's shape."""

import json

import anthropic
import httpx
import jsonschema
import pytest

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

KEY = "sk-anthropic-test"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "get_weather", "description": "Current weather for a city.", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "What's the weather in Seoul?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("messages"), api_keys=[KEY], model_alias=["claude-*=" + MODEL]) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def test_create_and_stream_agree(client):
    kwargs = {"model": MODEL, "max_tokens": 12, "extra_body": {"temperature": 0}, "system": "You are terse.",
              "messages": [{"role": "user", "content": "Name a colour."}]}
    m = client.messages.create(**kwargs)
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL and m.id.startswith("msg_")
    assert m.content[0].type == "text" and m.content[0].text and m.stop_reason in ("end_turn", "max_tokens")
    assert 0 < m.usage.output_tokens <= 12 and m.usage.input_tokens > 0
    with client.messages.stream(**kwargs) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert final.content[0].text == m.content[0].text and final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_stop" in events
    assert client.messages.count_tokens(model=MODEL, system=kwargs["system"],
                                        messages=kwargs["messages"]).input_tokens == m.usage.input_tokens


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}], ids=["any", "tool"])
def test_tool_use_blocks_match_the_schema(client, choice):
    kwargs = {"model": MODEL, "max_tokens": 48, "extra_body": {"temperature": 0}, "messages": ASK, "tools": TOOLS,
              "tool_choice": {**choice, "disable_parallel_tool_use": True}}
    m = client.messages.create(**kwargs)
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert streamed.input == use.input and final.stop_reason == "tool_use"
    # The tool's answer goes back as a tool_result block; the model then answers in text.
    after = client.messages.create(model=MODEL, max_tokens=8, extra_body={"temperature": 0}, tools=TOOLS, messages=[
        *ASK, {"role": "assistant", "content": [b.model_dump() for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]}])
    assert after.content and after.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_errors_are_anthropic_shaped(server, client):
    with pytest.raises(anthropic.AuthenticationError) as auth:
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=4, messages=ASK)
    assert auth.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="gpt-nope", max_tokens=4, messages=ASK)
    assert missing.value.body["error"]["type"] == "not_found_error"
    r = httpx.post(f"{server.url}/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                   json={"model": MODEL, "messages": ASK}, timeout=30)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and "max_tokens" in r.json()["error"]["message"]
    bad = httpx.post(f"{server.url}/v1/messages", headers={"authorization": f"Bearer {KEY}"}, timeout=30, json={
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]})
    assert bad.status_code == 400 and json.loads(bad.text)["error"]["type"] == "invalid_request_error"


def test_a_claude_name_reaches_the_served_model_through_an_alias(client):
    m = client.messages.create(model="claude-sllm-test", max_tokens=4, messages=ASK)
    assert m.model == "claude-sllm-test" and m.content  # the name the client asked for, as Anthropic echoes it


def test_aliases_parse_from_flags_and_files():
    from gateway.settings import Settings

    assert Settings(model_alias=["claude-*=smol", "gpt-4o=smol"]).model_alias == {"claude-*": "smol", "gpt-4o": "smol"}
    assert Settings(model_alias={"claude-*": "smol"}).model_alias == {"claude-*": "smol"}
    with pytest.raises(ValueError, match="NAME=SERVED"):
        Settings(model_alias=["claude"])
