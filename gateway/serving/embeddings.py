"""Embeddings served by an embedded engine: every input one prefill-only engine request (pooled final
hidden states, engine/pooling.py), all submitted at once so the engine batches them beside generation;
or by an encoder model (engine/encoder_engine.py), which batches them by length among themselves;
vectors as floats or, as the openai SDKs ask by default, base64 of little-endian float32."""

import asyncio
import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request, Response

from engine import AsyncEngine, InvalidRequestError, SamplingParams
from engine.encoder_engine import EncoderEngine
from engine.matryoshka import Matryoshka
from engine.pooling import PoolingParams
from gateway.limits.priority import fairness_key, priority_of
from gateway.protocol.common import random_id
from gateway.protocol.embeddings import MAX_INPUTS, Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage
from gateway.registry import EmbeddedModel, EncoderModel, PooledModel, Served, UpstreamModel
from gateway.serving import proxy
from gateway.serving.generation import unless_disconnected
from gateway.state import ServerState
from gateway.web.errors import APIError

# Inputs tokenized on the event loop; more go to a thread so other requests keep flowing.
INLINE_INPUTS = 16


@dataclass(frozen=True)
class EmbeddingModel:
    """How a served model embeds: its pooling, whether its vectors are L2-normalised (a sentence-transformers
    encoder without a Normalize module is served as it is trained), and whether (and to which sizes) it was
    trained for shorter vectors (Matryoshka, engine/matryoshka.py), which is what makes `dimensions` meaningful."""

    pooling: str = "mean"
    matryoshka: Matryoshka = Matryoshka()
    normalize: bool = True


def embedding_source(served: Served, state: ServerState, use: str = "embeddings"
                     ) -> tuple[AsyncEngine | EncoderEngine, EmbeddingModel]:
    """The engine that embeds for `served` and how: an encoder embedding model as its folder says, a
    "-embed" name with its pooling, a chat model's own name pooled as the server pools (llama.cpp's way)."""
    if isinstance(served, EncoderModel):
        if served.task != "embed":
            raise APIError(400, f"`{served.name}` is a cross-encoder: it scores pairs on /v1/rerank and /score",
                           param="model", code="unsupported_for_cross_encoder")
        encoder = served.encoder()
        return encoder, EmbeddingModel(encoder.spec.pooling, encoder.matryoshka, encoder.spec.normalize)
    if isinstance(served, PooledModel):
        engine = served.ready()
        return engine, EmbeddingModel(served.pooling, engine.matryoshka)
    if isinstance(served, EmbeddedModel):
        engine, pooling = served.ready(), state.settings.embedding_pooling
        return engine, EmbeddingModel(pooling if pooling != "none" else "mean", engine.matryoshka)
    raise APIError(400, f"`{served.name}` is a LoRA adapter; {use} come from base models", param="model",
                   code="unsupported_for_adapter")


def _inputs(value: str | list) -> list[str | list[int]]:
    if isinstance(value, str):
        items: list = [value]
    elif value and all(isinstance(v, int) for v in value):
        items = [list(value)]
    else:
        items = list(value)
    if not items:
        raise APIError(400, "input must not be empty", param="input")
    if len(items) > MAX_INPUTS:
        raise APIError(400, f"input holds {len(items)} items; at most {MAX_INPUTS} are allowed", param="input")
    for i, item in enumerate(items):
        if not item:
            raise APIError(400, f"input[{i}] is empty", param="input")
    return items


def _tokenize(engine: AsyncEngine | EncoderEngine, items: list[str | list[int]], param: str) -> list[list[int]]:
    params = SamplingParams(max_tokens=1)
    out = []
    for i, item in enumerate(items):
        try:
            out.append(engine.check_request(item, params))
        except InvalidRequestError as exc:
            raise APIError(400, f"{param}[{i}]: {exc.message}", param=param) from None
    return out


def _encode(vector: np.ndarray, fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def embed_inputs(items: list[str | list[int]], pooling: PoolingParams, state: ServerState,
                       engine: AsyncEngine | EncoderEngine, request: Request | None, client_priority: int | None = None,
                       param: str = "input") -> tuple[list[np.ndarray], int]:
    """Every item's vector (in order) and the tokens they took: one engine request each, all at once."""
    priority = priority_of(state.settings, request, client_priority)
    key = fairness_key(request)
    slot = state.admission.acquire() if request is not None else None
    try:
        if len(items) > INLINE_INPUTS or any(isinstance(i, str) and len(i) > 8192 for i in items):
            token_ids = await asyncio.to_thread(_tokenize, engine, items, param)
        else:
            token_ids = _tokenize(engine, items, param)
        rid = random_id("embd-")
        work = asyncio.gather(*[engine.embed(ids, pooling, f"{rid}-{i}", priority, key)
                                for i, ids in enumerate(token_ids)])
        outs = await unless_disconnected(request, work)
    finally:
        if slot is not None:
            slot.release()
    return [out.embedding.numpy() for out in outs], sum(len(ids) for ids in token_ids)


async def run_embeddings(body: EmbeddingRequest, state: ServerState, engine: AsyncEngine | EncoderEngine,
                         model_name: str, how: EmbeddingModel, request: Request | None = None) -> EmbeddingResponse:
    items = _inputs(body.input)
    hidden = engine.hidden_size
    if body.dimensions is not None:
        if not 1 <= body.dimensions <= hidden:
            raise APIError(400, f"dimensions must be between 1 and {hidden}", param="dimensions")
        why = how.matryoshka.refusal(body.dimensions, hidden)
        if why is not None:
            raise APIError(400, f"`{model_name}` {why}", param="dimensions", code="unsupported_parameter")
    pooling = PoolingParams(how.pooling, normalize=how.normalize, dimensions=body.dimensions)  # type: ignore[arg-type]
    vectors, tokens = await embed_inputs(items, pooling, state, engine, request, body.priority)

    def encode() -> list[Embedding]:
        return [Embedding(index=i, embedding=_encode(v, body.encoding_format)) for i, v in enumerate(vectors)]

    # As with tokenizing: many vectors take a thread (1,024 of 384 floats: ~70 ms), so other requests keep flowing.
    data = await asyncio.to_thread(encode) if len(vectors) > INLINE_INPUTS else encode()
    return EmbeddingResponse(data=data, model=model_name, usage=EmbeddingUsage(prompt_tokens=tokens,
                                                                               total_tokens=tokens))


async def serve_embeddings(body: EmbeddingRequest, state: ServerState, request: Request | None = None,
                           raw: dict[str, Any] | None = None) -> EmbeddingResponse | Response | dict[str, Any]:
    """/v1/embeddings for the router and batch lines alike (as routing.route is for chat): no model named,
    the default embedding model; an upstream model gets the body as the client sent it (`raw`, a batch
    line's; over HTTP read from `request`), relayed over HTTP, its JSON without; any other model embeds here."""
    served = state.models.resolve(body.model) if body.model else state.models.embedding_default()
    if isinstance(served, UpstreamModel):
        if request is None:
            assert raw is not None, "a call without HTTP passes the body to forward"
            return await proxy.call(state, served, "/embeddings", raw)
        return await proxy.forward(state, served, "/embeddings", raw if raw is not None else
                                   await proxy.request_body(request), request)
    engine, how = embedding_source(served, state)
    return await run_embeddings(body, state, engine, served.name, how, request)
