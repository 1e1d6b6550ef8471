"""Limits and accounting: admission (backpressure), per-key rate limits, engine priority, token usage, metrics."""
