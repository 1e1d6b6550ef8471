"""A model card's sampling defaults (generation_config.json) for the fields a request leaves out, as vLLM's
`--generation-config auto|vllm|PATH`: a tiny random checkpoint whose card asks for greedy decoding
(temperature 0) and 5 new tokens answers a bare request exactly as an explicit temperature=0 one, with 5
tokens; explicit fields win; `vllm` ignores the card; a GGUF file has none."""

import json

import openai
import pytest

from engine.generation_config import generation_defaults
from engine.loader import default_model_path, resolve_model
from gateway.protocol.chat import ChatCompletionRequest
from gateway.serving.sampling import sampling_params
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

MODEL = "tiny-card"
ASK = [{"role": "user", "content": "Say something."}]
CARD = {"temperature": 0.0, "max_new_tokens": 5, "top_k": 50, "top_p": 1.0, "bos_token_id": 1, "do_sample": True}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = make_tiny_llama(tmp_path_factory.mktemp("card") / MODEL, resolve_model("default"), seed=4)
    (folder / "generation_config.json").write_text(json.dumps(CARD))
    return folder


def test_the_card_fields_vllm_takes(folder, tmp_path):
    # top_k 50 and top_p 1.0 are transformers' own defaults, not the author's choice: vLLM drops them too.
    assert generation_defaults("auto", folder) == {"temperature": 0.0, "max_tokens": 5}
    assert generation_defaults("vllm", folder) == {}
    assert generation_defaults("auto", default_model_path()) == {}  # a GGUF file: no card
    other = tmp_path / "other"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"top_p": 0.8, "repetition_penalty": 1.05}))
    assert generation_defaults(str(other), folder) == {"top_p": 0.8, "repetition_penalty": 1.05}
    with pytest.raises(ValueError, match="no generation_config.json"):
        generation_defaults(str(tmp_path / "missing"), folder)


def test_request_fields_win_over_the_card():
    card = {"temperature": 0.0, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1}
    body = ChatCompletionRequest(model=MODEL, messages=ASK, temperature=0.7, top_k=5)
    p = sampling_params(body, n=1, max_tokens=None, logprobs=None, temperature=body.temperature,
                        top_p=body.top_p, defaults=card)
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty) == (0.7, 5, 0.8, 0.05, 1.1)
    bare = sampling_params(body, n=1, max_tokens=None, logprobs=None, temperature=None, top_p=None)
    assert (bare.temperature, bare.top_p) == (1.0, 1.0)  # no card: the engine's defaults


@pytest.fixture(scope="module")
def client(folder, tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("card-db"), model=str(folder), num_kv_blocks=32) as s:
        yield openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0)
        s.assert_no_leak()


def test_a_bare_request_samples_as_the_card_says(client):
    def ask(**kw):
        r = client.chat.completions.create(model=MODEL, messages=ASK, extra_body={"ignore_eos": True}, **kw)
        return r.choices[0].message.content, r.usage.completion_tokens

    greedy = ask(temperature=0, max_tokens=5)
    assert ask() == greedy and ask() == greedy  # temperature 0 and 5 tokens from the card
    assert ask(max_tokens=3)[1] == 3  # the request's own field wins
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=None,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5
