"""Plumbing shared by the two runs of langchain-tests' standard suites on the default model:
tests/gateway/test_langchain_standard.py (ChatOpenAI against our server) and
tests/langchain/test_lc_standard.py (ChatSLLM in process).

The suites refuse overrides of their tests other than an xfail mark, so known failures are marked
on a re-declared copy of the inherited test (the base class stays untouched), and skips and per-test
settings go through fixtures keyed by the test's name."""

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import pytest


def expect_failure(fn: Callable[..., Any], reason: str, *, run: bool = True) -> Callable[..., Any]:
    """`fn` re-declared with a strict xfail mark: an unexpected pass fails, so a stale reason shows.
    `run=False` does not run it (a known failure can spend many seconds of decoding to confirm itself)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            return await fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
    return pytest.mark.xfail(reason=reason, strict=True, run=run)(wrapper)


def mark_expected_failures(cls: type, reasons: Mapping[str, str], *, run: bool = True) -> None:
    """Marks each named test `cls` inherits as an expected failure, with its reason."""
    for name, reason in reasons.items():
        setattr(cls, name, expect_failure(getattr(cls, name), reason, run=run))


def inherited_name(request: pytest.FixtureRequest) -> str:
    """The inherited test's own name, without parameters (`test_structured_output`)."""
    return request.node.originalname


def skip_listed(request: pytest.FixtureRequest, reasons: Mapping[str, str]) -> None:
    """For an autouse fixture: skips the test if it is listed, with its reason."""
    reason = reasons.get(inherited_name(request))
    if reason:
        pytest.skip(reason)


def model_params(base: Mapping[str, Any], request: pytest.FixtureRequest, room: Mapping[str, Any],
                 needs_room: set[str]) -> dict[str, Any]:
    """A test's model settings: the suite's, a parametrized test's extras, and `room` (a larger
    max_tokens) for the tests whose tool call or JSON object does not fit the suite's budget."""
    params = {**base, **(getattr(request, "param", None) or {})}
    if inherited_name(request) in needs_room:
        params.update(room)
    return params


class SllmCapabilities:
    """What our chat models declare to the standard suites (put it first among the test class's bases)."""

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
