"""`/score` (also `/v1/score`) request and response shapes, as vLLM has them: `text_1` scored against
each `text_2` (one against many, or pairwise when both are lists of one length)."""

import time
from typing import Literal

from pydantic import BaseModel, Field

from gateway.protocol.common import Request


class ScoreRequest(Request):
    text_1: str | list[str]
    text_2: str | list[str]
    model: str | None = None
    priority: int | None = None  # ours, as on the other endpoints


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    data: list[ScoreData]
    usage: ScoreUsage
