"""Routing a model name to upstream OpenAI-compatible servers instead of the embedded engine."""

from gateway.upstream.pool import UpstreamPool, UpstreamStream
from gateway.upstream.target import UpstreamTarget, redact_url

__all__ = ["UpstreamPool", "UpstreamStream", "UpstreamTarget", "redact_url"]
