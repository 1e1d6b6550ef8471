"""Grammar-constrained decoding with xgrammar.

`SamplingParams.guided` names one constraint: `{"json_schema": {...}}`, `{"json_object": True}`,
`{"regex": "..."}`, `{"grammar": "<EBNF>"}` or `{"structural_tag": {...}}` (xgrammar's structural tag:
free text until a trigger, then a tag whose content follows a schema; this is how tool calls are
constrained). Each sequence gets its own matcher; every step the guided rows of the batch get a token
bitmask and the sampler masks their logits, so constrained and free requests share one batch."""

import json
import logging
from collections import OrderedDict
from typing import Any

import torch

from engine.errors import InvalidRequestError

log = logging.getLogger(__name__)

GUIDED_KINDS = ("json_schema", "json_object", "regex", "grammar", "structural_tag")


def guided_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, ensure_ascii=False)


class GuidedDecoding:
    """Compiles constraints (cached) and keeps the per-step bitmask work in one place."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: set[int], cache_size: int = 128):
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(eos_token_ids) or None
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size

    def compile(self, spec: dict[str, Any]):
        """Returns the compiled grammar for `spec`; a bad schema or grammar is the caller's 400."""
        key = guided_key(spec)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        kinds = [k for k in GUIDED_KINDS if spec.get(k) not in (None, False)]
        if len(kinds) != 1:
            raise InvalidRequestError(f"guided decoding takes exactly one of {GUIDED_KINDS}, got {sorted(spec)}", "guided")
        kind = kinds[0]
        value = spec[kind]
        try:
            if kind == "json_schema":
                schema = value if isinstance(value, str) else json.dumps(value)
                compiled = self.compiler.compile_json_schema(schema, strict_mode=bool(spec.get("strict", True)))
            elif kind == "json_object":
                compiled = self.compiler.compile_builtin_json_grammar()
            elif kind == "regex":
                compiled = self.compiler.compile_regex(value)
            elif kind == "grammar":
                compiled = self.compiler.compile_grammar(value)
            else:
                compiled = self.compiler.compile_structural_tag(value if isinstance(value, str) else json.dumps(value))
        except InvalidRequestError:
            raise
        except Exception as exc:  # xgrammar reports bad schemas/grammars with several exception types
            raise InvalidRequestError(f"invalid {kind} constraint: {exc}", "guided") from exc
        self._cache[key] = compiled
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return compiled

    def matcher(self, spec: dict[str, Any]):
        return self.xgr.GrammarMatcher(self.compile(spec))

    def bitmask(self, matchers: list[Any | None]) -> torch.Tensor | None:
        """One bitmask row per sampled row; rows without a matcher allow everything."""
        if not any(m is not None for m in matchers):
            return None
        mask = self.xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        for i, m in enumerate(matchers):
            if m is not None:
                m.fill_next_token_bitmask(mask, i)
        return mask

    def apply(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        self.xgr.apply_token_bitmask_inplace(logits, mask.to(logits.device))
