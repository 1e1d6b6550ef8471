"""Schema introspection: what tables and columns a source has, as data and as DDL prompt text.

The structured form (:class:`Schema`) feeds the grammar (table and column names become grammar
alternatives); the text form (:meth:`Schema.to_ddl`) goes into the prompt. Both come from the
SQLAlchemy inspector so any backend SQLAlchemy speaks works the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Engine

# Names that must be double-quoted in SQL because they are keywords (or look like them). Not the
# full reserved list of every dialect: the words that plausibly name a table or column.
SQL_KEYWORDS = frozenset(
    """abort action add after all alter analyze and as asc attach autoincrement before begin between by
    cascade case cast check collate column commit conflict constraint create cross current current_date
    current_time current_timestamp database default deferrable deferred delete desc detach distinct do
    drop each else end escape except exclusive exists explain fail filter following for foreign from full
    glob group groups having if ignore immediate in index indexed initially inner insert instead intersect
    into is isnull join key last left like limit match natural no not nothing notnull null nulls of offset
    on or order others outer over partition plan pragma preceding primary query raise range recursive
    references regexp reindex release rename replace restrict returning right rollback row rows savepoint
    select set table temp temporary then ties to transaction trigger unbounded union unique update using
    vacuum values view virtual when where window with without true false""".split()
)

_BARE_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote_ident(name: str) -> str:
    """``name`` as it must appear in SQL: bare when it is a plain identifier, else double-quoted."""
    if _BARE_IDENT.match(name) and name.lower() not in SQL_KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


# Words in a declared type that make a column text; dates and times are judged apart (value_sort).
_TEXT_TYPES = ("CHAR", "CLOB", "TEXT", "STRING")
_NUMBER_TYPES = ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC", "MONEY", "SERIAL")


def is_text_type(sql_type: str) -> bool:
    """Whether a declared type holds free text (CHAR, VARCHAR, TEXT, CLOB...), in any dialect."""
    t = (sql_type or "").upper()
    return any(k in t for k in _TEXT_TYPES)


def value_sort(sql_type: str, dialect: str = "sqlite") -> str | None:
    """``"n"`` for a number column, ``"s"`` for a text one, None when the declared type does not say
    (no type, BLOB, BOOLEAN, INTERVAL): the sort a typed comparison checks (:mod:`.grammar`). Dates and
    times are text in SQLite (``'2024-06-01'``, and ``d - 7`` is nonsense there); other dialects do
    arithmetic on them (``CURRENT_DATE - 7``), so there they go either way."""
    t = sql_type.upper()
    if not t or "INTERVAL" in t or "BOOL" in t:
        return None
    if "DATE" in t or "TIME" in t:
        return "s" if dialect == "sqlite" else None
    if is_text_type(t) or any(k in t for k in ("UUID", "JSON", "ENUM")):
        return "s"
    if any(k in t for k in _NUMBER_TYPES):
        return "n"
    return None


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True
    default: str | None = None
    comment: str | None = None


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    unique: tuple[tuple[str, ...], ...] = ()
    checks: tuple[str, ...] = ()
    is_view: bool = False
    comment: str | None = None

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_ddl(self) -> str:
        """A CREATE TABLE statement (CREATE VIEW shows as a table: the model only reads from it)."""
        single_pk = self.primary_key[0] if len(self.primary_key) == 1 else None
        single_fk = {fk.columns[0]: fk for fk in self.foreign_keys if len(fk.columns) == 1}
        lines = []
        for col in self.columns:
            parts = [quote_ident(col.name), col.type or ""]
            if col.name == single_pk:
                parts.append("PRIMARY KEY")
            elif not col.nullable:
                parts.append("NOT NULL")
            if (col.name,) in self.unique:
                parts.append("UNIQUE")
            if col.default is not None:
                parts.append(f"DEFAULT {col.default}")
            fk = single_fk.get(col.name)
            if fk is not None:
                parts.append(f"REFERENCES {quote_ident(fk.ref_table)}({', '.join(map(quote_ident, fk.ref_columns))})")
            line = " ".join(p for p in parts if p)
            if col.comment:
                line += f" -- {col.comment}"
            lines.append(line)
        if len(self.primary_key) > 1:
            lines.append(f"PRIMARY KEY ({', '.join(map(quote_ident, self.primary_key))})")
        for fk in self.foreign_keys:
            if len(fk.columns) > 1:
                lines.append(
                    f"FOREIGN KEY ({', '.join(map(quote_ident, fk.columns))}) REFERENCES "
                    f"{quote_ident(fk.ref_table)}({', '.join(map(quote_ident, fk.ref_columns))})"
                )
        for cols in self.unique:
            if len(cols) > 1:
                lines.append(f"UNIQUE ({', '.join(map(quote_ident, cols))})")
        lines.extend(f"CHECK ({check})" for check in self.checks)
        # A trailing "-- comment" must not swallow the comma, so the comma goes before the comment.
        body = []
        for i, line in enumerate(lines):
            sep = "," if i < len(lines) - 1 else ""
            code, dash, comment = line.partition(" -- ")
            body.append(f"  {code}{sep}{' -- ' + comment if dash else ''}")
        head = f"CREATE TABLE {quote_ident(self.name)} ("
        return "\n".join([head, *body, ");"])


@dataclass(frozen=True)
class Schema:
    """Tables (and views) of one source, in the order the database lists them."""

    tables: tuple[Table, ...]
    dialect: str = "sqlite"
    # Native DDL text when the backend keeps it (SQLite stores each CREATE statement verbatim,
    # author comments included: they tell the model value formats and enum values).
    native_ddl: str | None = field(default=None, compare=False)

    def table(self, name: str) -> Table | None:
        for t in self.tables:
            if t.name == name:
                return t
        lowered = name.lower()
        return next((t for t in self.tables if t.name.lower() == lowered), None)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    def columns_by_table(self) -> dict[str, list[str]]:
        return {t.name: t.column_names for t in self.tables}

    def single_keys(self) -> list[tuple[str, str, str, str]]:
        """(child table, its column, parent table, its column) of every one-column foreign key."""
        return [(t.name, fk.columns[0], fk.ref_table, fk.ref_columns[0]) for t in self.tables
                for fk in t.foreign_keys if len(fk.columns) == 1 and len(fk.ref_columns) == 1]

    def key_columns(self) -> frozenset[str]:
        """Every column name that is part of a primary or foreign key somewhere in the schema."""
        keys: set[str] = set()
        for table in self.tables:
            keys.update(table.primary_key)
            for fk in table.foreign_keys:
                keys.update(fk.columns)
                keys.update(fk.ref_columns)
        return frozenset(keys)

    def to_ddl(self, native: bool = True) -> str:
        """Prompt text: the native DDL when the backend kept it and ``native``, else rendered DDL."""
        if native and self.native_ddl:
            return self.native_ddl
        return "\n\n".join(t.to_ddl() for t in self.tables)


def _type_text(col_type: object, dialect: sa.Dialect) -> str:
    try:
        return col_type.compile(dialect=dialect)  # type: ignore[attr-defined]
    except Exception:  # NullType and exotic types do not compile; their repr is still informative
        return str(col_type) if not isinstance(col_type, sa.types.NullType) else ""


def introspect(engine: Engine, schema: str | None = None, include_views: bool = True) -> Schema:
    """Reads tables, views, columns, keys and checks through the SQLAlchemy inspector."""
    insp = sa.inspect(engine)
    dialect = engine.dialect
    names = [(n, False) for n in insp.get_table_names(schema=schema)]
    if include_views:
        names += [(n, True) for n in insp.get_view_names(schema=schema)]
    tables = []
    for name, is_view in names:
        if dialect.name == "sqlite" and name.startswith("sqlite_"):
            continue  # internal tables (sqlite_sequence, sqlite_stat1)
        cols = tuple(
            Column(
                name=c["name"],
                type=_type_text(c["type"], dialect),
                nullable=bool(c.get("nullable", True)),
                default=c.get("default"),
                comment=c.get("comment"),
            )
            for c in insp.get_columns(name, schema=schema)
        )
        pk: tuple[str, ...] = ()
        fks: tuple[ForeignKey, ...] = ()
        uniques: tuple[tuple[str, ...], ...] = ()
        checks: tuple[str, ...] = ()
        comment = None
        if not is_view:
            pk = tuple(insp.get_pk_constraint(name, schema=schema).get("constrained_columns") or ())
            fks = tuple(
                ForeignKey(tuple(fk["constrained_columns"]), fk["referred_table"], tuple(fk["referred_columns"]))
                for fk in insp.get_foreign_keys(name, schema=schema)
                if fk.get("referred_table")
            )
            uniques = tuple(
                tuple(u["column_names"]) for u in insp.get_unique_constraints(name, schema=schema)
            )
            try:
                checks = tuple(c["sqltext"] for c in insp.get_check_constraints(name, schema=schema))
            except NotImplementedError:
                checks = ()
            try:
                comment = (insp.get_table_comment(name, schema=schema) or {}).get("text")
            except NotImplementedError:
                comment = None
        tables.append(Table(name, cols, pk, fks, uniques, checks, is_view, comment))
    native = None
    if dialect.name == "sqlite":
        tables, native = _sqlite_native_order_and_ddl(engine, tables)
    return Schema(tuple(tables), dialect=dialect.name, native_ddl=native)


def _sqlite_native_order_and_ddl(engine: Engine, tables: list[Table]) -> tuple[list[Table], str | None]:
    """Creation order (the inspector sorts by name; authors list referenced tables first) and the
    CREATE statements as written."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY rowid"
        ).all()
    rank = {name: i for i, (name, _) in enumerate(rows)}
    tables = sorted(tables, key=lambda t: rank.get(t.name, len(rank)))
    by_name = {name: sql for name, sql in rows if sql}
    parts = [by_name[t.name].strip() + ";" for t in tables if t.name in by_name]
    return tables, "\n\n".join(parts) or None
