"""ChatSLLM and a reasoning model (Qwen3's real chat template, thinking opened by the generation prompt,
on a tiny random checkpoint): the thinking is in `additional_kwargs["reasoning_content"]`, where ChatDeepSeek
and Ollama put it and langchain-core reads it as a reasoning block, never in `content`; streamed chunks add
up to the same text."""

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessageChunk

from engine.loader import resolve_model
from integrations.langchain import ChatSLLM
from tests.engine.conftest import make_tiny_llama

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
QWEN3_THINKING = QWEN3.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> ChatSLLM:
    folder = make_tiny_llama(tmp_path_factory.mktemp("lc-think") / "tiny-qwen3", resolve_model("default"), seed=3)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN3_THINKING}))
    # The budget forces </think> after 5 tokens, so a random model answers after thinking.
    return ChatSLLM(model=str(folder), temperature=0, max_tokens=12,
                    engine_config={"num_kv_blocks": 64, "num_threads": 1, "max_thinking_tokens": 5})


def test_thinking_is_reasoning_content_whole_and_streamed(llm):
    msg = llm.invoke("What's the weather in Seoul?")
    thinking = msg.additional_kwargs["reasoning_content"]
    assert thinking and "<think>" not in thinking and "</think>" not in thinking
    assert thinking not in msg.content and "</think>" not in msg.content
    assert [b["reasoning"] for b in msg.content_blocks if b["type"] == "reasoning"] == [thinking]

    # Streamed as deltas: more than one chunk carries thinking, in the best of three streams. The engine joins
    # outputs that piled up while the consumer was busy (engine/async_engine.py), and on CI's loaded two cores
    # all five thinking tokens of this tiny model once came as one chunk. Every stream adds up to the whole.
    reasoning_chunks = []
    for _ in range(3):
        chunks = list(llm.stream("What's the weather in Seoul?"))
        assert all(isinstance(c, AIMessageChunk) for c in chunks)
        whole = sum(chunks[1:], chunks[0])
        assert whole.additional_kwargs["reasoning_content"] == thinking and whole.content == msg.content
        reasoning_chunks.append(sum(1 for c in chunks if c.additional_kwargs.get("reasoning_content")))
        if reasoning_chunks[-1] > 1:
            break
    assert reasoning_chunks[-1] > 1, reasoning_chunks
