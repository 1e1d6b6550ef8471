"""vLLM's `/score`: `text_1` against `text_2` as pairs (a string or a one-item list against a list: one
against each; two lists of one length: pairwise), each scored as the model scores pairs
(gateway/serving/pair_scores.py)."""

from fastapi import Request

from gateway.protocol.common import random_id
from gateway.protocol.score import ScoreData, ScoreRequest, ScoreResponse, ScoreUsage
from gateway.registry import Served
from gateway.serving.pair_scores import score_pairs
from gateway.serving.rerank import MAX_DOCUMENTS
from gateway.state import ServerState
from gateway.web.errors import APIError


def _texts(value: str | list[str], param: str) -> list[str]:
    texts = [value] if isinstance(value, str) else list(value)
    if not texts:
        raise APIError(400, f"{param} must not be empty", param=param)
    if len(texts) > MAX_DOCUMENTS:
        raise APIError(400, f"at most {MAX_DOCUMENTS} texts are allowed", param=param)
    for i, text in enumerate(texts):
        if not text:
            raise APIError(400, f"{param}[{i}] is empty", param=param)
    return texts


async def run_score(body: ScoreRequest, state: ServerState, served: Served,
                    request: Request | None = None) -> ScoreResponse:
    first, second = _texts(body.text_1, "text_1"), _texts(body.text_2, "text_2")
    if len(first) == 1:
        first = first * len(second)
    elif len(first) != len(second):
        raise APIError(400, f"text_1 holds {len(first)} texts and text_2 {len(second)}: give one text_1, or as "
                       "many as text_2", param="text_2")
    scores, tokens = await score_pairs(served, state, first, second, request, body.priority, "text_2")
    return ScoreResponse(id=random_id("score-"), model=served.name,
                         data=[ScoreData(index=i, score=s) for i, s in enumerate(scores)],
                         usage=ScoreUsage(prompt_tokens=tokens, total_tokens=tokens))
