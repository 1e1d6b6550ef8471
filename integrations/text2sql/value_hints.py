"""Value linking: the stored values a question names, shown to the model under the DDL.

A small model maps "teachers who teach Computer Science" to ``teacher_id = 'Computer Science'``: the DDL
says which columns exist, not which one holds the words the user typed. Text-to-SQL systems since BRIDGE
(and LangChain's sample rows in ``SQLDatabase``) put database content in the prompt for that reason.
Here the database's own text values that occur in the question are listed after the DDL, one line per
column that holds them::

    -- Values from the question:
    -- teachers.subject: 'Computer Science'
    -- shipments.dest_city: 'Tokyo', 'Singapore'

The list depends on the question, so it goes after the DDL: every question of a source still shares
the instruction and DDL as a prompt prefix (the engine's prefix cache, the trainer's packing).

Matching is on casefolded text, at alphanumeric boundaries for the value's ends (``art`` does not match
"department"; ``서울`` matches "서울에", since Korean particles follow without a space). ISO dates, numbers
and one-character values are not indexed: they are read from the question as literals. A value inside a
longer matched value (``Science`` in ``Computer Science``) is left out. A snake_case value is also found
spelled with spaces ("in transit" names ``'in_transit'``), the way people write it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from integrations.text2sql.schema import Schema, is_text_type, quote_ident

HEADER = "-- Values from the question:"
MAX_VALUES_PER_COLUMN = 2000  # distinct values read per text column (the first ones the database returns)
MAX_VALUE_CHARS = 64
MAX_COLUMNS = 6  # lines of hints
MAX_VALUES = 8  # values on one line
_SKIP = re.compile(r"^(?:\d{4}-\d{2}-\d{2}.*|[-+]?\d+(?:\.\d+)?)$")  # dates and numbers: literals already


def _word(ch: str) -> bool:
    """An ASCII letter or digit: where a Latin value must not continue into the question's next word."""
    return ch.isascii() and ch.isalnum()


@dataclass(frozen=True)
class Hint:
    """The values of one column that the question names."""

    table: str
    column: str
    values: tuple[str, ...]

    def line(self) -> str:
        quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in self.values)
        return f"-- {quote_ident(self.table)}.{quote_ident(self.column)}: {quoted}"


def _indexable(value: object) -> bool:
    if not isinstance(value, str):
        return False
    text = value.strip()
    return 2 <= len(text) <= MAX_VALUE_CHARS and "\n" not in text and not _SKIP.match(text)


class ValueIndex:
    """The distinct text values of a database's text columns, searchable by question."""

    def __init__(self, values: dict[tuple[str, str], list[str]]):
        # casefolded value -> the (table, column, stored value) places that hold it, in schema order
        self._places: dict[str, list[tuple[str, str, str]]] = {}
        for (table, column), stored in values.items():
            for v in stored:
                if _indexable(v):
                    key = v.strip().casefold()
                    for spelled in {key, key.replace("_", " ")}:  # 'in_transit' is asked as "in transit"
                        self._places.setdefault(spelled, []).append((table, column, v))
        self._keys = sorted(self._places, key=lambda k: (-len(k), k))  # longest first: see match()

    @classmethod
    def from_engine(cls, engine: sa.Engine, schema: Schema, db_schema: str | None = None) -> ValueIndex:
        """Reads up to :data:`MAX_VALUES_PER_COLUMN` distinct values of every text column."""
        values: dict[tuple[str, str], list[str]] = {}
        with engine.connect() as con:
            for table in schema.tables:
                for col in table.columns:
                    if not is_text_type(col.type):
                        continue
                    c = sa.column(col.name)
                    query = (sa.select(c).select_from(sa.table(table.name, schema=db_schema)).where(c.is_not(None))
                             .distinct().limit(MAX_VALUES_PER_COLUMN))
                    values[(table.name, col.name)] = [row[0] for row in con.execute(query)]
        return cls(values)

    def __len__(self) -> int:
        return len(self._places)

    def match(self, question: str) -> list[Hint]:
        """The columns holding values ``question`` names, in the order it first names them."""
        text = question.casefold()
        spans: list[tuple[int, int, str]] = []
        for key in self._keys:
            start = text.find(key)
            while start >= 0:
                end = start + len(key)
                glued_before = start > 0 and _word(text[start - 1]) and _word(key[0])
                glued_after = end < len(text) and _word(text[end]) and _word(key[-1])
                if not glued_before and not glued_after:
                    spans.append((start, end, key))
                    break
                start = text.find(key, start + 1)
        # Keys are longest first: drop a match that lies inside a longer one's span.
        kept: list[tuple[int, int, str]] = []
        for s, e, key in spans:
            if not any(ks <= s and e <= ke and key != kk for ks, ke, kk in kept):
                kept.append((s, e, key))
        columns: dict[tuple[str, str], list[str]] = {}
        for _, _, key in sorted(kept):
            for table, column, value in self._places[key]:
                columns.setdefault((table, column), []).append(value)
        return [Hint(t, c, tuple(vs[:MAX_VALUES])) for (t, c), vs in list(columns.items())[:MAX_COLUMNS]]


def render_hints(hints: list[Hint]) -> str:
    """The lines that follow the DDL ("" when the question names no stored value)."""
    return "\n".join([HEADER, *(h.line() for h in hints)]) if hints else ""


def prompt_ddl(ddl: str, hints: str) -> str:
    """The prompt's DDL section: the schema, then the rendered hints when the question names any value."""
    return f"{ddl}\n\n{hints}" if hints else ddl
