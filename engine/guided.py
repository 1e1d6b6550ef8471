"""Grammar-constrained decoding with xgrammar.

`SamplingParams.guided` names one constraint (engine/guided_spec.py: a JSON schema, any JSON object,
a regex, an EBNF grammar or a structural tag), compiled once per constraint. Each sequence gets its own
matcher; every step the guided rows of the batch get a token bitmask and the sampler masks their
logits, so constrained and free requests share one batch.

Two steering rules sit on top of the grammar, both off-able engine settings:

- Loop breaker (`EngineConfig.guided_loop_repeats`): a small model at temperature 0 can repeat a
  cycle of tokens inside a constrained string ("sampu, sampu, sampu, ...") until max_tokens, so the
  JSON never completes. Once the last tokens are one cycle repeated that many times, the next token
  is restricted to grammar-allowed tokens that end what the cycle is stuck in: the string (a token
  with an unescaped `"`), or, for a cycle of whole elements, the array or object (`"]`, `]`, `}`...)
  at the point where the cycle would end an element. JSON constraints only (tool calls included);
  free text before a call, regexes and EBNF grammars are left alone.
- Trigger bias (`EngineConfig.tool_call_bias`): under a triggered structural tag (`tool_choice`
  auto), a logit bias on the tokens that begin a trigger at the first generated token, where the
  model decides between answering in text and opening a call.
- Budget-aware closing (`EngineConfig.guided_budget_close`, `SamplingParams.guided_budget_close`):
  compact JSON and tool calls are closed when the tokens left before max_tokens are just enough, and a
  call list ends after a complete call where another would not fit (engine/json_budget.py); after
  sampling, so it can replace the sampled token.
- Avoided texts (`GuidedSpec.avoid`, per request): the output is steered off
  each text at the last structural choice on its way (engine/avoid_texts.py); the chat layer
  passes the tool calls whose results are already in the conversation.

A thinking section (`SamplingParams.thinking`, engine/thinking.py) comes before all of this: the grammar
and its steering start after its end mark, and a thinking budget forces that mark."""

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.avoid_texts import TextAvoider
from engine.errors import InvalidRequestError
from engine.guided_spec import Grammar, GuidedSpec, JsonObject, JsonSchema, Regex, StructuralTag
from engine.json_budget import BudgetCloser, CallsState, JsonState
from engine.thinking import Thinking, ThinkingGate

log = logging.getLogger(__name__)

# A cycle must also span this many tokens before it counts as a loop, so short legitimate repeats
# ("1000", "ha ha ha") are left alone: a 1-token cycle needs 8 repeats, a 2-token one 4.
LOOP_MIN_SPAN = 8
LOOP_MAX_PERIOD = 16
# The trigger bias for models whose chat template does not render tools (SmolLM2): not tuned to call
# functions, they almost never open a call on their own. Measured on the default model at temperature
# 0 under tool_choice auto (tests/engine/test_tool_calling.py's 20 tool prompts, 10 prompts no tool
# fits): bias 0 calls on 0/20 and 0/10, 2 on 11/20 and 1/10, 3 on 14/20 and 1/10, 4 on 16/20 and 3/10.
# After a tool result none of these calls again (0/20): the model answers, so an agent loop ends.
DEFAULT_TRIGGER_BIAS = 3.0
_KIND_NAMES = {JsonSchema: "json_schema", JsonObject: "json_object", Regex: "regex", Grammar: "grammar",
               StructuralTag: "structural_tag"}


def loop_period(tokens: list[int], repeats: int, max_period: int = LOOP_MAX_PERIOD,
                min_span: int = LOOP_MIN_SPAN) -> int:
    """The shortest period p such that the last `max(repeats * p, min_span)` tokens repeat with
    period p (a cycle seen `repeats` times or more), or 0 when the tail does not loop."""
    n = len(tokens)
    for p in range(1, max_period + 1):
        span = max(repeats * p, min_span)
        if span > n:
            break
        if tokens[-1] != tokens[-1 - p]:
            continue
        if all(tokens[-i] == tokens[-i - p] for i in range(2, span - p + 1)):
            return p
    return 0


def _pack(flags: torch.Tensor) -> torch.Tensor:
    """A bool vector as xgrammar's bitmask row: int32 words, bit j of word w is token 32 * w + j."""
    words = (flags.numel() + 31) // 32
    padded = torch.zeros(words * 32, dtype=torch.int64)
    padded[: flags.numel()] = flags.to(torch.int64)
    packed = (padded.view(words, 32) << torch.arange(32, dtype=torch.int64)).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)  # bit 31 is the sign


@dataclass(frozen=True)
class _TokenClasses:
    """Token sets the steering rules need, from the decoded vocabulary, packed as bitmask rows."""

    everything: torch.Tensor  # every real token
    words: torch.Tensor  # letters only, no prefix of true/false/null: allowed inside strings, not between
    closes_string: torch.Tensor  # holds an unescaped `"`
    closes_element: torch.Tensor  # `"` then `]` or `}`: ends a string and its array or object
    closes_container: torch.Tensor  # `]` or `}` without a `"`
    quote_ids: frozenset[int]

    @classmethod
    def build(cls, decoded_vocab: list[bytes], vocab_size: int) -> "_TokenClasses":
        n = vocab_size
        words, string, element, container = (torch.zeros(n, dtype=torch.bool) for _ in range(4))
        quotes = set()
        for i, raw in enumerate(decoded_vocab[:n]):
            text = raw.decode("utf-8", errors="replace")
            stripped = text.lstrip(" ")
            words[i] = (len(stripped) > 1 and stripped.isascii() and stripped.isalpha()
                        and not any(lit.startswith(stripped) for lit in ("true", "false", "null")))
            quote = next((k for k, c in enumerate(text) if c == '"' and (k == 0 or text[k - 1] != "\\")), -1)
            if quote >= 0:
                quotes.add(i)
                string[i] = True
                element[i] = "]" in text[quote:] or "}" in text[quote:]
            else:
                container[i] = "]" in text or "}" in text
        everything = torch.zeros(n, dtype=torch.bool)
        everything[: len(decoded_vocab)] = True
        return cls(_pack(everything), _pack(words), _pack(string), _pack(element), _pack(container),
                   frozenset(quotes))


def default_trigger_bias(tokenizer) -> float:
    """A chat template that renders tools belongs to a model tuned to decide when to call; the
    others get our preamble and a nudge toward the call (see DEFAULT_TRIGGER_BIAS)."""
    from engine.chat.template import template_supports_tools

    return 0.0 if template_supports_tools(tokenizer) else DEFAULT_TRIGGER_BIAS


@dataclass(frozen=True)
class _Compiled:
    grammar: Any  # xgrammar's CompiledGrammar
    triggers: tuple[bytes, ...]  # of a top-level triggered tag
    is_json: bool  # JSON, whose string and container syntax the loop breaker knows
    # A fresh tracker of the JSON (or tool calls) written, for budget-aware closing; None: not ours to close
    closing_state: Callable[[], JsonState | CallsState] | None = None


def _closing_state(spec: GuidedSpec) -> Callable[[], JsonState | CallsState] | None:
    """How to follow `spec`'s output for budget-aware closing: JSON (a schema, or any object), or
    tool calls described by `engine.chat.constraints.guided_for_tools` (their `ToolCalls`)."""
    # The closing is compact JSON, which grammars allowing any whitespace accept too.
    c = spec.constraint
    if isinstance(c, JsonSchema):
        schema = c.schema_dict()
        return lambda: JsonState(schema)
    if isinstance(c, JsonObject):
        return lambda: JsonState({"type": "object"})
    if isinstance(c, StructuralTag) and c.tool_calls is not None:
        calls = c.tool_calls
        return lambda: CallsState(list(calls.calls), calls.trigger, calls.at_least_one)
    return None


def _only(row: torch.Tensor, token: int) -> None:
    """A bitmask row allowing `token` alone."""
    row.zero_()
    bit = 1 << (token % 32)
    row[token // 32] = bit - 2**32 if bit >= 2**31 else bit


class GuidedMatcher:
    """One sequence's grammar state: xgrammar's matcher (None: no grammar, a thinking budget alone), plus
    what the steering rules need to know of its constraint, and the thinking section it starts after."""

    __slots__ = ("matcher", "triggers", "is_json", "closer", "avoid", "gate", "start", "_vocab", "_continuing",
                 "_grammar_lost")

    def __init__(self, matcher, compiled: _Compiled | None, closer: BudgetCloser | None = None,
                 avoid: tuple[bytes, ...] = (), gate: ThinkingGate | None = None,
                 vocab: list[bytes] | None = None, continuing: Callable[[bytes, bytes], torch.Tensor] | None = None):
        self.matcher = matcher
        self.triggers = compiled.triggers if compiled is not None else ()
        self.is_json = compiled.is_json if compiled is not None else False
        self.closer = closer
        self.avoid = avoid  # texts the output must not finish (engine/avoid_texts.py)
        self.gate = gate
        self.start = 0  # output tokens before the grammar's part (the thinking)
        self._vocab = vocab  # each token's bytes, for the gate
        self._continuing = continuing  # (written, mark) -> packed row of the tokens continuing the mark
        self._grammar_lost = False  # before a thinking is opened or not: a token the grammar refused

    @property
    def thinking(self) -> bool:
        """Still before the end of the thinking: the grammar waits."""
        return self.gate is not None and not self.gate.passed

    @property
    def idle(self) -> bool:
        """Nothing left to constrain: the thinking is over and there is no grammar."""
        return self.matcher is None and not self.thinking

    def accepts(self, tokens: list[int]) -> bool:
        """Whether the grammar takes `tokens` from here; its state is left as it was."""
        taken = 0
        for token in tokens:
            if not self.matcher.accept_token(token):
                break
            taken += 1
        if taken:
            self.matcher.rollback(taken)
        return taken == len(tokens)

    def accept_token(self, token: int) -> bool:
        gate = self.gate
        if gate is None or gate.passed:
            return self.matcher.accept_token(token) if self.matcher is not None else True
        before = gate.state
        assert self._vocab is not None
        gate.feed(token, self._vocab[token])
        if before == "maybe" and self.matcher is not None and not self._grammar_lost:
            self._grammar_lost = not self.matcher.accept_token(token)  # no thinking may follow after all
        if before == "maybe" and gate.state == "thinking" and self.matcher is not None:
            self.matcher.reset()  # the thinking was opened: the grammar starts after it
            self._grammar_lost = False
        if not gate.passed:
            return True
        self.start = gate.tokens
        if before == "maybe":  # no thinking at all: the grammar has read every token
            return not self._grammar_lost
        if self.closer is not None:
            self.closer.begin(self.start, gate.after)
        return self.matcher is None or not gate.after or self.matcher.accept_string(gate.after)

    def is_terminated(self) -> bool:
        return self.matcher is not None and not self.thinking and self.matcher.is_terminated()

    def fill(self, mask: torch.Tensor, row: int) -> None:
        gate = self.gate
        if gate is not None and not gate.passed:
            forced = gate.forced_token()
            if forced is not None:
                _only(mask[row], forced)
            elif gate.state == "maybe" and self.matcher is not None:
                # The grammar's tokens, and those that open the thinking instead.
                assert self._continuing is not None
                if self._grammar_lost:
                    mask[row].zero_()
                else:
                    self.matcher.fill_next_token_bitmask(mask, row)
                mask[row] |= self._continuing(bytes(gate.buf), gate.spec.start.encode())
            return  # thinking: free text
        if self.matcher is not None:
            self.matcher.fill_next_token_bitmask(mask, row)


class GuidedDecoding:
    """Compiles constraints (cached) and keeps the per-step bitmask work in one place."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: set[int], cache_size: int = 128, *,
                 loop_repeats: int = 3, trigger_bias: float | None = None, budget_close: bool = True):
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self.budget_close = budget_close
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos = eos if eos in eos_token_ids else (min(eos_token_ids) if eos_token_ids else None)
        self._closing_ids: OrderedDict[str, list[int]] = OrderedDict()
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(eos_token_ids) or None
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._decoded = info.decoded_vocab
        self._classes: _TokenClasses | None = None  # built on the first loop
        self._avoider: TextAvoider | None = None  # built on the first request with texts to avoid
        self._cache: OrderedDict[str, _Compiled] = OrderedDict()
        self._trigger_cache: dict[tuple[bytes, ...], list[int]] = {}
        self._mark_cache: OrderedDict[tuple[bytes, bytes], torch.Tensor] = OrderedDict()
        self._cache_size = cache_size
        self.loop_repeats = loop_repeats
        self.trigger_bias = default_trigger_bias(tokenizer) if trigger_bias is None else trigger_bias

    def _compile(self, c: Any):
        try:
            if isinstance(c, JsonSchema):
                schema = c.schema if isinstance(c.schema, str) else json.dumps(c.schema)
                return self.compiler.compile_json_schema(schema, strict_mode=c.strict, any_whitespace=c.any_whitespace)
            if isinstance(c, JsonObject):
                if c.any_whitespace:
                    return self.compiler.compile_builtin_json_grammar()
                # OpenAI's json_object is an object, never another JSON value.
                return self.compiler.compile_json_schema('{"type": "object"}', strict_mode=False, any_whitespace=False)
            if isinstance(c, Regex):
                return self.compiler.compile_regex(c.pattern)
            if isinstance(c, StructuralTag):
                return self.compiler.compile_structural_tag(c.tag if isinstance(c.tag, str) else json.dumps(c.tag))
            return self.compiler.compile_grammar(c.ebnf)
        except Exception as exc:  # xgrammar reports bad schemas/grammars with several exception types
            raise InvalidRequestError(f"invalid {_KIND_NAMES[type(c)]} constraint: {exc}", "guided") from exc

    def _trigger_starts(self, triggers: tuple[bytes, ...]) -> list[int]:
        """Tokens that begin one of `triggers` ("<" for "<tool_call>")."""
        ids = self._trigger_cache.get(triggers)
        if ids is None:
            ids = self._trigger_cache[triggers] = [
                i for i, raw in enumerate(self._decoded[: self.vocab_size])
                if raw and any(t.startswith(raw) or raw.startswith(t) for t in triggers)]
        return ids

    def compile(self, spec: GuidedSpec) -> _Compiled:
        """Compiles `spec`'s constraint (cached); a bad schema or grammar is the caller's 400."""
        key = spec.key()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        # Regexes and EBNF grammars (text-to-SQL's) have their own string syntax, which the loop
        # breaker leaves alone.
        c = spec.constraint
        triggers = c.triggers() if isinstance(c, StructuralTag) else ()
        compiled = _Compiled(self._compile(c), triggers, spec.is_json, _closing_state(spec))
        self._cache[key] = compiled
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return compiled

    def matcher(self, spec: GuidedSpec | None, budget_close: bool = False,
                thinking: Thinking | None = None) -> GuidedMatcher:
        """`budget_close`: the request allows budget-aware closing (SamplingParams.guided_budget_close,
        with max_tokens and without ignore_eos / min_tokens); it also needs the engine's setting.
        `thinking`: the grammar starts after that section (engine/thinking.py)."""
        compiled = self.compile(spec) if spec is not None else None
        closer = None
        if (compiled is not None and budget_close and self.budget_close and compiled.closing_state is not None
                and self.eos is not None):
            closer = BudgetCloser(compiled.closing_state(), self.eos)
        avoid = tuple(t.encode() for t in spec.avoid) if spec is not None else ()
        gate = ThinkingGate(thinking, self._encode(thinking.end)) if thinking is not None else None
        grammar = self.xgr.GrammarMatcher(compiled.grammar) if compiled is not None else None
        return GuidedMatcher(grammar, compiled, closer, avoid, gate, self._decoded, self._mark_tokens)

    def _mark_tokens(self, written: bytes, mark: bytes) -> torch.Tensor:
        """Packed row of the tokens that continue `written` (leading blanks aside) toward `mark` or past it."""
        key = (written, mark)
        row = self._mark_cache.get(key)
        if row is None:
            flags = torch.zeros(self.vocab_size, dtype=torch.bool)
            for i, raw in enumerate(self._decoded[: self.vocab_size]):
                text = (written + raw).lstrip()
                flags[i] = bool(raw) and (mark.startswith(text) or text.startswith(mark))
            row = self._mark_cache[key] = _pack(flags)
            if len(self._mark_cache) > 64:
                self._mark_cache.popitem(last=False)
        return row

    # -- budget-aware closing (engine/json_budget.py) ---------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        ids = self._closing_ids.get(text)
        if ids is None:
            ids = self._closing_ids[text] = self.tokenizer.encode(text, add_special_tokens=False) if text else []
            if len(self._closing_ids) > 4096:
                self._closing_ids.popitem(last=False)
        return ids

    def close_on_budget(self, tokens: list[int], seqs: list) -> None:
        """After sampling: replaces the tokens of sequences whose JSON must close now to fit in
        max_tokens (BudgetCloser.step). Far from the budget it only compares two integers."""
        for i, seq in enumerate(seqs):
            m = seq.matcher
            closer = m.closer if m is not None else None
            if closer is None or closer.off or m.thinking:
                continue
            left = seq.params.max_tokens - seq.num_output_tokens
            if not closer.is_near(left):
                continue
            closer.catch_up(seq.output_token_ids, self._decoded)
            tokens[i] = closer.step(tokens[i], left, self._decoded, self._encode, m.accepts)

    # -- per step ----------------------------------------------------------------------------------

    def constrain(self, logits: torch.Tensor, seqs: list, rows: list[int]) -> None:
        """Masks `logits` rows `rows` (those of sequences with a matcher) in place: each row's grammar
        mask, narrowed by the loop breaker, after the trigger bias on a first token."""
        mask = self.xgr.allocate_token_bitmask(len(seqs), self.vocab_size)
        for i in rows:
            seq = seqs[i]
            m = seq.matcher
            m.fill(mask, i)
            if m.thinking:
                continue
            # The steering reads the grammar's part of the output, after any thinking.
            output = seq.output_token_ids[m.start:] if m.start else seq.output_token_ids
            if self.loop_repeats and m.is_json:
                self._break_loop(mask[i], output)
            if m.avoid:
                self._text_avoider().mask(mask[i], output, m.avoid, m)
            if self.trigger_bias and m.triggers and seq.num_output_tokens == m.start:
                logits[i, self._trigger_starts(seq.matcher.triggers)] += self.trigger_bias
        self.xgr.apply_token_bitmask_inplace(logits, mask.to(logits.device), indices=rows)

    def _text_avoider(self) -> TextAvoider:
        if self._avoider is None:
            self._avoider = TextAvoider(self._decoded, self._encode,
                                        lambda: self.xgr.allocate_token_bitmask(1, self.vocab_size))
        return self._avoider

    def _break_loop(self, row: torch.Tensor, output: list[int]) -> None:
        period = loop_period(output, self.loop_repeats)
        if not period:
            return
        if self._classes is None:
            self._classes = _TokenClasses.build(self._decoded, self.vocab_size)
        c = self._classes
        if torch.equal(row & c.everything, c.everything):
            return  # free text (before a tool call's trigger): no string to close
        if bool((row & c.words).any()):  # inside a string
            if not any(t in c.quote_ids for t in output[-period:]):
                closers = c.closes_string  # the cycle is within this string
            elif output[-period] in c.quote_ids:
                closers = c.closes_element  # whole elements repeat and the cycle would close this one now
            else:
                return  # mid-element: wait for its end rather than cut a word or leave ""
        else:
            closers = c.closes_container
        narrowed = row & closers
        if bool(narrowed.any()):
            row.copy_(narrowed)


class EngineGuidedDecoding:
    """An engine's GuidedDecoding, built on its first constrained request (xgrammar reads the whole
    vocabulary), behind the lock its compile cache needs: requests are checked on their caller's thread
    (engine/input_check.py), their sequences made on the step thread."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: set[int], config, sampler):
        self._args = (tokenizer, vocab_size, eos_token_ids)
        self._config = config
        self._sampler = sampler  # masks its logits through the GuidedDecoding once there is one
        self._lock = threading.Lock()
        self.backend: GuidedDecoding | None = None

    def get(self) -> GuidedDecoding:
        if self.backend is None:
            c = self._config
            self.backend = GuidedDecoding(*self._args, loop_repeats=c.guided_loop_repeats,
                                          trigger_bias=c.tool_call_bias, budget_close=c.guided_budget_close)
            self._sampler.guided = self.backend
        return self.backend

    def compile(self, spec: GuidedSpec) -> None:
        with self._lock:
            self.get().compile(spec)

    def matcher(self, p) -> GuidedMatcher | None:
        """A new sequence's matcher under its SamplingParams `p` (None when unconstrained). Budget-aware
        closing needs a max_tokens that ends the output, so not with ignore_eos or min_tokens. A thinking
        section needs one for a grammar after it or for its budget."""
        thinking = p.thinking
        if thinking is not None and not p.guided and thinking.max_tokens is None:
            thinking = None  # nothing to gate
        if not p.guided and thinking is None:
            return None
        close = p.guided_budget_close and p.max_tokens is not None and not p.ignore_eos and not p.min_tokens
        with self._lock:
            return self.get().matcher(p.guided, budget_close=close, thinking=thinking)

