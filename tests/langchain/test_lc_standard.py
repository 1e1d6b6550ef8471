"""The langchain-tests standard suites for ChatSLLM on the default 135M model, in process.

Tool calling and structured output pass because decoding is grammar-constrained. What a 135M
model cannot do is answer correctly, so tests that check an answer's content are expected to
fail (xfail, with the reason); the rest must pass."""

import functools
import inspect

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from integrations.langchain import ChatSLLM

pytestmark = pytest.mark.default_model

PARAMS = {
    "model": "default",
    "temperature": 0,
    # Room for a forced tool call: its fixed prefix alone is ~15 tokens.
    "max_tokens": 64,
    # One torch thread: on a shared 2-core runner two threads per process oversubscribe the cores.
    "engine_config": {"num_kv_blocks": 1024, "num_threads": 1},
}

# Tests that check what the model decides or answers, not the format: a 135M model gets these wrong.
CONTENT_CHECKS = {
    # bind_tools without tool_choice ("auto"): whether to call is the model's choice, and this one
    # mostly answers in text (2 of 20 prompts call in tests/engine/test_tool_calling.py). Forced
    # calls (tool_choice "any" or a name) pass in test_tool_calling and friends.
    "test_agent_loop": "with tool_choice auto the 135M model usually answers in text instead of calling",
}

# Skipped to keep the suite near 2 minutes of CPU on a 2-core runner: the same path as a test that runs.
COVERED = {
    "test_structured_output_async": "the sync test_structured_output takes the same path per schema type; "
                                    "async streaming is covered by test_astream and test_lc_chat_model.py",
}


def _expect_failure(fn, reason: str):
    """Re-declares an inherited test with an xfail mark, leaving the base class untouched."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            return await fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
    # Not run: a known failure spends ~10 s of decoding to confirm itself.
    return pytest.mark.xfail(reason=reason, run=False)(wrapper)


@pytest.fixture(autouse=True)
def _skip_covered(request):
    """Skips COVERED tests without overriding them (the suite refuses overrides other than xfail)."""
    reason = COVERED.get(request.node.originalname)
    if reason:
        pytest.skip(reason)


class TestChatSLLMUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self):
        return ChatSLLM

    @property
    def chat_model_params(self) -> dict:
        # test_standard_params passes its own max_tokens next to these.
        return {k: v for k, v in PARAMS.items() if k != "max_tokens"}

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True


class TestChatSLLMIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self):
        return ChatSLLM

    @property
    def chat_model_params(self) -> dict:
        return PARAMS

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True


for _name, _reason in CONTENT_CHECKS.items():
    setattr(TestChatSLLMIntegration, _name, _expect_failure(getattr(ChatModelIntegrationTests, _name), _reason))
