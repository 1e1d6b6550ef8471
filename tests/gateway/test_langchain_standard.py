"""The langchain-tests standard integration suite for ChatOpenAI pointed at our server. Tests that
need tool calling or structured output are expected to fail until the tools issue lands; image,
audio and PDF inputs are skipped (the served model is text-only)."""

import functools
import inspect

import httpx
import pytest
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

NEEDS_TOOLS = [
    "test_tool_calling", "test_tool_calling_async", "test_bind_runnables_as_tools",
    "test_tool_message_histories_string_content", "test_tool_message_histories_list_content",
    "test_tool_choice", "test_tool_calling_with_no_arguments", "test_tool_message_error_status",
    "test_structured_few_shot_examples", "test_structured_output", "test_structured_output_async",
    "test_structured_output_pydantic_2_v1", "test_structured_output_optional_param", "test_json_mode",
    "test_agent_loop", "test_unicode_tool_call_integration",
]

_server_url: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("lc-standard")) as s:
        _server_url["v1"] = s.base_url
        yield s
        s.assert_no_leak()


def _expect_failure(fn):
    """Re-declares an inherited test with an xfail mark, leaving the base class untouched."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            return await fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
    return pytest.mark.xfail(reason="tool calling and structured output: the tools issue", strict=True)(wrapper)


class TestSllmChatOpenAI(ChatModelIntegrationTests):
    @property
    def chat_model_class(self):
        return ChatOpenAI

    @property
    def chat_model_params(self) -> dict:
        return {"base_url": _server_url["v1"], "api_key": "EMPTY", "model": MODEL, "max_tokens": 24,
                "temperature": 0, "max_retries": 0, "stream_usage": True,
                # Each test runs on its own event loop: LangChain's shared async client would outlive it.
                "http_async_client": httpx.AsyncClient()}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True


for _name in NEEDS_TOOLS:
    setattr(TestSllmChatOpenAI, _name, _expect_failure(getattr(ChatModelIntegrationTests, _name)))
