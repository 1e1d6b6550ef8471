"""engine/matryoshka.py: config.json's is_matryoshka / matryoshka_dimensions as vLLM reads them, the
overrides winning over the file, the well-known checkpoints by name, which `dimensions` each allows, and
overrides sllm would not read refused."""

import json

import pytest

from engine.matryoshka import Matryoshka, check_hf_overrides, matryoshka_of, read_matryoshka


@pytest.mark.parametrize(("config", "name", "overrides", "expected"), [
    ({}, "bge-small-en-v1.5", None, Matryoshka()),
    ({"is_matryoshka": True}, "m", None, Matryoshka(True)),
    ({"matryoshka_dimensions": [768, 64, 256]}, "m", None, Matryoshka(True, (64, 256, 768))),
    ({"matryoshka_dimensions": None, "is_matryoshka": False}, "m", None, Matryoshka()),
    ({}, "m", {"is_matryoshka": True}, Matryoshka(True)),
    ({"is_matryoshka": True}, "m", {"is_matryoshka": False}, Matryoshka()),
    ({"is_matryoshka": True}, "m", {"matryoshka_dimensions": [32]}, Matryoshka(True, (32,))),
    # Known by name when the file says nothing; the file or an override still decides when they do.
    ({}, "nomic-embed-text-v1.5", None, Matryoshka(True)),
    ({}, "nomic-embed-text-v1", None, Matryoshka()),
    ({}, "Qwen3-Embedding-0.6B-Q8_0.gguf", None, Matryoshka(True)),
    ({}, "Qwen3-Embedding-0.6B", {"is_matryoshka": False}, Matryoshka()),
    ({"is_matryoshka": False}, "nomic-embed-text-v1.5", None, Matryoshka()),
])
def test_what_a_model_allows(config, name, overrides, expected):
    assert matryoshka_of(config, name, overrides) == expected


def test_dimensions_allowed():
    assert Matryoshka().refusal(64, 64) is None  # the full width is the model's own vector
    assert "trained for shorter" in Matryoshka().refusal(32, 64)
    assert Matryoshka(True).refusal(5, 64) is None
    assert "between 1 and 64" in Matryoshka(True).refusal(65, 64)
    listed = Matryoshka(True, (16, 32))
    assert listed.refusal(16, 64) is None and listed.refusal(64, 64) is None
    assert "16, 32 only" in listed.refusal(24, 64)


def test_read_from_a_folder_and_a_file(tmp_path):
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "matryoshka_dimensions": [8, 16]}))
    assert read_matryoshka(folder) == Matryoshka(True, (8, 16))
    assert read_matryoshka(folder, {"matryoshka_dimensions": None, "is_matryoshka": True}) == Matryoshka(True)
    assert read_matryoshka(tmp_path / "model.gguf") == Matryoshka()  # no config.json: name and overrides


@pytest.mark.parametrize("bad", [{"rope_theta": 1e6}, {"is_matryoshka": "yes"}, {"matryoshka_dimensions": [0]},
                                 {"matryoshka_dimensions": 64}, {"matryoshka_dimensions": []}, ["is_matryoshka"]])
def test_overrides_sllm_would_not_read_are_refused(bad):
    with pytest.raises(ValueError, match="hf_overrides"):
        check_hf_overrides(bad)
