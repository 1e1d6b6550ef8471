"""How relevant each document is to its query, for /v1/rerank and /score, by what the model is:
- a cross-encoder (a BERT-family sequence classifier): each pair read jointly, its logit through the
  model's activation (sigmoid for one label), as sentence-transformers' CrossEncoder scores;
- a decoder reranker of the Qwen3-Reranker kind: each pair in its prompt (engine/rerank_prompt.py), the
  softmaxed "yes" of the last token's no/yes logits, as the model card scores;
- any embedding model: the cosine similarity of the two pooled, normalised vectors (a bi-encoder's score)."""

import asyncio

from fastapi import Request

from engine.pooling import PoolingParams
from engine.rerank_prompt import RerankPrompt
from gateway.limits.priority import priority_of
from gateway.registry import EmbeddedModel, EncoderModel, Served
from gateway.serving.embeddings import embed_inputs, embedding_source
from gateway.state import ServerState
from gateway.web.errors import APIError


async def score_pairs(served: Served, state: ServerState, queries: list[str], documents: list[str],
                      request: Request | None = None, priority: int | None = None,
                      param: str = "documents") -> tuple[list[float], int]:
    """The score of each (queries[i], documents[i]) and the tokens read."""
    assert len(queries) == len(documents)
    if isinstance(served, EncoderModel) and served.task == "score":
        engine = served.encoder()
        pairs = await asyncio.to_thread(lambda: [engine.check_pair(q, d) for q, d in zip(queries, documents,
                                                                                          strict=True)])
        rank = priority_of(state.settings, request, priority)  # as embeddings and chat: jobs below interactive
        scores = await asyncio.gather(*[engine.score(ids, types, rank) for ids, types in pairs])
        return list(scores), sum(len(ids) for ids, _ in pairs)
    if isinstance(served, EmbeddedModel) and served.reranker:
        engine = served.ready()
        try:
            prompt = RerankPrompt.for_tokenizer(engine.tokenizer)
        except ValueError as exc:
            raise APIError(400, f"`{served.name}`: {exc}", param="model") from None
        limit = engine.max_model_len - 1
        ids = [prompt.prompt_ids(engine.tokenizer, q, d, limit) for q, d in zip(queries, documents, strict=True)]
        pooling = PoolingParams("last", normalize=False, classify_token_ids=prompt.label_ids)
        probs, tokens = await embed_inputs(ids, pooling, state, engine, request, priority, param)
        return [float(p[1]) for p in probs], tokens
    engine, how = embedding_source(served, state, "scores")
    texts = list(dict.fromkeys([*queries, *documents]))  # each distinct text embedded once
    pooling = PoolingParams(how.pooling)  # type: ignore[arg-type]  (normalised: the dot product is the cosine)
    vectors, tokens = await embed_inputs(texts, pooling, state, engine, request, priority, param)
    by_text = dict(zip(texts, vectors, strict=True))
    return [float(by_text[q] @ by_text[d]) for q, d in zip(queries, documents, strict=True)], tokens
