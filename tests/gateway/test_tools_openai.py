"""Tool calling and structured output over HTTP with the official openai client: every tool_choice
mode gives calls that parse and match their schema, streamed calls equal non-streamed ones for the
same seed, `parse()` returns the pydantic object, vLLM's guided extras work on /v1/completions, the
Responses API returns and accepts function calls, and bad tools or formats are 400s naming the field.

Token budgets are small on purpose (the suite runs on two CPU cores); constrained decoding makes even
a cut-short answer a prefix of something valid."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What's the weather in Seoul?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("tools-openai")) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _check_calls(calls) -> None:
    for call in calls:
        assert re.fullmatch(r"call_[0-9a-f]{24}", call.id) and call.type == "function"
        assert isinstance(call.function.arguments, str)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}],
                         ids=["required", "named"])
def test_forced_calls_parse_and_match_the_schema(client, choice):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, max_tokens=48, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1
    _check_calls(c.message.tool_calls)
    if isinstance(choice, dict):
        assert c.message.tool_calls[0].function.name == "add"
    assert not c.message.content  # the call block is not echoed as text


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_never_leak_tags(client, choice):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=12,
                                       temperature=0)
    c = r.choices[0]
    assert "<tool_call>" not in (c.message.content or "")
    _check_calls(c.message.tool_calls or [])
    if choice == "none":
        assert not c.message.tool_calls and c.finish_reason in ("stop", "length")


def _sse(server, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        lines = [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_streamed_calls_equal_plain_ones_for_a_seed(server, client):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Add 17 and 25."}], "tools": TOOLS,
            "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 48, "temperature": 1.0, "seed": 11}
    plain = client.chat.completions.create(**body)
    chunks = _sse(server, {**body, "stream": True})
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            assert "<tool_call>" not in (choice["delta"].get("content") or "")
            items = choice["delta"].get("tool_calls", [])
            assert len({item["index"] for item in items}) == len(items)  # one item per index per chunk
            for item in items:
                assert "index" in item
                if item["index"] not in calls:  # a call's first delta: id, type, name and the first arguments
                    assert item["id"].startswith("call_") and item["type"] == "function"
                    assert item["function"]["name"] and isinstance(item["function"]["arguments"], str)
                    calls[item["index"]] = {"name": item["function"]["name"],
                                            "arguments": item["function"]["arguments"]}
                else:  # then only argument fragments
                    assert set(item) == {"index", "function"} and set(item["function"]) == {"arguments"}
                    calls[item["index"]]["arguments"] += item["function"]["arguments"]
    finish = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
    assert finish == [plain.choices[0].finish_reason]
    expected = [{"name": t.function.name,
                 "arguments": t.function.arguments} for t in plain.choices[0].message.tool_calls]
    assert [calls[i] for i in sorted(calls)] == expected and expected
    # Every call parses and matches its tool's schema (one cut by max_tokens is not returned).
    for call in expected:
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_the_sdk_stream_helper_reads_one_call_per_index(client):
    """Issue 42: the chunk carrying a call held two items of index 0 (the head with empty arguments, then
    the arguments), which the SDK's stream helper read as two calls, the first unparsable."""
    strict = [{"type": "function", "function": {**t["function"], "strict": True}} for t in TOOLS]  # parsed by the SDK
    body = {"model": MODEL, "messages": ASK, "tools": strict, "tool_choice": "required", "parallel_tool_calls": False,
            "max_tokens": 48, "temperature": 0}
    plain = client.chat.completions.create(**body).choices[0]
    with client.chat.completions.stream(**body) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == plain.finish_reason == "tool_calls"
    assert [(t.id[:5], t.function.name, t.function.arguments) for t in final.message.tool_calls] == \
        [("call_", t.function.name, t.function.arguments) for t in plain.message.tool_calls]
    _check_calls(final.message.tool_calls)
    assert [(e.index, e.name, e.arguments) for e in done] == \
        [(i, t.function.name, t.function.arguments) for i, t in enumerate(plain.message.tool_calls)]
    assert done and all(e.parsed_arguments == json.loads(e.arguments) for e in done)


WEATHER_TOOL = [TOOLS[0]]
# Issue 17, case 1: with parallel calls allowed the default model writes the right call, then the
# same call again until max_tokens cuts it inside its arguments.
REPEATERS = [[{"role": "user", "content": "What's the weather in Seoul?"}],
             [{"role": "user", "content": "How hot is it in Cairo?"}]]


def _no_repeats(calls) -> None:
    keys = [(c.function.name, json.loads(c.function.arguments)) for c in calls]
    assert all(k not in keys[:i] for i, k in enumerate(keys)), keys


@pytest.mark.parametrize("messages", REPEATERS, ids=["seoul", "cairo"])
def test_cut_and_repeated_calls_are_not_returned(client, messages):
    body = {"model": MODEL, "messages": messages, "tools": WEATHER_TOOL, "tool_choice": "required",
            "temperature": 0, "max_tokens": 64}
    plain = client.chat.completions.create(**body).choices[0]
    assert plain.message.tool_calls
    _check_calls(plain.message.tool_calls)
    _no_repeats(plain.message.tool_calls)
    # A repeat ends the answer (tool_calls); a call cut by the budget is dropped, and the cut is
    # reported (length).
    assert plain.finish_reason in ("tool_calls", "length")
    # The SDK's stream helper parses every call's arguments as they complete (a cut call made it fail on
    # the JSON); it still raises on any `length` finish, with the parsed completion attached.
    try:
        with client.chat.completions.stream(**body) as stream:
            for _ in stream:
                pass
            streamed = stream.get_final_completion().choices[0]
    except openai.LengthFinishReasonError as exc:
        streamed = exc.completion.choices[0]
    assert streamed.finish_reason == plain.finish_reason
    assert [(t.function.name, t.function.arguments) for t in streamed.message.tool_calls] == \
        [(t.function.name, t.function.arguments) for t in plain.message.tool_calls]


# Issue 42: one complete call, then further calls begun until max_tokens cut them: finish "length" on
# an answer that was fine (clients that treat length as an error failed).
WEATHER_ASKS = ["What's the weather in Oslo?", "What's the weather in Seoul?", "How hot is it in Cairo?",
                "Is it raining in Paris?", "Tell me the temperature in Tokyo."]


def test_a_call_list_ends_where_another_call_would_not_fit(client):
    tool = [{"type": "function", "function": {**TOOLS[0]["function"], "name": "weather"}}]
    for ask in WEATHER_ASKS:
        body = {"model": MODEL, "messages": [{"role": "user", "content": ask}], "tools": tool,
                "tool_choice": "required", "temperature": 0, "max_tokens": 64}
        c = client.chat.completions.create(**body).choices[0]
        assert c.finish_reason == "tool_calls" and c.message.tool_calls, (ask, c)
        for call in c.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), WEATHER)
        with client.chat.completions.stream(**body) as stream:  # raises on a length finish
            for _ in stream:
                pass
            streamed = stream.get_final_completion().choices[0]
        assert [t.function.arguments for t in streamed.message.tool_calls] == \
            [t.function.arguments for t in c.message.tool_calls]


def test_a_single_call_when_parallel_calls_are_off(client):
    r = client.chat.completions.create(model=MODEL, messages=REPEATERS[0], tools=WEATHER_TOOL,
                                       tool_choice="required", parallel_tool_calls=False, temperature=0,
                                       max_tokens=64)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1
    _check_calls(c.message.tool_calls)


def test_responses_never_return_a_cut_call(client):
    kwargs = {"model": MODEL, "input": "How hot is it in Cairo?", "tools": [RESPONSES_TOOL],
              "tool_choice": "required", "max_output_tokens": 64, "temperature": 0}
    plain = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    for resp in (plain, streamed):
        calls = [item for item in resp.output if item.type == "function_call"]
        assert calls and all(c.status == "completed" for c in calls)
        for c in calls:
            jsonschema.validate(json.loads(c.arguments), WEATHER)
        keys = [(c.name, json.loads(c.arguments)) for c in calls]
        assert all(k not in keys[:i] for i, k in enumerate(keys))
    assert [(c.name, c.arguments) for c in plain.output] == [(c.name, c.arguments) for c in streamed.output]
    assert plain.status == streamed.status
    for e in events:
        if e.type == "response.function_call_arguments.done":
            json.loads(e.arguments)


def test_tool_history_is_accepted(client):
    """A second turn: the assistant's call and the tool's answer in the input, as agents send them."""
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Seoul"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 degrees."},
    ]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=8, temperature=0)
    assert r.choices[0].message.content is not None or r.choices[0].message.tool_calls


class Person(BaseModel):
    name: str
    age: int


def test_parse_returns_the_pydantic_object(client):
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    r = parse(model=MODEL, messages=[{"role": "user", "content": "Alice is 30 years old. Extract the person."}],
              response_format=Person, max_tokens=32, temperature=0)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person) and person.name


def test_json_object_is_an_object(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Give me a JSON object."}],
                                       response_format={"type": "json_object"}, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_completions_take_vllm_guided_extras(client):
    def complete(prompt, max_tokens, **extra):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                      extra_body=extra)
        return r.choices[0]

    assert complete("The sky is", 4, guided_choice=["blue", "green"]).text in ("blue", "green")
    assert re.fullmatch(r"\d{3}", complete("Three digits:", 6, guided_regex=r"\d{3}").text)
    age = complete("Alice is 30. As JSON:", 24, guided_json={"type": "object", "properties": {
        "age": {"type": "integer"}}, "required": ["age"]})
    assert age.finish_reason == "stop" and isinstance(json.loads(age.text)["age"], int)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    fmt = complete("Is water wet? JSON:", 12,
                   response_format={"type": "json_schema", "json_schema": {"name": "yes", "schema": schema}})
    jsonschema.validate(json.loads(fmt.text), schema)


def _error(resp: httpx.Response) -> dict:
    assert resp.status_code == 400, resp.text
    return resp.json()["error"]


@pytest.mark.parametrize(("path", "body", "param"), [
    ("chat/completions", {"messages": ASK, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "wrong"}}}}}]},
     "tools[0].function.parameters"),
    ("chat/completions",
     {"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ("chat/completions", {"messages": ASK, "response_format": {"type": "json_schema",
                                                               "json_schema": {"name": "bad name"}}},
     "response_format.json_schema.name"),
    ("completions", {"prompt": "x", "guided_regex": "("}, "guided_regex"),
    ("completions", {"prompt": "x", "guided_json": "{not json"}, "guided_json"),
    ("completions", {"prompt": "x", "guided_choice": ["a"], "guided_regex": "a"}, "guided_choice"),
    ("completions", {"prompt": "x", "guided_grammar": "root ::= "}, "guided_grammar"),
    ("responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 3}}}},
     "text.format.schema"),
])
def test_bad_tools_and_formats_are_400s_naming_the_field(server, path, body, param):
    err = _error(httpx.post(f"{server.base_url}/{path}", json=body))
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]


RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
                  "parameters": WEATHER}


def test_responses_function_call_round_trip(client):
    first = client.responses.create(model=MODEL, input="What's the weather in Seoul?", tools=[RESPONSES_TOOL],
                                    tool_choice="required", parallel_tool_calls=False, max_output_tokens=48,
                                    temperature=0)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    # The answer goes back as a function_call_output item; continuing from the stored response works too.
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[RESPONSES_TOOL], max_output_tokens=8, temperature=0,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees."}])
    assert second.status in ("completed", "incomplete") and second.output[0].type == "message"
    assert client.responses.retrieve(first.id).output[-1].type == "function_call"


def test_responses_stream_function_call_events(client):
    with client.responses.stream(model=MODEL, input="Add 2 and 3.", tools=[RESPONSES_TOOL, {
            "type": "function", "name": "add", "parameters": ADD}], tool_choice={"type": "function", "name": "add"},
            max_output_tokens=48, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "add"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == deltas and done.item_id == added.item.id
    assert types.index("response.function_call_arguments.done") < types.index("response.output_item.done")
    assert types[-1] == "response.completed"
    (call,) = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == json.loads(deltas)
    jsonschema.validate(json.loads(deltas), ADD)


def test_a_repeated_call_stops_the_engine_there(server, client):
    """The repeat that ends an answer also ends its engine sequence: fewer completion tokens than the
    budget (which the repeat used to run to), plain and streamed, and no KV block left behind."""
    body = {"model": MODEL, "messages": REPEATERS[0], "tools": WEATHER_TOOL, "tool_choice": "required",
            "temperature": 0, "max_tokens": 128}
    plain = client.chat.completions.create(**body)
    assert plain.choices[0].finish_reason == "tool_calls" and len(plain.choices[0].message.tool_calls) == 1
    # One call and its repeat (~25 tokens each), not the 128 the model would run on to.
    assert plain.usage.completion_tokens < 80, plain.usage
    chunks = _sse(server, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert chunks[-1]["usage"]["completion_tokens"] == plain.usage.completion_tokens
    responses = client.responses.create(model=MODEL, input=REPEATERS[0][0]["content"], tools=[RESPONSES_TOOL],
                                        tool_choice="required", temperature=0, max_output_tokens=128)
    assert responses.status == "completed" and responses.usage.output_tokens < 80
    server.assert_no_leak()


# Issue 17, case 2 (n8n's AI Agent + Calculator): the answer after a tool result echoed our markup.
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Useful for getting the result of a math expression.",
    "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}}
AFTER_RESULT = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Use the calculator to compute 1234 * 5678"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "calculator", "arguments": '{"input": "1234 * 5678"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "7006652"},
]
MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_no_tool_markup_in_answers_after_a_tool_result(server, client, choice):
    items = [{"type": "message", "role": m["role"], "content": m["content"]} for m in AFTER_RESULT[:2]] + [
        {"type": "function_call", "call_id": "call_1", "name": "calculator",
         "arguments": '{"input": "1234 * 5678"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "7006652"}]

    def chat(seed: int) -> dict:
        return {"model": MODEL, "messages": AFTER_RESULT, "tools": [CALCULATOR], "tool_choice": choice,
                "max_tokens": 48, "temperature": 0 if seed == 0 else 1.0, "seed": seed}

    def responses(seed: int) -> dict:
        return {"model": MODEL, "input": items, "tools": [{"type": "function", **CALCULATOR["function"]}],
                "tool_choice": choice, "max_output_tokens": 48, "temperature": chat(seed)["temperature"]}

    def plain(seed: int) -> str:
        return client.chat.completions.create(**chat(seed)).choices[0].message.content or ""

    def streamed(seed: int) -> str:
        chunks = _sse(server, {**chat(seed), "stream": True})
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    def answer(seed: int) -> str:
        return client.responses.create(**responses(seed)).output_text

    def deltas(seed: int) -> str:
        with client.responses.stream(**responses(seed)) as stream:
            return "".join(e.delta for e in stream if e.type == "response.output_text.delta")

    # The twelve requests (three seeds, four ways to ask) at once: the engine batches them, where one after
    # another they took twelve generations' time.
    ways = (plain, streamed, answer, deltas)
    with ThreadPoolExecutor(len(ways) * 3) as pool:
        futures = {(way, seed): pool.submit(way, seed) for seed in (0, 1, 2) for way in ways}
        texts = {key: f.result() for key, f in futures.items()}
    for seed in (0, 1, 2):
        assert texts[streamed, seed] == texts[plain, seed]
        for way in ways:
            assert not any(m in texts[way, seed] for m in MARKUP), texts[way, seed]
