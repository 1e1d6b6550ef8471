"""Priority through the gateway, with the official openai client on a real socket: an interactive
request preempts batch lines that fill the engine, `priority` in the body is a 400 unless the server
allows it and is honoured when it does, API keys flooding at once take turns, and queue time, TTFT
and preemptions are reported per priority."""

import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.gateway.jobs_helpers import completion_line, jsonl, wait_batch
from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

USER = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("strict"), max_model_len=512) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def lenient(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("lenient"), max_model_len=512, max_num_seqs=2, job_concurrency=4,
                    allow_client_priority=True) as s:
        yield s
        s.assert_no_leak()


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _refused(call) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        call()
    error = info.value.response.json()["error"]
    assert error["param"] == "priority" and error["type"] == "invalid_request_error"
    assert "--allow-client-priority" in error["message"]


def test_body_priority_is_a_400_unless_the_server_allows_it(strict):
    client = _client(strict)
    extra = {"priority": 1}
    _refused(lambda: client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2,
                                                    extra_body=extra))
    _refused(lambda: client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, extra_body=extra))
    _refused(lambda: client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, extra_body=extra))
    _refused(lambda: client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, background=True,
                                             extra_body=extra))
    ok = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    assert ok.choices[0].message.content is not None
    assert strict.metric("sllm:time_to_first_token_by_priority_seconds_count", priority="0") == 1
    # A background response runs as a job, at priority_background (5).
    queued = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, background=True)
    deadline = time.monotonic() + 60
    while client.responses.retrieve(queued.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert strict.metric("sllm:request_queue_time_by_priority_seconds_count", priority="5") == 1


def test_body_priority_is_honoured_when_allowed(lenient):
    client = _client(lenient)
    before = lenient.metric("sllm:time_to_first_token_by_priority_seconds_count", priority="7")
    client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, extra_body={"priority": 7})
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, extra_body={"priority": 7})
    assert lenient.metric("sllm:time_to_first_token_by_priority_seconds_count", priority="7") == before + 2
    assert lenient.metric("sllm:request_queue_time_by_priority_seconds_count", priority="7") == before + 2
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2,
                                       extra_body={"priority": "high"})


def test_an_interactive_request_preempts_batch_lines_that_fill_the_engine(lenient):
    client = _client(lenient)
    engine = lenient.engine.engine
    lines = [completion_line(f"l{i}", f"Count to {20 + i}:", 96, ignore_eos=True) for i in range(4)]
    upload = client.files.create(file=("fill.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions",
                                  completion_window="24h")
    deadline = time.monotonic() + 60
    # Both batch slots (max_num_seqs 2) busy decoding batch lines, the other two lines queued behind.
    while not (len(running := list(engine.scheduler.running)) == 2
               and all(s.priority == 10 and s.num_output_tokens > 2 for s in running)):
        assert time.monotonic() < deadline, "the batch never filled the engine"
        time.sleep(0.02)
    preempted = lenient.metric("sllm:num_preemptions_by_priority_total", priority="10")
    answer = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4)
    assert answer.choices[0].finish_reason in ("stop", "length")
    counts = client.batches.retrieve(batch.id).request_counts
    assert counts.completed < 4  # it did not wait for the batch
    assert lenient.metric("sllm:num_preemptions_by_priority_total", priority="10") >= preempted + 1
    done = wait_batch(client, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 4
    assert lenient.metric("sllm:request_queue_time_by_priority_seconds_count", priority="10") >= 4


def test_two_api_keys_flooding_at_once_take_turns(tmp_path_factory):
    keys = ["key-a", "key-b", "key-c"]
    tmp = tmp_path_factory.mktemp("fair")
    with run_server(tmp, max_model_len=512, max_num_seqs=1, api_keys=keys) as server:
        clients = {k: openai.OpenAI(base_url=server.base_url, api_key=k, max_retries=0) for k in keys}
        scheduler = server.engine.engine.scheduler
        admitted: list = []
        mark = scheduler._mark_admitted

        def spy(seq, now):  # records the real scheduler's admissions, in order
            admitted.append(seq.fairness_key)
            mark(seq, now)

        scheduler._mark_admitted = spy

        def chat(key: str, max_tokens: int, **extra):
            return clients[key].chat.completions.create(model=MODEL, messages=USER, max_tokens=max_tokens,
                                                        **extra)

        def wait_for(cond, what: str) -> None:
            deadline = time.monotonic() + 30
            while not cond():
                assert time.monotonic() < deadline, what
                time.sleep(0.01)

        with ThreadPoolExecutor(8) as pool:
            hold = pool.submit(chat, "key-c", 128, extra_body={"ignore_eos": True})  # holds the only slot
            wait_for(lambda: len(scheduler.running) == 1, "the first request never ran")
            flood = [pool.submit(chat, "key-a", 2) for _ in range(3)]
            wait_for(lambda: len(scheduler.waiting) == 3, "key-a's requests never queued")
            flood += [pool.submit(chat, "key-b", 2) for _ in range(3)]
            wait_for(lambda: len(scheduler.waiting) == 6, "key-b's requests never queued")
            assert all(f.result().choices for f in [hold, *flood])
        a, b = admitted[1], admitted[2]
        assert a != b and None not in (a, b)
        assert admitted[1:] == [a, b] * 3  # key-a's three arrived first, yet key-b's interleave
        server.assert_no_leak()
