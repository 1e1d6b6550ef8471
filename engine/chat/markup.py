"""Our tool markup (the Hermes-style tags of the tool preamble) and the filter that keeps it out of
free text: content must never hold the tags the prompt wraps tool results in."""


TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
# Our prompt markup that content must never hold: the tool-result tags our preamble wraps results
# in and a stray call end. Answering after a tool result, the default model echoes the result in
# them (`<tool_response>\n7006652\n</tool_response>`): the tags are removed from content, by the
# call parser and by `MarkupFilter` where no calls are parsed. Not excluded at decode time: measured
# on 20 such answers (tests/engine/test_structured_guarantees.py), excluding the tags from the
# grammar's free text made the model write near-tags instead (`<tool_response]`) and hold the right
# number in 14/20 answers, against 20/20 echoed and stripped at temperature 0; excluding `<tool_r`
# made it call the tool again (20/20), and banning the `<` token (logit bias) gave 6/20.
TOOL_MARKUP = (TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE, TOOL_CALL_CLOSE)

def held_prefix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def find_markup(text: str) -> tuple[int, str] | None:
    """The first of TOOL_MARKUP in `text`: (where, which)."""
    found = [(at, m) for m in TOOL_MARKUP if (at := text.find(m)) >= 0]
    return min(found) if found else None


class MarkupFilter:
    """Free text fed in pieces with our tool markup (TOOL_MARKUP and `<tool_call>`) removed, for
    answers whose calls are not parsed (tool_choice none, or no tools) but whose history holds tool
    results in that markup. Like the call parser's content: a partly written tag is held back (and
    dropped at the end). Text with no markup passes whole; once a tag was removed, the whitespace it
    leaves at the start and end of the answer goes too (`<tool_response>\nRESULT\n</tool_response>`
    reads as RESULT)."""

    MARKERS = (TOOL_CALL_OPEN, *TOOL_MARKUP)

    def __init__(self) -> None:
        self._buf = ""
        self._pending_ws = ""
        self._started = False
        self._removed = False

    def feed(self, delta: str) -> str:
        self._buf += delta
        out: list[str] = []
        while (found := min(((at, m) for m in self.MARKERS if (at := self._buf.find(m)) >= 0), default=None)):
            out.append(self._buf[:found[0]])
            self._buf = self._buf[found[0] + len(found[1]):]
            self._removed = True
        keep = max(held_prefix(self._buf, m) for m in self.MARKERS)
        out.append(self._buf[: len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep:]
        return self._text("".join(out))

    def finish(self) -> str:
        self._buf = ""
        tail, self._pending_ws = ("" if self._removed else self._pending_ws), ""
        return tail

    def _text(self, text: str) -> str:
        # Trailing whitespace waits: a tag after it would make it the answer's end.
        text = self._pending_ws + text
        if not self._started and self._removed:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        self._started = self._started or bool(body)
        return body


def strip_markup(text: str) -> str:
    """`text` without our tool markup (MarkupFilter on a whole text)."""
    f = MarkupFilter()
    return f.feed(text) + f.finish()
