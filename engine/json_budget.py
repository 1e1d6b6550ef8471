"""Budget-aware JSON: when the tokens left before `max_tokens` are just enough to close the JSON being
written, close it, so constrained output parses whenever the budget allows any valid completion.

The grammar alone only says which token may come next; at temperature 0.7-1.0 with a tight budget a
small model is still inside a string when `max_tokens` cuts it, and the client gets no JSON at all.
Here each constrained sequence keeps track of the JSON it has written (`JsonState`: open strings,
numbers, literals, arrays and objects, the keys written and the schema each container follows) and
can say the shortest text that completes it: close the string, write each missing required key with
the smallest value its schema accepts, close the brackets (`JsonState.closing`). Tool calls add the
rest of the call's tag around the arguments (`CallsState`).

Once a call list holds a complete call, the answer is already good: what follows must not turn it into
a `length` finish. So between calls the end-of-sequence token is reserved, a later call is closed whole
(end tag and end-of-sequence token included), and a later call is not begun where the tokens left cannot
hold its smallest valid form: the answer ends there instead (`finish_reason` "tool_calls").

`BudgetCloser` does the per-step work for one sequence. While the budget is far it costs nothing
(its state catches up lazily). Near it, each sampled token is checked: if after that token the
closing (plus the end-of-sequence token) no longer fits in what is left, the closing of the text
before it is forced instead, token by token, after the grammar matcher has accepted every one of
its tokens (and been rolled back); a closing the matcher refuses, or one that does not fit any more,
leaves the sequence to the grammar alone. Schemas it does not understand (patterns, `$ref`s outside
the document, `allOf`...) do the same."""

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Start tracking once this few tokens are left (before that only the lazily kept state exists) ...
FAR_TOKENS = 64
# ... and after a first closing is known, check every step while fewer than its length plus this are
# left: one token can lengthen the closing by several (a key whose value is an object with required keys).
NEAR_TOKENS = 16


class Unclosable(Exception):
    """No closing we can compute: the grammar alone decides."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any] | None:
    """A schema node with a local `$ref` followed; None for `true`/absent (anything goes)."""
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/") or seen > 16:
            raise Unclosable(f"unsupported $ref {ref!r}")
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
        schema, seen = node, seen + 1
    if schema is None or schema is True or schema == {}:
        return None
    if not isinstance(schema, dict):
        raise Unclosable("unsupported schema")
    return schema


def minimal_value(schema: Any, root: dict[str, Any]) -> str:
    """The shortest JSON text (compact) that `schema` accepts, as far as we can tell."""
    s = _resolve(schema, root)
    if s is None:
        return "0"
    if "const" in s:
        return _dumps(s["const"])
    if "enum" in s:
        return min((_dumps(v) for v in s["enum"]), key=len)
    for key in ("anyOf", "oneOf"):
        if key in s:
            options = []
            for option in s[key]:
                try:
                    options.append(minimal_value(option, root))
                except Unclosable:
                    pass
            if not options:
                raise Unclosable(f"no closable {key} option")
            return min(options, key=len)
    if "allOf" in s or "not" in s or "if" in s:
        raise Unclosable("unsupported combinator")
    kind = s.get("type")
    if isinstance(kind, list):
        options = []
        for k in kind:
            try:
                options.append(minimal_value({**s, "type": k}, root))
            except Unclosable:
                pass
        if not options:
            raise Unclosable("no closable type")
        return min(options, key=len)
    if kind == "string":
        if "pattern" in s or "format" in s:
            raise Unclosable("string pattern or format")
        return '"' + "a" * int(s.get("minLength", 0)) + '"'
    if kind in ("integer", "number"):
        return _minimal_number(s, kind == "integer")
    if kind == "boolean":
        return "false"
    if kind == "null":
        return "null"
    if kind == "array" or (kind is None and "items" in s):
        n = int(s.get("minItems", 0))
        if "prefixItems" in s and n:
            raise Unclosable("prefixItems")
        return "[" + ", ".join([minimal_value(s.get("items"), root)] * n) + "]" if n else "[]"
    if kind == "object" or (kind is None and ("properties" in s or "required" in s)):
        props = s.get("properties") or {}
        required = set(s.get("required") or [])
        if required - set(props):
            raise Unclosable("required key without a property")
        parts = [f"{_dumps(k)}: {minimal_value(props[k], root)}" for k in props if k in required]
        if len(parts) < int(s.get("minProperties", 0)):
            raise Unclosable("minProperties")
        return "{" + ", ".join(parts) + "}"
    if kind is None:
        return "0"
    raise Unclosable(f"unsupported type {kind!r}")


def _minimal_number(s: dict[str, Any], integer: bool) -> str:
    low = s.get("minimum")
    if "exclusiveMinimum" in s and isinstance(s["exclusiveMinimum"], int | float):
        low = s["exclusiveMinimum"] + (1 if integer else 1e-9)
    high = s.get("maximum")
    if "exclusiveMaximum" in s and isinstance(s["exclusiveMaximum"], int | float):
        high = s["exclusiveMaximum"] - (1 if integer else 1e-9)
    if "multipleOf" in s:
        raise Unclosable("multipleOf")
    value: float = 0
    if low is not None and low > 0:
        value = math.ceil(low) if integer else low
    elif high is not None and high < 0:
        value = math.floor(high) if integer else high
    if integer or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


# -- the JSON written so far -------------------------------------------------------------------------

_LITERALS = (b"true", b"false", b"null")


@dataclass
class _Frame:
    kind: str  # "obj", "arr" or "root"
    schema: dict[str, Any] | None
    # obj: key_or_end, key, in_key, colon, value, child, after; arr: value_or_end, value, child, after;
    # root: value, child, done ("child": a nested container is open)
    expecting: str
    keys: list[str] = field(default_factory=list)
    key_buf: bytearray = field(default_factory=bytearray)
    count: int = 0  # array items written
    spaced: bool = True  # after ":" or ",": whether the space compact JSON writes there was written

    def copy(self) -> "_Frame":
        return _Frame(self.kind, self.schema, self.expecting, list(self.keys), bytearray(self.key_buf), self.count,
                      self.spaced)

    @property
    def space(self) -> str:
        """What the closing must start with here: the separator's space, if not written yet."""
        return "" if self.spaced else " "


class JsonState:
    """Compact JSON (`{"a": 1, "b": [2]}`, as the engine's grammars write it) read byte by byte, with
    the schema of every open container, so `closing()` can name the shortest way to finish it."""

    def __init__(self, schema: dict[str, Any] | None, root: dict[str, Any] | None = None):
        self.root = root if root is not None else (schema or {})
        self.stack = [_Frame("root", _resolve(schema, self.root) if schema else None, "value")]
        self.scalar: str | None = None  # "str", "num", "lit" while one is being written
        self.buf = bytearray()  # the number, literal or string value so far
        self.escape: int = 0  # in a string: 0 none, 1 after "\", 2..5 hex digits of \\u still wanted + 1
        self.broken = False  # something we do not follow: no closing

    def copy(self) -> "JsonState":
        new = JsonState.__new__(JsonState)
        new.root, new.stack = self.root, [f.copy() for f in self.stack]
        new.scalar, new.buf, new.escape, new.broken = self.scalar, bytearray(self.buf), self.escape, self.broken
        return new

    @property
    def done(self) -> bool:
        return self.stack[0].expecting == "done" and len(self.stack) == 1 and self.scalar is None

    # -- reading --
    def feed(self, data: bytes) -> None:
        for b in data:
            if self.broken:
                return
            self._byte(b)

    def _child_schema(self, frame: _Frame) -> dict[str, Any] | None:
        s = frame.schema
        if s is None:
            return None
        if frame.kind == "arr":
            return _resolve(s.get("items"), self.root)
        if frame.kind == "obj":
            props = s.get("properties") or {}
            key = frame.keys[-1] if frame.keys else None
            if key in props:
                return _resolve(props[key], self.root)
            extra = s.get("additionalProperties")
            return _resolve(extra, self.root) if isinstance(extra, dict) else None
        return s

    def _value_done(self) -> None:
        frame = self.stack[-1]
        frame.expecting = "done" if frame.kind == "root" else "after"
        if frame.kind == "arr":
            frame.count += 1

    def _byte(self, b: int) -> None:
        frame = self.stack[-1]
        if self.scalar == "str":
            if self.escape == 1:
                self.escape = 5 if b == ord("u") else 0
            elif self.escape > 1:
                self.escape = self.escape - 1 if self.escape > 2 else 0
            elif b == ord("\\"):
                self.escape = 1
            elif b == ord('"'):
                self.scalar = None
                if frame.expecting == "in_key":
                    frame.keys.append(frame.key_buf.decode("utf-8", errors="replace"))
                    frame.key_buf = bytearray()
                    frame.expecting = "colon"
                else:
                    self._value_done()
                return
            if frame.expecting == "in_key":
                frame.key_buf.append(b)
            else:
                self.buf.append(b)
            return
        if self.scalar == "num":
            if chr(b) in "0123456789.eE+-":
                self.buf.append(b)
                return
            self.scalar = None
            self._value_done()
            frame = self.stack[-1]
        elif self.scalar == "lit":
            self.buf.append(b)
            if bytes(self.buf) in _LITERALS:
                self.scalar = None
                self._value_done()
            elif not any(lit.startswith(self.buf) for lit in _LITERALS):
                self.broken = True
            return
        c = chr(b)
        if c in " \t\r\n":
            frame.spaced = True
            return
        want = frame.expecting
        if want in ("value", "value_or_end"):
            if c == "]" and want == "value_or_end":
                self._pop()
            elif c in "{[":
                child = _Frame("obj", self._child_schema(frame), "key_or_end") if c == "{" else \
                    _Frame("arr", self._child_schema(frame), "value_or_end")
                frame.expecting = "child"  # until the child's end makes it "after"
                self.stack.append(child)
            elif c == '"':
                self.scalar, self.buf = "str", bytearray()
            elif c in "-0123456789":
                self.scalar, self.buf = "num", bytearray([b])
            elif c in "tfn":
                self.scalar, self.buf = "lit", bytearray([b])
            else:
                self.broken = True
        elif want in ("key_or_end", "key"):
            if c == '"':
                self.scalar, frame.expecting = "str", "in_key"
            elif c == "}" and want == "key_or_end":
                self._pop()
            else:
                self.broken = True
        elif want == "colon":
            if c == ":":
                frame.expecting, frame.spaced = "value", False
            else:
                self.broken = True
        elif want == "after":
            if c == ",":
                frame.expecting, frame.spaced = ("key" if frame.kind == "obj" else "value"), False
            elif (c == "}" and frame.kind == "obj") or (c == "]" and frame.kind == "arr"):
                self._pop()
            else:
                self.broken = True
        else:  # done: nothing may follow the value
            self.broken = True

    def _pop(self) -> None:
        self.stack.pop()
        self._value_done()

    # -- closing --
    def needed(self) -> str:
        """What must be written for the output to parse: all of the closing."""
        return self.closing()

    def closing(self) -> str:
        """The shortest text that completes the JSON, as far as we can tell (Unclosable if not)."""
        if self.broken:
            raise Unclosable("not JSON we follow")
        out: list[str] = []
        stack = [f.copy() for f in self.stack]
        frame = stack[-1]
        if self.scalar == "str":
            if frame.expecting == "in_key":
                name = self._complete_key(frame)
                out.append(_rest(_dumps(name), b'"' + frame.key_buf) if name is not None else self._close_string())
                frame.keys.append(name if name is not None else frame.key_buf.decode("utf-8", errors="replace"))
                frame.expecting = "colon"
            else:
                out.append(self._complete_string(self._child_schema(frame)))
                frame.expecting = "after"
        elif self.scalar == "num":
            out.append("" if self.buf[-1:].isdigit() else "1" if self.buf == b"-" else "0")  # no "-0"
            frame.expecting = "after"
        elif self.scalar == "lit":
            lit = next(x for x in _LITERALS if x.startswith(self.buf))
            out.append(lit[len(self.buf):].decode())
            frame.expecting = "after"
        if self.scalar is not None and frame.kind == "arr" and frame.expecting == "after":
            frame.count += 1
        for depth in range(len(stack) - 1, -1, -1):
            out.append(self._close_frame(stack[depth]))
            if depth:  # that closed the parent's value
                parent = stack[depth - 1]
                parent.expecting = "done" if parent.kind == "root" else "after"
                parent.count += parent.kind == "arr"
        return "".join(out)

    def _close_string(self, min_length: int = 0) -> str:
        """Ends the string: a pending escape completed, then padding up to `min_length` characters."""
        escape = {0: "", 1: "n"}.get(self.escape, "0" * (self.escape - 1))
        short = min_length - self._string_length() - (1 if escape else 0) if min_length else 0
        return escape + "a" * max(0, short) + '"'

    def _complete_string(self, schema: dict[str, Any] | None) -> str:
        """The rest of a string value: an enum's (or const's) shortest value it begins, else `"`."""
        options = []
        if schema is not None:
            options = [schema["const"]] if "const" in schema else list(schema.get("enum") or [])
        if not options:
            return self._close_string(int(schema.get("minLength", 0)) if schema is not None else 0)
        written = b'"' + self.buf
        texts = [_dumps(v) for v in options if isinstance(v, str)]
        fits = [t for t in texts if t.encode().startswith(written)]
        if not fits:
            raise Unclosable("no enum value begins so")
        return _rest(min(fits, key=len), written)

    def _string_length(self) -> int:
        """Characters in the string value so far, escapes counted as one."""
        text = self.buf.decode("utf-8", errors="ignore")
        try:
            return len(json.loads(f'"{text}"'))
        except json.JSONDecodeError:
            return len(text)

    def _complete_key(self, frame: _Frame) -> str | None:
        """The property a partly written key must become (the grammar keeps the schema's order and
        skips no required key); None where any key goes (no schema)."""
        s = frame.schema
        if _any_keys(s):
            return None
        assert s is not None
        props = list(s.get("properties") or {})
        required = set(s.get("required") or [])
        last = frame.keys[-1] if frame.keys else None
        after = props[props.index(last) + 1:] if last in props else props
        allowed = []
        for k in after:
            allowed.append(k)
            if k in required:
                break
        written = b'"' + frame.key_buf
        fits = [k for k in allowed if _dumps(k).encode().startswith(written)]
        if not fits:
            raise Unclosable("no property begins so")
        return min(fits, key=lambda k: len(self._close_after_key(frame, k)))

    def _close_after_key(self, frame: _Frame, key: str) -> str:
        probe = frame.copy()
        probe.keys.append(key)
        probe.expecting = "colon"
        try:
            return self._close_frame(probe)
        except Unclosable:
            return "\uffff" * 64  # never the shortest

    def _close_frame(self, frame: _Frame) -> str:
        s, want = frame.schema, frame.expecting
        if frame.kind == "root":
            if want == "value":
                return minimal_value(s, self.root) if s is not None else "{}"
            return ""
        if frame.kind == "arr":
            items = _resolve(s.get("items"), self.root) if s else None
            text, count = "", frame.count
            if want == "value":
                text, count = frame.space + minimal_value(items, self.root), count + 1
            need = int(s.get("minItems", 0)) if s else 0
            more = [minimal_value(items, self.root)] * max(0, need - count)
            sep = ", " if (count or text) else ""
            return text + (sep + ", ".join(more) if more else "") + "]"
        props = (s.get("properties") or {}) if s else {}
        required = [k for k in props if k in set(s.get("required") or [])] if s else []
        text = ""
        if want in ("colon", "value"):
            child = props.get(frame.keys[-1]) if frame.keys else None
            text = (": " if want == "colon" else frame.space) + minimal_value(child, self.root)
        # The grammar keeps the schema's key order: missing required keys come after the last written.
        last = frame.keys[-1] if frame.keys else None
        order = list(props)
        after = order[order.index(last) + 1:] if last in order else order
        missing = [k for k in required if k not in frame.keys and k in after]
        if want == "key" and not missing:  # a comma was written: some key must follow
            if after:
                missing = [after[0]]
            elif _any_keys(s):
                return frame.space + '"": 0}'
            else:
                raise Unclosable("no key may follow")
        pairs = [f"{_dumps(k)}: {minimal_value(props[k], self.root)}" for k in missing]
        if want == "key":
            return frame.space + ", ".join(pairs) + "}"
        lead = ", " if want != "key_or_end" else ""
        return text + (lead + ", ".join(pairs) if pairs else "") + "}"


def _any_keys(schema: dict[str, Any] | None) -> bool:
    """An object schema naming no properties and not forbidding others (json_object's): any key goes."""
    return schema is None or (not schema.get("properties") and schema.get("additionalProperties", True) is not False)


def _rest(full: str, written: bytes) -> str:
    return full.encode()[len(written):].decode("utf-8", errors="replace")


# -- tool calls around the JSON ------------------------------------------------------------------------


@dataclass(frozen=True)
class CallFormat:
    """One callable tool as the tool grammar writes it: begin text, arguments schema, end text."""

    begin: str
    schema: dict[str, Any]
    end: str


class CallsState:
    """Output made of tool calls (`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
    free text between them under tool_choice auto), read byte by byte."""

    def __init__(self, calls: Sequence[CallFormat], trigger: str, at_least_one: bool):
        self.calls = list(calls)
        self.trigger = trigger.encode()
        self.at_least_one = at_least_one
        self.mode = "outside"  # outside, begin, args, end
        self.tail = bytearray()  # outside: the last bytes, to see a trigger; begin/end: the tag so far
        self.call: CallFormat | None = None
        self.args: JsonState | None = None
        self.done_calls = 0
        self.broken = False
        self.written = bytearray()  # the call being written, from its trigger on
        self.shortest = b""  # the shortest complete call written

    def copy(self) -> "CallsState":
        new = CallsState.__new__(CallsState)
        new.calls, new.trigger, new.at_least_one = self.calls, self.trigger, self.at_least_one
        new.mode, new.tail, new.call = self.mode, bytearray(self.tail), self.call
        new.args = self.args.copy() if self.args is not None else None
        new.done_calls, new.broken = self.done_calls, self.broken
        new.written, new.shortest = bytearray(self.written), self.shortest
        return new

    def feed(self, data: bytes) -> None:
        for b in data:
            if self.broken:
                return
            if self.mode != "outside":
                self.written.append(b)
            if self.mode == "args":
                assert self.args is not None
                self.args.feed(bytes([b]))
                if self.args.broken:
                    self.broken = True
                elif self.args.done:
                    self.mode, self.tail = "end", bytearray()
                continue
            self.tail.append(b)
            if self.mode == "outside":
                if self.tail.endswith(self.trigger):
                    self.mode, self.tail, self.written = "begin", bytearray(self.trigger), bytearray(self.trigger)
                else:
                    del self.tail[: max(0, len(self.tail) - len(self.trigger))]
            elif self.mode == "begin":
                fits = [c for c in self.calls if c.begin.encode().startswith(self.tail)]
                whole = [c for c in fits if c.begin.encode() == bytes(self.tail)]
                if whole:
                    self.mode, self.call = "args", whole[0]
                    self.args = JsonState(whole[0].schema)
                elif not fits:
                    self.broken = True
            elif self.mode == "end":
                assert self.call is not None
                end = self.call.end.encode()
                if bytes(self.tail) == end:
                    self.mode, self.tail, self.done_calls = "outside", bytearray(), self.done_calls + 1
                    if not self.shortest or len(self.written) < len(self.shortest):
                        self.shortest = bytes(self.written)
                elif not end.startswith(self.tail):
                    self.broken = True

    @property
    def ends_cleanly(self) -> bool:
        """A complete call is in hand: the answer must end with the end-of-sequence token (a "tool_calls"
        finish), not be cut by max_tokens after it."""
        return self.done_calls > 0

    @property
    def between_calls(self) -> bool:
        """After a complete call, with nothing of another begun: the answer may end here."""
        return self.mode == "outside" and self.done_calls > 0 and not self._trigger_started()

    def next_calls(self) -> tuple[str, str]:
        """Texts of a whole call that may follow a complete call (separator, tag, arguments, end tag):
        the smallest valid one ("" when none can be computed), and the shortest this output has written.
        A small model writes its next call much as it wrote the last: begun where only the smallest
        form fits, it would be closed with its values cut short (`{"city": ""}`)."""
        sep = "\n" if self.at_least_one and not self.tail.endswith(b"\n") else ""  # call ("\n" call)*
        try:
            smallest = sep + self._cheapest(b"")
        except Unclosable:
            smallest = ""
        return smallest, (sep + self.shortest.decode("utf-8", errors="replace") if self.shortest else "")

    def needed(self) -> str:
        """What must be written for the call to be returned: the closing up to the end of its
        arguments (the parser returns a call whose end tag was cut, never one whose arguments were).
        After a complete call, all of the closing: the answer ends cleanly or the later call is not begun."""
        text = self.closing()
        if self.ends_cleanly:
            return text
        if self.mode == "end" or not text:
            return ""
        end = self.call.end if self.call is not None and self.mode == "args" else None
        if end is None:  # outside or in the tag's begin: a whole call, its end tag aside
            end = next((c.end for c in self.calls if text.endswith(c.end)), "")
        return text[: len(text) - len(end)] + end[:1] if end else text

    def closing(self) -> str:
        if self.broken:
            raise Unclosable("not a call we follow")
        if self.mode == "outside":
            started = self._trigger_started()  # a trigger partly written is continued
            # Under auto, text (a "<" included) may end anywhere; under required a begun tag is a call.
            if not self.at_least_one or (self.done_calls and not started):
                return ""
            return self._cheapest(started)
        if self.mode == "begin":
            return self._cheapest(bytes(self.tail))
        assert self.call is not None
        if self.mode == "args":
            assert self.args is not None
            return self.args.closing() + self.call.end
        return self.call.end[len(self.tail.decode("utf-8", errors="replace")):]

    def _trigger_started(self) -> bytes:
        tail = bytes(self.tail)
        return next((tail[k:] for k in range(len(tail)) if self.trigger.startswith(tail[k:])), b"")

    def _cheapest(self, written: bytes) -> str:
        options = []
        for c in self.calls:
            begin = c.begin.encode()
            if begin.startswith(written):
                try:
                    options.append(begin[len(written):].decode() + minimal_value(c.schema, c.schema) + c.end)
                except Unclosable:
                    pass
        if not options:
            raise Unclosable("no call can be completed")
        return min(options, key=len)


# -- per sequence ----------------------------------------------------------------------------------


def _need(state: JsonState | CallsState, encode: Callable[[str], list[int]]) -> int:
    """Tokens that must still fit: the needed closing, and the end-of-sequence token after a complete call."""
    eos = isinstance(state, CallsState) and state.ends_cleanly
    return len(encode(state.needed())) + eos


def _call_room(state: JsonState | CallsState, encode: Callable[[str], list[int]]) -> int:
    """Tokens another call takes (separator and end tag included; CallsState.next_calls); 0 for JSON."""
    if not isinstance(state, CallsState):
        return 0
    return max(len(encode(text)) for text in state.next_calls())


def _call_bytes(state: JsonState | CallsState) -> int:
    """A bound on the tokens another call could take, in bytes: how far ahead of max_tokens a call list
    is checked every step."""
    if not isinstance(state, CallsState):
        return 0
    return max(len(text.encode()) for text in state.next_calls())


def _begins_a_call(before: JsonState | CallsState, after: JsonState | CallsState) -> bool:
    """The token between `before` and `after` is the first of another call (the separator aside)."""
    return isinstance(before, CallsState) and before.between_calls and not after.between_calls


class BudgetCloser:
    """One constrained sequence's budget steering (see the module's docstring). `encode` turns a
    closing text into token ids (cached by the caller); `vocab` holds each token's bytes."""

    __slots__ = ("state", "consumed", "need", "forced", "off", "eos", "far")

    def __init__(self, state: JsonState | CallsState, eos: int):
        self.state = state
        self.consumed = 0  # output tokens read into `state`
        self.need: int | None = None  # tokens the last closing took, and room for another call in a call list
        self.forced: list[int] = []  # the rest of a closing being forced
        self.off = False  # the grammar alone from here on
        self.eos = eos
        # A call list is checked every step from where another call in its smallest form might not fit
        # (its bytes bound its tokens): where a call ends, the next step may begin another.
        self.far = FAR_TOKENS + _call_bytes(state)

    def is_near(self, left: int) -> bool:
        """Whether this step must be checked, with `left` tokens left including this step's."""
        if self.forced or (left <= self.far and isinstance(self.state, CallsState)):
            return True
        return left <= (self.far if self.need is None else self.need + NEAR_TOKENS)

    def begin(self, consumed: int, text: bytes) -> None:
        """The grammar's part of the output starts after its first `consumed` tokens (a thinking section,
        engine/thinking.py), with `text`, what the last of them wrote after the section's end."""
        self.consumed = consumed
        self.state.feed(text)

    def catch_up(self, output: list[int], vocab: Sequence[bytes]) -> None:
        for token in output[self.consumed:]:
            self.state.feed(vocab[token])
        self.consumed = len(output)

    def step(self, sampled: int, left: int, vocab: Sequence[bytes], encode: Callable[[str], list[int]],
             accepts: Callable[[list[int]], bool]) -> int:
        """The token to append instead of `sampled`: the next forced one, or `sampled` while the
        closing after it still fits in `left - 1` tokens. `accepts(tokens)`: the grammar takes them."""
        if self.forced:
            return self.forced.pop(0)
        try:
            if sampled == self.eos:
                return sampled
            after = self.state.copy()
            after.feed(vocab[sampled])
            if _begins_a_call(self.state, after) and _call_room(self.state, encode) + 1 > left and accepts([self.eos]):
                return self.eos  # another call would not fit: the answer ends with the calls it has
            need = _need(after, encode)
            if need <= left - 1:
                # In a call list the next check must come before another call could begin: the closing
                # grows from one token (the end-of-sequence) to a whole call in one step.
                self.need = need + _call_bytes(after)
                return sampled
            plan = encode(self.state.closing()) + [self.eos]
            need = _need(self.state, encode)
        except Unclosable:
            plan = None
        # What parses must fit; the rest (a call's end tag, the end-of-sequence token that makes the
        # finish "stop") is written as far as the budget goes.
        if plan is None or need > left or not accepts(plan):
            self.off = True
            return sampled
        self.forced = plan[1:left]
        return plan[0]
