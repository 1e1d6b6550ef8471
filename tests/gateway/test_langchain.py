"""LangChain's ChatOpenAI pointed at our server, over chat completions and over the Responses API
(which n8n's OpenAI Chat Model node uses by default through LangChain)."""

import asyncio

import httpx
import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("langchain")) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(params=[False, True], ids=["chat", "responses"])
def llm(server, request):
    # A fresh async HTTP client per test: LangChain's shared default one is bound to the first event loop.
    return ChatOpenAI(base_url=server.base_url, api_key="EMPTY", model=MODEL, max_tokens=12, temperature=0,
                      stream_usage=True, use_responses_api=request.param, max_retries=0,
                      http_async_client=httpx.AsyncClient())


MESSAGES = [SystemMessage("You are terse."), HumanMessage("Name a colour.")]


def test_invoke(llm):
    msg = llm.invoke(MESSAGES)
    assert msg.content and msg.usage_metadata["output_tokens"] <= 12
    usage = msg.usage_metadata
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_stream_with_usage(llm):
    chunks = list(llm.stream(MESSAGES))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    full = sum(chunks[1:], chunks[0])
    assert full.text == llm.invoke(MESSAGES).text
    assert full.usage_metadata and 0 < full.usage_metadata["output_tokens"] <= 12


def test_batch(llm):
    out = llm.batch([[HumanMessage("Say one.")], [HumanMessage("Say two.")], [HumanMessage("Say three.")]])
    assert len(out) == 3 and all(m.content for m in out)


def test_ainvoke_and_astream(llm):
    async def run():
        msg = await llm.ainvoke(MESSAGES)
        chunks = [c async for c in llm.astream(MESSAGES)]
        return msg, chunks

    msg, chunks = asyncio.run(run())
    assert msg.text and "".join(c.text for c in chunks) == msg.text
