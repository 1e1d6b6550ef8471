"""Where a JSON value ends in streamed text, found without parsing it, so call arguments stream
as they are written."""

from dataclasses import dataclass


@dataclass
class JsonValueScanner:
    """Finds where a JSON value ends without parsing it, so arguments stream as they are written."""

    started: bool = False
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    scalar: bool = False

    def take(self, text: str) -> tuple[int, int, bool]:
        """Returns (skip, used, done): `skip` leading blanks, then `used` characters of the value."""
        start = i = 0
        if not self.started:
            while i < len(text) and text[i].isspace():
                i += 1
            if i == len(text):
                return i, 0, False
            if text[i] == "<":  # no value at all before the closing tag
                return i, 0, True
            self.started, start = True, i
            self.scalar = text[i] not in '{["'
            self.in_string = text[i] == '"'
            self.depth = 1 if text[i] in "{[" else 0
            i += 1
        while i < len(text):
            c = text[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
                    if self.depth == 0:
                        return start, i + 1 - start, True
            elif self.scalar:
                if c in ",}] \t\r\n<":
                    return start, i - start, True
            elif c == "<":  # not JSON: the model closed the tag inside the value
                return start, i - start, True
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return start, i + 1 - start, True
            i += 1
        return start, i - start, False
