"""`sllm bench embed`'s measuring part at toy size: a tiny sentence-transformers folder through our encoder
engine and sentence-transformers (their vectors checked equal first), one row per batch size; and the
random MiniLM-L6-shape folder it builds loads as an encoder."""

from benchmarks.embed import compare, random_minilm
from engine.encoder_folder import read_encoder_spec
from tests.engine.encoder_helpers import make_sentence_transformer


def test_compare_rows(tmp_path):
    folder = make_sentence_transformer(tmp_path / "tiny", "bert", "mean")
    rows = compare(folder, "tiny", [1, 4], ["the fox", "rain about cats", "sql count"], repeats=1)
    assert [r[:2] for r in rows] == [["tiny", "1"], ["tiny", "4"]]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 and r[4].endswith("x") for r in rows)


def test_random_minilm_shape(tmp_path):
    spec = read_encoder_spec(random_minilm(tmp_path / "random", None))
    assert (spec.config.num_layers, spec.config.hidden_size, spec.pooling, spec.normalize) == (6, 384, "mean", True)
