"""`/tokenize` and `/detokenize` shapes, as vLLM's server has them."""

from pydantic import BaseModel, Field

from gateway.protocol.chat import ChatMessage
from gateway.protocol.common import Request


class TokenizeRequest(Request):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = False
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(Request):
    model: str | None = None
    tokens: list[int] = Field(min_length=0)


class DetokenizeResponse(BaseModel):
    prompt: str
