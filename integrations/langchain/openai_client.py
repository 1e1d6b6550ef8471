"""`sllm_chat_openai`: LangChain's own ChatOpenAI, set up for a running sllm server.

Use it when the model runs behind `sllm serve` (another machine, shared by n8n and other clients);
use ChatSLLM to run the engine inside this process instead."""

from typing import Any

import httpx
from langchain_openai import ChatOpenAI


def served_models(base_url: str, api_key: str = "EMPTY", timeout: float = 10.0) -> list[str]:
    """The model ids `GET {base_url}/models` lists."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout)
    resp.raise_for_status()
    return [m["id"] for m in resp.json().get("data", [])]


def sllm_chat_openai(base_url: str, api_key: str = "EMPTY", model: str | None = None, **kwargs: Any) -> ChatOpenAI:
    """A ChatOpenAI for the sllm server at `base_url` (e.g. "http://localhost:8000/v1").

    `model=None` takes the server's first model from /models (one request, now). Usage comes back on
    streams too (`stream_usage=True`); other keyword arguments go to ChatOpenAI as they are."""
    if model is None:
        models = served_models(base_url, api_key)
        if not models:
            raise ValueError(f"the server at {base_url} lists no models; pass model=")
        model = models[0]
    kwargs.setdefault("stream_usage", True)
    return ChatOpenAI(base_url=base_url, api_key=api_key, model=model, **kwargs)
