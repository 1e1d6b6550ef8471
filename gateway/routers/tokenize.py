"""`POST /tokenize` and `POST /detokenize` with the served model's tokenizer (chat template too)."""

from fastapi import APIRouter

from engine.chat import render_chat
from gateway.protocol.tokenize import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from gateway.web.deps import State, get_engine
from gateway.web.errors import APIError

router = APIRouter()


@router.post("/tokenize", response_model=TokenizeResponse)
async def tokenize(body: TokenizeRequest, state: State) -> TokenizeResponse:
    engine = get_engine(state, body.model)
    tok = engine.tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "give exactly one of `prompt` and `messages`", param="prompt")
    if body.messages is not None:
        text = render_chat(tok, body.messages, add_generation_prompt=body.add_generation_prompt)
    else:
        text = body.prompt
    ids = tok.encode(text, add_special_tokens=body.add_special_tokens)
    strs = tok.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len, tokens=ids, token_strs=strs)


@router.post("/detokenize", response_model=DetokenizeResponse)
async def detokenize(body: DetokenizeRequest, state: State) -> DetokenizeResponse:
    engine = get_engine(state, body.model)
    vocab = len(engine.tokenizer)
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise APIError(400, f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})", param="tokens")
    return DetokenizeResponse(prompt=engine.tokenizer.decode(body.tokens))
