"""`dimensions` on /v1/embeddings as a per-model property (engine/matryoshka.py), through the official openai
client on a real server: tiny random encoders and a tiny Llama, Matryoshka by their config.json
(`matryoshka_dimensions`), by a `models` entry's `hf_overrides` (`is_matryoshka`, or sizes for the
decoder and its -embed name), by name (a NomicBERT folder named nomic-embed-text-v1.5), and one that is
none. Shorter vectors equal sentence-transformers' (or the full vector's) first values renormalised;
sizes a model was not trained for are OpenAI-shaped 400s naming `dimensions`; /v1/models lists each
model's sizes. `sllm serve --hf-overrides` applies to the --model given, not to the embedding model
served beside it; a bad value stops the start with the flag named."""

import base64
import json

import numpy as np
import openai
import pytest
import torch
from typer.testing import CliRunner

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.engine.encoder_helpers import make_nomic_encoder, make_sentence_transformer
from tests.gateway.server import run_server, spawn_server

TEXTS = ["The quick brown fox jumps over the lazy dog.", "how do plants make food", "SELECT count(*) FROM users;"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matryoshka")
    listed = make_sentence_transformer(tmp / "listed", "bert", "mean", normalize=True, seed=1)
    config = json.loads((listed / "config.json").read_text())
    (listed / "config.json").write_text(json.dumps({**config, "matryoshka_dimensions": [16, 8]}))
    return {"llama": make_tiny_llama(tmp / "tiny-llama", resolve_model("default"), seed=4), "listed": listed,
            "any": make_sentence_transformer(tmp / "any", "bert", "cls", normalize=True, seed=2),
            "plain": make_sentence_transformer(tmp / "plain", "bert", "mean", normalize=True, seed=3),
            "nomic": make_nomic_encoder(tmp / "nomic-embed-text-v1.5", seed=5)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    models = [{"model": str(folders["llama"]), "hf_overrides": {"matryoshka_dimensions": [16, 32]}},
              {"model": str(folders["listed"]), "name": "listed-embed"},
              {"model": str(folders["any"]), "name": "any-embed", "hf_overrides": {"is_matryoshka": True}},
              {"model": str(folders["plain"]), "name": "plain-embed"},
              {"model": str(folders["nomic"])}]
    with run_server(tmp_path_factory.mktemp("mrl-server"), models=models) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _renormalised(full: torch.Tensor, dimensions: int) -> torch.Tensor:
    return torch.nn.functional.normalize(full[..., :dimensions], dim=-1)


def test_models_list_their_sizes(client):
    cards = {m.id: (m.model_extra.get("is_matryoshka"), m.model_extra.get("matryoshka_dimensions"))
             for m in client.models.list().data}
    assert cards == {"tiny-llama": (True, [16, 32]), "tiny-llama-embed": (True, [16, 32]),
                     "listed-embed": (True, [8, 16]), "any-embed": (True, None), "plain-embed": (False, None),
                     "nomic-embed-text-v1.5": (True, None)}


@pytest.mark.parametrize(("model", "key", "dimensions"), [("listed-embed", "listed", 8), ("listed-embed", "listed", 16),
                                                          ("any-embed", "any", 5)])
def test_shorter_vectors_equal_sentence_transformers_renormalised(client, folders, model, key, dimensions):
    from sentence_transformers import SentenceTransformer

    full = SentenceTransformer(str(folders[key]), device="cpu").encode(TEXTS, convert_to_tensor=True).cpu()
    r = client.embeddings.create(model=model, input=TEXTS, dimensions=dimensions)  # the SDK's base64, decoded
    got = torch.tensor([d.embedding for d in r.data])
    assert got.shape == (len(TEXTS), dimensions)
    torch.testing.assert_close(got, _renormalised(full, dimensions), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("model", "dimensions", "normalised"), [
    ("nomic-embed-text-v1.5", 16, False),  # a plain HF folder: no Normalize module, so neither vector is normalised
    ("tiny-llama-embed", 16, True), ("tiny-llama", 32, True)])
def test_shorter_vectors_are_the_full_ones_renormalised(client, model, dimensions, normalised):
    full = torch.tensor([d.embedding for d in client.embeddings.create(model=model, input=TEXTS,
                                                                       encoding_format="float").data])
    r = client.embeddings.create(model=model, input=TEXTS, dimensions=dimensions, encoding_format="base64")
    got = torch.tensor(np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in r.data]))
    expected = _renormalised(full, dimensions) if normalised else full[:, :dimensions]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("model", "dimensions", "says"), [
    ("listed-embed", 12, "trained for dimensions 8, 16 only"),
    ("plain-embed", 8, "not trained for shorter vectors"),
    ("tiny-llama-embed", 24, "trained for dimensions 16, 32 only"),
    ("any-embed", 33, "between 1 and 32")])
def test_sizes_a_model_was_not_trained_for_are_400s(client, model, dimensions, says):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=model, input="x", dimensions=dimensions)
    error = info.value.response.json()["error"]
    assert error["param"] == "dimensions" and error["type"] == "invalid_request_error" and says in error["message"]


def test_the_full_width_is_always_accepted(client):
    for model, width in (("plain-embed", 32), ("listed-embed", 32), ("tiny-llama", 64)):
        assert len(client.embeddings.create(model=model, input="x", dimensions=width).data[0].embedding) == width


def test_serve_flag_applies_to_the_model_given_not_the_one_beside(tmp_path, folders):
    with spawn_server(tmp_path, "--model", str(folders["plain"]), "--served-model-name", "given-embed",
                      "--embedding-model", str(folders["listed"].parent / "any"),
                      "--hf-overrides", '{"is_matryoshka": true}') as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0)
        cards = {m.id: m.model_extra["is_matryoshka"] for m in client.models.list().data}
        assert cards == {"given-embed": True, "any-embed": False}
        assert len(client.embeddings.create(model="given-embed", input="x", dimensions=4).data[0].embedding) == 4
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="any-embed", input="x", dimensions=4)


@pytest.mark.parametrize(("value", "says"), [("{bad", "--hf-overrides: not JSON"),
                                             ('{"rope_theta": 1}', "rope_theta not supported")])
def test_a_bad_flag_stops_the_start(value, says):
    from engine.cli import app

    result = CliRunner().invoke(app, ["serve", "--hf-overrides", value])
    assert result.exit_code == 2 and says in result.output, result.output
