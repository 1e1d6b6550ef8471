"""`sllm bench json`: how often constrained output parses under a tight `max_tokens`, with
budget-aware closing (engine/json_budget.py) off and on, on one model in this process.

Three cases, 20 prompts each: `response_format` json_object, a json_schema with required keys, and
tool calls under `tool_choice: required` (the arguments must parse and match their tool's schema).
Each runs at two temperatures and three budgets, closing off and on interleaved in the same batch,
and the table gives the share that parses. It also times what the closing costs per decode step.
The prompt sets are shared with the CI tests (tests/engine/test_structured_guarantees.py,
tests/engine/test_tool_calling.py)."""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from engine.guided_spec import GuidedSpec

PERSON_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
    "hobbies": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "city", "hobbies"]}
PEOPLE = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Fatima", "Goro", "Hana", "Ivan", "Jana",
          "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq"]
CITIES = ["Seoul", "Paris", "Lagos", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Rome", "Delhi"]
JSON_SCHEMA_PROMPTS = [
    f"{name} is {20 + 3 * i} years old, lives in {CITIES[i % len(CITIES)]} and enjoys chess, hiking and "
    f"painting. Extract the person as JSON." for i, name in enumerate(PEOPLE)]
THINGS = ["a red bicycle", "a cup of coffee", "the city of Paris", "a golden retriever", "a laptop", "the moon",
          "a pizza", "a violin", "a mountain", "a pair of running shoes", "a library", "a smartphone",
          "an apple tree", "a train ticket", "a chess game", "a summer holiday", "a birthday cake",
          "a football team", "a rainy day", "a museum"]
JSON_OBJECT_PROMPTS = [f"Describe {t} as a JSON object with the keys name, color and price." for t in THINGS]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
    {"type": "function", "function": {
        "name": "search_products", "description": "Search the product catalog.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
            "in_stock": {"type": "boolean"}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "send_email", "description": "Send an email.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "subject"]}}},
]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TOOL_PROMPTS = [
    "What's the weather in Seoul right now?", "Add 17 and 25.", "Find me wireless headphones that are in stock.",
    "Send an email to alice@example.com saying the meeting moved to 3pm.",
    "Is it raining in Paris? Answer in fahrenheit.", "What is 1234 plus 4321?",
    "Search for running shoes, show at most 5 results.",
    "Email bob@example.com and carol@example.com about the quarterly report.",
    "Tell me the temperature in Tokyo in celsius.", "Compute the sum of -8 and 30.", "I need a laptop stand.",
    "Write to dave@example.com with subject 'Lunch' and body 'Pizza at noon?'", "How hot is it in Cairo today?",
    "What's 99 + 1?", "Look up organic coffee beans in the shop.",
    "Tell eve@example.com by email that the server is down.", "Weather forecast for New York, please.",
    "Please add 3 and 4 for me.", "Search the catalog for a 27-inch monitor, 10 results.",
    "Send a thank-you email to frank@example.com.",
]


@dataclass(frozen=True)
class Case:
    """One kind of constrained output: its prompts (rendered), its constraint, and what counts as parsing."""

    name: str
    prompts: list[str]
    guided: GuidedSpec
    parses: Callable[[str], bool]


def _json_object_parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _schema_parses(schema: dict[str, Any]) -> Callable[[str], bool]:
    def parses(text: str) -> bool:
        import jsonschema

        try:
            jsonschema.validate(json.loads(text), schema)
        except (json.JSONDecodeError, jsonschema.ValidationError):
            return False
        return True

    return parses


def calls_valid(text: str) -> bool:
    """At least one call, and every returned call's arguments parse and match its tool's schema."""
    import jsonschema

    from engine.chat.parser import parse_answer

    _, calls, _ = parse_answer(text)
    if not calls:
        return False
    try:
        for c in calls:
            jsonschema.validate(json.loads(c.arguments), TOOL_SCHEMAS[c.name])
    except (json.JSONDecodeError, jsonschema.ValidationError, KeyError):
        return False
    return True


def cases(tokenizer) -> list[Case]:
    from engine.chat.constraints import guided_for_response_format, guided_for_tools
    from engine.chat.messages import JSON_REPLY_NOTE, with_system_note
    from engine.chat.template import render_chat

    def chat(prompt: str, note: bool = False, tools=None, choice="auto") -> str:
        messages = [{"role": "user", "content": prompt}]
        if note:
            messages = with_system_note(messages, JSON_REPLY_NOTE)
        return render_chat(tokenizer, messages, tools, choice)

    schema_guided = guided_for_response_format({"type": "json_schema",
                                                "json_schema": {"name": "person", "schema": PERSON_SCHEMA}})
    object_guided = guided_for_response_format({"type": "json_object"})
    assert schema_guided is not None and object_guided is not None
    tools_guided = guided_for_tools(TOOLS, "required")
    assert tools_guided is not None
    return [
        Case("json_object", [chat(p, note=True) for p in JSON_OBJECT_PROMPTS], object_guided, _json_object_parses),
        Case("json_schema", [chat(p) for p in JSON_SCHEMA_PROMPTS], schema_guided, _schema_parses(PERSON_SCHEMA)),
        Case("tools required", [chat(p, tools=TOOLS, choice="required") for p in TOOL_PROMPTS], tools_guided,
             calls_valid),
    ]


def bench_json(
    model: str = typer.Option("default", envvar="SLLM_MODEL"),
    temperatures: str = typer.Option("0.7,1.0", help="Comma-separated"),
    budgets: str = typer.Option("16,32,64", help="max_tokens values for JSON, comma-separated"),
    tool_budgets: str = typer.Option("40,48,64", help="max_tokens values for tool calls (the shortest call "
                                     "of the bench's tools takes 33 tokens)"),
    seed: int = typer.Option(0),
    threads: int | None = typer.Option(None, help="torch threads (default: torch's)"),
):
    """JSON mode, json_schema and tool-call arguments: share that parses under tight max_tokens,
    budget-aware closing off and on, and its cost per decode step."""
    from benchmarks.harness import format_table, machine_header
    from engine import LLM, SamplingParams

    print(machine_header())
    llm = LLM(model=model, num_kv_blocks=4096, num_threads=threads)
    gd = llm.engine.guided_decoding()
    spent = {"close": 0.0, "constrain": 0.0}

    def timed(name, fn):
        def wrapper(*args):
            t0 = time.perf_counter()
            fn(*args)
            spent[name] += time.perf_counter() - t0
        return wrapper

    gd.close_on_budget = timed("close", gd.close_on_budget)
    gd.constrain = timed("constrain", gd.constrain)
    temps = [float(t) for t in temperatures.split(",")]
    json_limits = [int(b) for b in budgets.split(",")]
    call_limits = [int(b) for b in tool_budgets.split(",")]
    all_cases = cases(llm.tokenizer)
    rows = []
    for case in all_cases:
        limits = call_limits if case.name.startswith("tools") else json_limits
        prompts, params, keys = [], [], []
        for temp in temps:
            for limit in limits:
                for close in (False, True):
                    for i, prompt in enumerate(case.prompts):
                        prompts.append(prompt)
                        params.append(SamplingParams(temperature=temp, max_tokens=limit, seed=seed + i,
                                                     guided=case.guided, guided_budget_close=close))
                        keys.append((temp, limit, close))
        steps0 = llm.engine.stats["steps"]
        spent["close"] = spent["constrain"] = 0.0
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        steps = llm.engine.stats["steps"] - steps0
        tally: dict[tuple, list[int]] = {}
        for key, out in zip(keys, outs, strict=True):
            o = out.outputs[0]
            t = tally.setdefault(key, [0, 0, 0])
            t[0] += case.parses(o.text)
            t[1] += o.finish_reason == "length"
            t[2] += 1
        for temp in temps:
            for limit in limits:
                off, on = tally[(temp, limit, False)], tally[(temp, limit, True)]
                rows.append((case.name, temp, limit, off, on))
        print(f"{case.name}: {len(prompts)} sequences in {wall:.1f}s over {steps} steps; per step: closing "
              f"{1e3 * spent['close'] / max(steps, 1):.3f} ms, grammar masks "
              f"{1e3 * spent['constrain'] / max(steps, 1):.3f} ms, "
              f"wall time per step {1e3 * wall / max(steps, 1):.1f} ms (all rows, prefill included)")
    head = ["case", "temp", "max_tokens", "parses off", "parses on", "length off", "length on"]
    body = [[name, f"{temp:.1f}", limit, f"{off[0]}/{off[2]}", f"{on[0]}/{on[2]}", f"{off[1]}/{off[2]}",
             f"{on[1]}/{on[2]}"] for name, temp, limit, off, on in rows]
    print()
    print(format_table(head, body, align="lrrrrrr"))


if __name__ == "__main__":
    typer.run(bench_json)
