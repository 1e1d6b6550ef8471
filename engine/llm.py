"""The offline API: `LLM(model=...).generate(prompts, params)`, as in vLLM."""

import itertools

from tqdm import tqdm

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoRARequest
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str = "default", **config):
        self.engine = LLMEngine(EngineConfig(model=model, **config))
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: str | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: list[int] | None = None,
        lora_request: LoRARequest | str | list[LoRARequest | str | None] | None = None,
    ) -> list[RequestOutput]:
        """Runs every prompt to completion with continuous batching; outputs come back in prompt order.
        `priority`, one per prompt as vLLM takes it: lower runs first. `lora_request`: one adapter for
        every prompt, or one per prompt (None: the base model), as vLLM takes it."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        order: dict[str, int] = {}
        priorities = priority if priority is not None else [0] * len(prompts)
        loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(prompts)
        for i, (prompt, p, prio, lora) in enumerate(zip(prompts, params_list, priorities, loras, strict=True)):
            rid = f"offline-{next(self._ids)}"
            try:
                self.engine.add_request(rid, prompt, p, priority=prio, lora_request=lora)
            except BaseException:
                for added in order:  # the call fails whole: no orphans holding blocks or adapters
                    self.engine.abort_request(added)
                raise
            order[rid] = i
        results: list[RequestOutput | None] = [None] * len(prompts)
        with tqdm(total=len(prompts), desc="generate", disable=not use_tqdm, unit="req") as bar:
            while self.engine.has_unfinished_requests():
                for out in self.engine.step():
                    if out.finished:
                        results[order[out.request_id]] = out
                        bar.update(1)
        return results  # type: ignore[return-value]

    def chat(self, messages: list[list[dict]] | list[dict], params: SamplingParams | None = None, **kw):
        if messages and isinstance(messages[0], dict):
            messages = [messages]  # type: ignore[list-item]
        prompts = [self.apply_chat_template(m) for m in messages]  # type: ignore[arg-type]
        return self.generate(prompts, params, **kw)

    def apply_chat_template(self, messages: list[dict]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
