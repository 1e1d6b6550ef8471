"""The engine's per-token logprobs in the two OpenAI shapes: completions' parallel lists and
chat's list of token objects."""

from engine.outputs import TokenLogprobs
from gateway.protocol.chat import ChoiceLogprobs, TokenLogprob, TopLogprob
from gateway.protocol.completions import CompletionLogprobs


def completion_logprobs(items: list[TokenLogprobs], num_top: int, text_offset: int) -> CompletionLogprobs:
    out = CompletionLogprobs()
    offset = text_offset
    for lp in items:
        out.tokens.append(lp.chosen.token)
        out.token_logprobs.append(lp.chosen.logprob)
        top = {t.token: t.logprob for t in lp.top[:num_top]}
        top.setdefault(lp.chosen.token, lp.chosen.logprob)  # vLLM's habit: the sampled token is always there
        out.top_logprobs.append(top)
        out.text_offset.append(offset)
        offset += len(lp.chosen.token)
    return out


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8"))


def chat_logprobs(items: list[TokenLogprobs], num_top: int) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=[
        TokenLogprob(
            token=lp.chosen.token,
            logprob=lp.chosen.logprob,
            bytes=_bytes(lp.chosen.token),
            top_logprobs=[TopLogprob(token=t.token, logprob=t.logprob, bytes=_bytes(t.token))
                          for t in lp.top[:num_top]],
        )
        for lp in items
    ])
