"""The OpenAI-compatible HTTP server in front of the embedded engine (`sllm serve`)."""
