"""Concurrent streaming completions from a separate process, so the load's own client work does
not compete with the server for the test process's GIL. Prints one JSON result per stream:
[tokens seen in the stream's logprobs, completion_tokens from the usage chunk, finish_reason]."""

import asyncio
import json
import sys

import openai


async def one_stream(client: openai.AsyncOpenAI, model: str, i: int, max_tokens: int) -> list:
    stream = await client.completions.create(
        model=model, prompt=f"Story number {i}:", max_tokens=max_tokens, temperature=0.8, seed=i, logprobs=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    tokens, usage, finish = 0, None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            tokens += len(c.logprobs.tokens) if c.logprobs else 0
            finish = c.finish_reason or finish
    return [tokens, usage, finish]


async def main(base_url: str, model: str, n: int, max_tokens: int) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=300)
    results = await asyncio.gather(*(one_stream(client, model, i, max_tokens) for i in range(n)),
                                   return_exceptions=True)
    print(json.dumps([r if isinstance(r, list) else repr(r) for r in results]))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
