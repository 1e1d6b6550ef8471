"""How well an embedding model retrieves: 30 short documents on distinct topics, one paraphrased query each
(few words shared with its document), ranked by cosine similarity; recall@1 and MRR, beside a word-overlap
baseline. A quick check of what `/v1/embeddings` serves, not a benchmark of record (MTEB is).

    python -m benchmarks.embedding_retrieval [MODEL ...]

Each MODEL is a chat model (pooled by mean and by last token) or an encoder folder (pooled as its
sentence-transformers config says); by default the default chat model and the bundled all-MiniLM-L6-v2.
"""

import asyncio
import re
import sys

import torch

from engine.encoder_engine import EncoderEngine
from engine.llm_engine import LLMEngine
from engine.loader import default_embedding_model_path
from engine.models.bert import is_encoder_folder
from engine.pooling import PoolingParams

DOCS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889.",
    "Photosynthesis lets plants turn sunlight, water and carbon dioxide into glucose and oxygen.",
    "A binary search halves a sorted array at each step to find a value in logarithmic time.",
    "The Great Wall of China stretches thousands of kilometres across northern China.",
    "Regular exercise strengthens the heart and lowers blood pressure.",
    "Python lists are mutable sequences; tuples cannot be changed after creation.",
    "The mitochondria produce most of the chemical energy a cell needs.",
    "Mount Everest, at 8,849 metres, is the highest mountain above sea level.",
    "Inflation is the rate at which the general level of prices rises over time.",
    "SQL JOIN clauses combine rows from two or more tables on a related column.",
    "Bees pollinate flowers while collecting nectar to make honey.",
    "The Pacific is the largest and deepest of Earth's oceans.",
    "Vaccines train the immune system to recognise a virus without causing the disease.",
    "A guitar usually has six strings tuned E, A, D, G, B and E.",
    "The French Revolution began in 1789 and ended the monarchy.",
    "Solar panels convert light into electricity using photovoltaic cells.",
    "Coffee contains caffeine, a stimulant that reduces tiredness.",
    "The speed of light in a vacuum is about 300,000 kilometres per second.",
    "Chess is played on an eight by eight board with sixteen pieces per player.",
    "Rainforests hold more than half of the world's plant and animal species.",
    "A mortgage is a loan used to buy a house, repaid with interest over many years.",
    "Shakespeare wrote Hamlet, Macbeth and Romeo and Juliet.",
    "Electric cars run on batteries instead of petrol engines.",
    "Sleep helps the brain consolidate memories from the day.",
    "Volcanoes erupt when molten rock from deep underground reaches the surface.",
    "A firewall filters network traffic according to a set of security rules.",
    "Penguins are flightless birds that live mostly in the Southern Hemisphere.",
    "Compound interest is earned on both the original sum and the interest already added.",
    "The violin is a string instrument played with a bow.",
    "Antibiotics kill bacteria but have no effect on viruses.",
]
QUERIES = [
    "Which Paris landmark was finished in 1889?", "How do plants make food from light?",
    "fast way to look up an item in an ordered list", "ancient fortification across northern China",
    "Why is working out good for your heart?", "difference between list and tuple in Python",
    "What is the powerhouse of the cell?", "tallest peak on Earth",
    "Why do prices go up every year?", "how to merge rows of two tables in a database query",
    "insects that make honey", "biggest ocean on the planet",
    "How do vaccinations protect us?", "standard tuning of a six-string instrument",
    "When did the revolution in France start?", "turning sunlight into electric power",
    "Which drink keeps you awake?", "how fast does light travel",
    "board game with kings, queens and pawns", "where do most species live?",
    "loan for buying a home", "author of Hamlet",
    "cars powered by batteries", "Why do we need to sleep?",
    "What happens when lava comes out of a mountain?", "How is a computer network protected from attacks?",
    "birds of Antarctica that cannot fly", "Why do savings grow faster over time?",
    "instrument you play with a bow", "Do antibiotics work against the flu?",
]


def _embed(engine: LLMEngine, texts: list[str], pooling: str) -> torch.Tensor:
    for i, text in enumerate(texts):
        engine.add_request(f"{pooling}-{i}", text, pooling=PoolingParams(pooling))  # type: ignore[arg-type]
    got = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.request_id] = out.embedding
    return torch.stack([got[f"{pooling}-{i}"] for i in range(len(texts))])


def _encode(engine: EncoderEngine, texts: list[str]) -> torch.Tensor:
    params = PoolingParams(engine.spec.pooling, normalize=True)

    async def run() -> list:
        return await asyncio.gather(*[engine.embed(engine.check_request(t), params) for t in texts])

    return torch.stack([o.embedding for o in asyncio.run(run())])


def _score(sim: torch.Tensor) -> tuple[float, float]:
    ranks = (sim > sim.diag()[:, None]).sum(1)  # documents scored above the right one
    return (ranks == 0).float().mean().item(), (1 / (ranks + 1).float()).mean().item()


def _words(s: str) -> set[str]:
    return set(re.findall(r"[a-z]+", s.lower()))


def evaluate(model: str) -> dict[str, tuple[float, float]]:
    """{how it was pooled: (recall@1, MRR)} for one model."""
    if is_encoder_folder(model):
        engine = EncoderEngine(model)
        try:
            return {engine.spec.pooling: _score(_encode(engine, QUERIES) @ _encode(engine, DOCS).T)}
        finally:
            engine.shutdown()
    llm = LLMEngine(model=model)
    return {p: _score(_embed(llm, QUERIES, p) @ _embed(llm, DOCS, p).T) for p in ("mean", "last")}


def main(*models: str) -> None:
    overlap = torch.tensor([[len(_words(q) & _words(d)) / len(_words(q) | _words(d)) for d in DOCS] for q in QUERIES])
    r1, mrr = _score(overlap)
    print(f"{len(QUERIES)} queries. word overlap (Jaccard): recall@1 {r1:.2f}  MRR {mrr:.2f}")
    bundled = default_embedding_model_path()
    for model in models or ["default", *([str(bundled)] if bundled else [])]:
        for pooling, (r1, mrr) in evaluate(model).items():
            print(f"{model}, {pooling} pooling: recall@1 {r1:.2f}  MRR {mrr:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
