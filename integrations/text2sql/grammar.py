"""An EBNF grammar (xgrammar's GBNF dialect) for one read-only SELECT over a given schema.

Decoding under this grammar makes the model's output a single SELECT statement whose table names
and column names are the schema's own; there is no production for INSERT, UPDATE, DDL, PRAGMA or a
second statement, so such text cannot be sampled. The output ends at ``;`` or a newline, where the
grammar terminates and the engine finishes the sequence.

What the grammar guarantees is syntax and vocabulary, not meaning: a CFG cannot check that an alias
used in ``cu.name`` was declared in FROM. Those mistakes surface at ``EXPLAIN`` time.

Design choices that keep a small model on track:

* Keywords are upper or lower case (not mixed), single spaces between tokens, optional single spaces
  around operators, commas and parentheses: no whitespace loops.
* Every structural repetition is bounded (select items, joins, AND/OR chains, digits) and subqueries
  nest at most ``max_depth`` deep, so a model that repeats itself is forced towards the end.
* Aggregates are only allowed where SQL allows them (SELECT list, HAVING, ORDER BY), never in
  WHERE/ON/GROUP BY and never nested; ``IN (...)`` and scalar subqueries select exactly one column.
  Each of these is an error SQLite would only report at run time.
* A query without joins names only its table's columns (one alternative per table, so the FROM
  table and the columns agree); joins see all columns. Table aliases are short
  (``[a-z][a-z0-9_]{0,3}``, like ``cu`` or ``s23``), so ``table.column`` with a real table name is
  typed: only that table's columns can follow it. With ``table_aliases=False`` (the shipped adapter's
  style, :mod:`.training.table_names`) there are no table aliases at all, so every qualified column is typed.
* Comparisons are typed by the declared column types (``typed_comparisons``): ``hub_id = '서울'``,
  ``created_on BETWEEN 3 AND 2024`` and ``AVG(created_on)`` cannot be sampled. SQLite runs each of
  them without complaint and returns nothing, so only the grammar can stop them.
* With ``foreign_key_joins`` (and no aliases) each JOIN brings in a table not yet in FROM, on a
  declared key to a table that is; the grammar keeps one state per set of joined tables.
* With ``plausible`` the marks :mod:`.plausibility` ranks down cannot be sampled at all where a CFG can
  tell: ``SUM``/``AVG``/``TOTAL`` over a key column, a ``BETWEEN`` bounded by columns and ``LIMIT``
  without ``ORDER BY`` (some arbitrary rows). Each was a wrong greedy answer of the shipped adapter.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from integrations.text2sql.ebnf import EBNFRules, alts, ebnf_literal, identifier_excluding, rep
from integrations.text2sql.schema import Schema, quote_ident, value_sort


@dataclass(frozen=True)
class GrammarOptions:
    """Knobs of :func:`sql_grammar`; the defaults suit SmolLM-class models on small schemas."""

    dialect: str | None = None  # None: the schema's (SQLite for a plain mapping)
    max_depth: int = 1  # subquery nesting: 1 allows one level (IN, EXISTS, scalar, FROM (...))
    max_select_items: int = 8
    max_alias_chars: int = 24  # output column aliases (AS name); a looping model otherwise never stops
    max_joins: int = 5
    max_conditions: int = 6  # per AND chain and per OR chain
    max_in_values: int = 20
    max_group_by: int = 5
    max_order_by: int = 4
    terminators: tuple[str, ...] = (";", "\n")
    lowercase_keywords: bool = True
    # One alternative per table for queries without joins (columns must match the FROM table).
    # None: on for schemas of up to ``table_scope_limit`` tables; the grammar and the per-token mask
    # work grow with the number of tables, so big schemas fall back to all-columns everywhere.
    table_scopes: bool | None = None
    table_scope_limit: int = 12
    # False: no parentheses, CASE or CAST, and function/aggregate arguments are plain column/literal
    # arithmetic, so expressions cannot nest. With ``max_string_chars`` set this makes every
    # sentence short: the shape of :meth:`compact`.
    nested_expressions: bool = True
    # False: tables go without aliases and columns are qualified by the table's own name, which the
    # grammar types (``orders.`` is followed only by a column of ``orders``); the shipped adapter's style.
    table_aliases: bool = True
    # True (with table_aliases False and a schema that declares foreign keys): a JOIN's ON starts with
    # one declared key equality that has the joined table at one end (``JOIN customers ON
    # orders.customer_id = customers.customer_id``), and there are no comma or CROSS joins; a small
    # model otherwise joins on any two ids (``books.author_id = members.member_id``).
    foreign_key_joins: bool = False
    # True: comparisons are typed by the schema's column types (:func:`value_sort`): a number column
    # is compared with numbers, a text or date column with strings, and SUM/AVG take numbers. A small
    # model otherwise writes ``hub_id = '서울'`` or ``STRFTIME('%Y', d) = 2024``, which run and return
    # nothing. Columns of unknown type (and ``alias.column``) may go either way.
    typed_comparisons: bool = True
    # True: SUM/AVG/TOTAL take no key column (primary or foreign; needs typed_comparisons), BETWEEN is
    # bounded by literals and functions (not columns), and LIMIT comes after ORDER BY.
    plausible: bool = True
    max_join_states: int = 400  # foreign_key_joins: past this many joined-table sets, joins go untracked
    max_string_chars: int | None = None  # None: unbounded (faster masks; see lexical())

    @classmethod
    def compact(cls, **overrides: object) -> GrammarOptions:
        """A small grammar whose every sentence is short: the retry when a model ran out of tokens
        under the full grammar (a loop in a long SELECT list). One level, few items, no nesting."""
        values: dict[str, object] = dict(
            max_depth=0, max_select_items=4, max_alias_chars=16, max_joins=2, max_conditions=3,
            max_in_values=5, max_group_by=2, max_order_by=2, nested_expressions=False, max_string_chars=40,
        )
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


# SQLite's scalar functions by arity: (name, min_args, max_args). Date functions are SQLite's own
# (there is no EXTRACT or INTERVAL in SQLite); other dialects get only the portable ones.
_SQLITE_FUNCTIONS: tuple[tuple[str, int, int], ...] = (
    ("DATE", 1, 5),
    ("TIME", 1, 5),
    ("DATETIME", 1, 5),
    ("JULIANDAY", 1, 5),
    ("UNIXEPOCH", 1, 5),
    ("STRFTIME", 2, 6),
    ("IFNULL", 2, 2),
    ("NULLIF", 2, 2),
    ("INSTR", 2, 2),
    ("SUBSTR", 2, 3),
    ("REPLACE", 3, 3),
    ("TYPEOF", 1, 1),
    ("IIF", 3, 3),
)
_PORTABLE_FUNCTIONS: tuple[tuple[str, int, int], ...] = (
    ("LOWER", 1, 1),
    ("UPPER", 1, 1),
    ("LENGTH", 1, 1),
    ("ABS", 1, 1),
    ("TRIM", 1, 1),
    ("ROUND", 1, 2),
    ("COALESCE", 2, 4),
)
_AGGREGATES = ("SUM", "AVG", "MIN", "MAX", "COUNT", "TOTAL")
_CAST_TYPES = ("INTEGER", "REAL", "TEXT", "NUMERIC")
# What each function returns, for typed comparisons: "s" text (SQLite's dates are text), "n" a number;
# unlisted ones (IFNULL, COALESCE, IIF, NULLIF) return what they are given and go either way.
_FUNCTION_SORTS = {
    "DATE": "s", "TIME": "s", "DATETIME": "s", "STRFTIME": "s", "SUBSTR": "s", "REPLACE": "s", "TYPEOF": "s",
    "LOWER": "s", "UPPER": "s", "TRIM": "s",
    "JULIANDAY": "n", "UNIXEPOCH": "n", "INSTR": "n", "LENGTH": "n", "ABS": "n", "ROUND": "n",
}


# Words an alias must not be because SQLite would read them as syntax there. The full
# SQL_KEYWORDS list would be safe too but triples the grammar (every excluded word is a trie path).
ALIAS_KEYWORDS = frozenset(
    """all and as asc between by case cast collate cross current_date current_time current_timestamp desc
    distinct else end escape except exists false from full glob group having in inner intersect into is
    isnull join left like limit natural not notnull null offset on or order outer regexp right select
    then true union using when where window with""".split()
)


class _Builder:
    """Emits the rules. Expression rules come in *families* keyed by scope, depth and aggregation:

    * scope ``all``: columns of every table (join queries, where aliases decide the table), or
      ``t<i>``: only table ``i``'s columns (single-table queries);
    * depth: subquery nesting level (no subqueries at ``max_depth``);
    * ``a``: aggregates allowed (SELECT list, HAVING, ORDER BY) or ``p``: plain (WHERE, ON, GROUP BY).
    """

    def __init__(self, tables: Mapping[str, Sequence[str]], opts: GrammarOptions,
                 keys: Sequence[tuple[str, str, str, str]] = (),
                 sorts: Mapping[str, Mapping[str, str | None]] | None = None,
                 key_names: frozenset[str] = frozenset()):
        if not tables or not any(tables.values()):
            raise ValueError("a SQL grammar needs at least one table with columns")
        self.tables = {t: list(cols) for t, cols in tables.items() if cols}
        # A bare column's sort; one several tables share keeps a sort only where they agree on it.
        self.sorts: dict[tuple[str | None, str], str | None] = {}
        for t, cols in self.tables.items():
            for c in cols:
                sort = (sorts or {}).get(t, {}).get(c)
                self.sorts[(t, c)] = sort
                self.sorts[(None, c)] = sort if self.sorts.get((None, c), sort) == sort else None
        self.table_names = sorted(self.tables)
        self.o = opts
        # (child table, its column, parent table, its column) of each one-column foreign key
        self.keys = [k for k in keys if k[0] in self.tables and k[2] in self.tables]
        # Sort "m" (a measure: what SUM and AVG add up) is a number column that is no key.
        self.key_names = key_names if opts.plausible and opts.typed_comparisons else frozenset()
        self.r = EBNFRules()
        self.functions = _PORTABLE_FUNCTIONS + (_SQLITE_FUNCTIONS if opts.dialect == "sqlite" else ())
        scoped = opts.table_scopes
        self.scoped = scoped if scoped is not None else len(self.table_names) <= opts.table_scope_limit

    def has(self, name: str) -> bool:
        return self.r.has(name)

    # -- lexical pieces ------------------------------------------------------------------------
    def kw(self, word: str) -> str:
        """A keyword (or multi-word phrase) in upper or lower case."""
        name = "kw_" + word.lower().replace(" ", "_")
        forms = [word, word.lower()] if self.o.lowercase_keywords and word.lower() != word else [word]
        return self.r.add(name, alts(ebnf_literal(f) for f in forms))

    def lexical(self) -> None:
        o, r = self.o, self.r
        r.add("sp", '" "')
        r.add("ows", '" "?')  # optional single space around operators and punctuation
        r.add("comma", 'ows "," ows')
        r.add("lp", '"(" ows')
        r.add("rp", 'ows ")"')
        # String contents are unbounded on purpose: a bounded repetition of an alternation makes
        # xgrammar's per-token mask about 10x slower inside strings (measured), and models do not
        # loop there. Output aliases are bounded: small models do loop there (a_per_b_per_b_per_b...).
        if o.max_string_chars is None:
            r.add("string", "\"'\" ([^'\\r\\n] | \"''\")* \"'\"")
        else:
            r.add("string", f"\"'\" [^'\\r\\n]{{0,{o.max_string_chars}}} \"'\"")
        r.add("number", '[0-9]{1,15} ("." [0-9]{1,8})?')
        r.add("int", "[0-9]{1,9}")
        r.add(
            "literal",
            alts(["string", "number", self.kw("NULL"), self.kw("TRUE"), self.kw("FALSE"),
                   self.kw("CURRENT_DATE"), self.kw("CURRENT_TIMESTAMP")]),
        )
        # Aliases are identifiers that are not SQL keywords ("AS and" or "and.name" would not parse).
        identifier_excluding(r, "alias", string.ascii_lowercase, string.ascii_lowercase + string.digits + "_",
                             4, ALIAS_KEYWORDS)
        identifier_excluding(r, "out_alias", string.ascii_letters + "_", string.ascii_letters + string.digits + "_",
                             o.max_alias_chars, ALIAS_KEYWORDS)
        all_columns = sorted({c for cols in self.tables.values() for c in cols})
        owners = Counter(c for cols in self.tables.values() for c in set(cols))
        r.add("table_name", alts(ebnf_literal(quote_ident(t)) for t in self.table_names))
        r.add("column_name", alts(ebnf_literal(quote_ident(c)) for c in all_columns))
        # Bare names in a join must be unambiguous: a column several tables have (ids, name) needs
        # its table or alias there, or SQLite stops with "ambiguous column name".
        unique = [c for c in all_columns if owners[c] == 1] or all_columns
        r.add("unique_column", alts(ebnf_literal(quote_ident(c)) for c in unique))
        for i, t in enumerate(self.table_names):
            r.add(f"cols_t{i}", alts(ebnf_literal(quote_ident(c)) for c in self.tables[t]))
        if o.typed_comparisons:
            # The same name lists cut by sort ("n" numbers, "s" text); a column of unknown sort is in both.
            for sort in "nsm" if self.key_names else "ns":
                for i, t in enumerate(self.table_names):
                    self._sorted_names(f"cols_t{i}_{sort}", self.tables[t], t, sort)
                # the bare names column_ref uses: unambiguous ones beside per-table scopes, else all
                bare, names = ("unique_column", unique) if self.scoped else ("column_name", all_columns)
                self._sorted_names(f"{bare}_{sort}", names, None, sort)
        r.add("cmp_op", alts(ebnf_literal(op) for op in ("=", "!=", "<>", "<=", ">=", "<", ">")))
        r.add("add_op", alts(ebnf_literal(op) for op in ("+", "||")))  # "-" is apart: see minus_tail
        r.add("mul_op", alts(ebnf_literal(op) for op in ("*", "/", "%")))
        r.add("direction", f"sp ({self.kw('ASC')} | {self.kw('DESC')})")
        r.add("limit", f"sp {self.kw('LIMIT')} sp int (sp {self.kw('OFFSET')} sp int)?")

    def _sorted_names(self, name: str, columns: Sequence[str], table: str | None, sort: str) -> None:
        """Rule ``name``: the ``columns`` whose sort is ``sort`` or unknown (for ``m``: ``n`` or unknown,
        and no key); none when there are none."""
        want = ("n", None) if sort == "m" else (sort, None)
        cols = [c for c in columns if self.sorts[(table, c)] in want and not (sort == "m" and c in self.key_names)]
        if cols:
            self.r.add(name, alts(ebnf_literal(quote_ident(c)) for c in cols))

    def column_ref(self, scope: str, depth: int, sort: str | None = None) -> str | None:
        """Column references visible in ``scope``: bare, ``table.column`` or ``alias.column``; with
        ``sort``, only the columns of that sort (an alias in a join or a subquery may stand for any table,
        so its columns are any column).
        None when no column fits."""
        suffix = f"_{sort}" if sort else ""
        name = f"colref_{scope}_{depth}{suffix}"
        if self.has(name):
            return name

        def names(rule: str) -> str | None:
            return rule + suffix if not sort or self.has(rule + suffix) else None

        typed = [f"{ebnf_literal(quote_ident(t) + '.')} {names(f'cols_t{i}')}"
                 for i, t in enumerate(self.table_names) if names(f"cols_t{i}")]
        if scope == "all":
            # With per-table alternatives this scope only serves joins, where bare names must be
            # unambiguous; without them it also serves single-table queries.
            bare = names("unique_column" if self.scoped else "column_name")
            body = [b for b in [bare, *typed] if b] + (['alias "." column_name'] if self.o.table_aliases else [])
        else:
            i = int(scope[1:])
            t = self.table_names[i]
            own = names(f"cols_{scope}")
            body = [own, f"{ebnf_literal(quote_ident(t) + '.')} {own}"] if own else []
            # In a subquery an alias may name the outer query's table (a correlated reference).
            alias_cols = "column_name" if depth > 0 else own
            if self.o.table_aliases and alias_cols:
                body.append(f'alias "." {alias_cols}')
        return self.r.add(name, alts(body)) if body else None

    # -- expressions -------------------------------------------------------------------------------
    def expr_family(self, scope: str, depth: int, agg: bool) -> str:
        """Rules for conditions and values; returns the suffix naming them (``cond_<s>``, ``val_<s>``)."""
        s = f"{scope}_{depth}{'a' if agg else 'p'}"
        if self.has(f"val_{s}"):
            return s
        o, r, kw = self.o, self.r, self.kw
        sub = depth < o.max_depth
        plain = self.expr_family(scope, depth, False) if agg else s  # aggregate arguments: no aggregates
        nested = o.nested_expressions
        # Conditions: OR of ANDs of optionally negated predicates.
        r.add(f"cond_{s}", rep(f"conj_{s}", f"sp {kw('OR')} sp", o.max_conditions))
        r.add(f"conj_{s}", rep(f"pred_{s}", f"sp {kw('AND')} sp", o.max_conditions))
        if o.typed_comparisons:  # a number side and a text side; rules in typed_values()
            preds = [f"({kw('NOT')} sp)? nval_{s} pred_tail_n_{s}?", f"({kw('NOT')} sp)? sval_{s} pred_tail_s_{s}"]
        else:
            preds = [f"({kw('NOT')} sp)? val_{s} pred_tail_{s}?"]
            self.comparison_tail(s, f"val_{s}", depth, like=True)
        if nested:
            preds.append(f"({kw('NOT')} sp)? lp cond_{s} rp")
        if sub:
            preds.append(f"({kw('NOT')} sp)? {kw('EXISTS')} ows lp query_{depth + 1} rp")
        r.add(f"pred_{s}", alts(preds))
        # Values: sums of products of signed atoms.
        # A binary minus is followed by a space or by an unsigned term: "a--1" would start a comment.
        r.add(f"val_{s}", f"term_{s} (ows add_op ows term_{s} | ows \"-\" sp term_{s} | ows \"-\" uterm_{s})"
                          f"{{0,{5 if nested else 2}}}")
        product = f"(ows mul_op ows factor_{s}){{0,{3 if nested else 1}}}"
        r.add(f"term_{s}", f"factor_{s} {product}")
        r.add(f"uterm_{s}", f"atom_{s} {product}")
        r.add(f"factor_{s}", f'"-"? atom_{s}')
        colref = self.column_ref(scope, depth)
        atoms = [colref, "literal", f"func_{s}"]
        if nested:
            atoms += [f"lp val_{s} rp", f"case_{s}", f"cast_{s}"]
        if agg:
            atoms.append(f"agg_{s}")
        if sub:
            atoms.append(f"lp query1_{depth + 1} rp")
        r.add(f"atom_{s}", alts(atoms))
        # Arguments: any value when nesting is on, else flat arithmetic over columns and literals.
        arg = f"val_{s}"
        if not nested:
            arg = self.flat_arg(f"arg_{scope}_{depth}", f"({colref} | literal)")
        funcs: dict[str, list[str]] = {"n": [], "s": [], "x": []}
        for name, lo, hi in self.functions:
            args = arg + (f" (comma {arg}){{{lo - 1},{hi - 1}}}" if hi > 1 else "")
            funcs[_FUNCTION_SORTS.get(name, "x")].append(f"{kw(name)} lp {args} rp")
        for sort, items in funcs.items():
            if items:
                r.add(f"func_{s}_{sort}", alts(items))
        r.add(f"func_{s}", alts(f"func_{s}_{sort}" for sort, items in funcs.items() if items))
        if nested:
            r.add(
                f"case_{s}",
                f"{kw('CASE')} (sp {kw('WHEN')} sp cond_{s} sp {kw('THEN')} sp val_{s}){{1,4}}"
                f" (sp {kw('ELSE')} sp val_{s})? sp {kw('END')}",
            )
            r.add(f"cast_{s}", f"{kw('CAST')} lp val_{s} sp {kw('AS')} sp ({alts(kw(t) for t in _CAST_TYPES)}) rp")
        if agg:
            agg_arg = f"val_{plain}" if nested else arg
            sum_arg = agg_arg  # SUM, AVG and TOTAL: numbers when comparisons are typed
            if o.typed_comparisons:
                m = "m" if self.key_names else "n"
                mref = self.column_ref(scope, depth, m)
                sum_arg = f"{m}val_{plain}" if nested else self.flat_arg(
                    f"arg_{scope}_{depth}_{m}", f"({mref} | number)" if mref else "number")
            distinct = f"({kw('DISTINCT')} sp)?"
            aggs = [f"{kw('COUNT')} lp \"*\" rp"]
            aggs += [f"{kw(a)} lp {distinct} {sum_arg if a in ('SUM', 'AVG', 'TOTAL') else agg_arg} rp"
                     for a in _AGGREGATES]
            aggs.append(f"{kw('GROUP_CONCAT')} lp {agg_arg} (comma string)? rp")
            r.add(f"agg_{s}", alts(aggs))
        if o.typed_comparisons:
            self.typed_values(s, scope, depth, agg, sub)
        return s

    def flat_arg(self, name: str, simple: str) -> str:
        """A function argument without nesting: flat arithmetic over ``simple`` operands."""
        return self.r.add(name, f"\"-\"? {simple} (ows (add_op | mul_op) ows \"-\"? {simple}"
                                f" | ows \"-\" (sp \"-\"?)? {simple}){{0,2}}")

    def comparison_tail(self, s: str, value: str, depth: int, like: bool, sort: str = "") -> None:
        """``pred_tail_<sort>_<s>``: what follows the left side of a predicate, compared with ``value``s."""
        kw = self.kw
        bound = value
        if self.o.plausible:  # a range's ends are given, not read from a column: literals and functions
            ends = {"n": ['"-"? number_literal'], "s": ["text_literal"]}.get(sort, ['"-"? literal'])
            bound = self.r.add(f"bound_{sort}_{s}", alts([*ends, f"func_{s}_{sort}" if sort else f"func_{s}"]))
        in_items = [rep(value, "comma", self.o.max_in_values)]
        if depth < self.o.max_depth:
            in_items.append(f"query1_{depth + 1}")
        tails = [
            f"ows cmp_op ows {value}",
            f"sp {kw('IS')} sp ({kw('NOT')} sp)? {kw('NULL')}",
            f"(sp {kw('NOT')})? sp {kw('IN')} ows lp ({alts(in_items)}) rp",
            f"(sp {kw('NOT')})? sp {kw('BETWEEN')} sp {bound} sp {kw('AND')} sp {bound}",
        ]
        if like:
            tails.append(f"(sp {kw('NOT')})? sp {kw('LIKE')} sp {value}")
        self.r.add(f"pred_tail_{sort}_{s}" if sort else f"pred_tail_{s}", alts(tails))

    def typed_values(self, s: str, scope: str, depth: int, agg: bool, sub: bool) -> None:
        """``nval_<s>`` and ``sval_<s>``: values of one sort, for the two sides of a typed comparison;
        in plain families with ``plausible``, ``mval_<s>`` too: a number value without key columns,
        what SUM and AVG take.

        A number value is arithmetic over number columns, numbers and number-valued functions; a
        text value is text columns, strings and text-valued functions, joined by ``||``. What can hold
        either (CASE, CAST, an aggregate, a subquery, IFNULL...) is in both."""
        r, kw, nested = self.r, self.kw, self.o.nested_expressions
        now = [kw("CURRENT_DATE"), kw("CURRENT_TIMESTAMP")]  # text in SQLite; dates elsewhere (value_sort)
        r.add("number_literal", alts(["number", kw("TRUE"), kw("FALSE")] + (now if self.o.dialect != "sqlite" else [])))
        r.add("text_literal", alts(["string", *now]))
        either = [f"func_{s}_x"] if self.has(f"func_{s}_x") else []
        either += [f"case_{s}", f"cast_{s}"] if nested else []
        either += [f"agg_{s}"] if agg else []
        either += [f"lp query1_{depth + 1} rp"] if sub else []
        numbers = "nm" if self.key_names and not agg else "n"
        for sort in "s" + numbers:
            ref = self.column_ref(scope, depth, sort)
            own = [ref] if ref else []
            own += ["text_literal" if sort == "s" else "number_literal"]
            kind = "n" if sort == "m" else sort
            own += [f"func_{s}_{kind}"] if self.has(f"func_{s}_{kind}") else []
            own += [f"lp {sort}val_{s} rp"] if nested else []
            r.add(f"{sort}atom_{s}", alts(own + either))
        for n in numbers:
            product = f"(ows mul_op ows {n}factor_{s}){{0,{3 if nested else 1}}}"
            r.add(f"{n}val_{s}", f"{n}term_{s} (ows \"+\" ows {n}term_{s} | ows \"-\" sp {n}term_{s}"
                                 f" | ows \"-\" {n}uterm_{s}){{0,{5 if nested else 2}}}")
            r.add(f"{n}term_{s}", f"{n}factor_{s} {product}")
            r.add(f"{n}uterm_{s}", f"{n}atom_{s} {product}")
            r.add(f"{n}factor_{s}", f'"-"? {n}atom_{s}')
        r.add(f"sval_{s}", f'satom_{s} (ows "||" ows satom_{s}){{0,2}}')
        self.comparison_tail(s, f"nval_{s}", depth, like=False, sort="n")
        self.comparison_tail(s, f"sval_{s}", depth, like=True, sort="s")

    # -- queries ---------------------------------------------------------------------------------
    def clauses(self, scope: str, depth: int) -> tuple[str, str]:
        """SELECT-list and WHERE..LIMIT rules of one scope; returns (items, tail) rule names."""
        o, r, kw = self.o, self.r, self.kw
        key = f"{scope}_{depth}"
        if self.has(f"items_{key}"):
            return f"items_{key}", f"tail_{key}"
        a = self.expr_family(scope, depth, True)
        p = self.expr_family(scope, depth, False)
        r.add(f"items_{key}", rep(f"item_{key}", "comma", o.max_select_items))
        star_of = "(table_name | alias)" if o.table_aliases else "table_name"
        if scope != "all":  # a single-table query can only star its own table
            own = ebnf_literal(quote_ident(self.table_names[int(scope[1:])]))
            star_of = f"({own} | alias)" if o.table_aliases else own
        r.add(f"item_{key}", f'"*" | {star_of} ".*" | item1_{key}')
        r.add(f"item1_{key}", f"val_{a} (sp {kw('AS')} sp out_alias)?")
        r.add(f"where_{key}", f"sp {kw('WHERE')} sp cond_{p}")
        r.add(
            f"group_{key}",
            f"sp {kw('GROUP BY')} sp {rep(f'group_item_{key}', 'comma', o.max_group_by)}"
            f" (sp {kw('HAVING')} sp cond_{a})?",
        )
        r.add(f"group_item_{key}", f"val_{p} | out_alias")
        r.add(f"order_{key}", f"sp {kw('ORDER BY')} sp {rep(f'order_item_{key}', 'comma', o.max_order_by)}")
        r.add(f"order_item_{key}", f"(val_{a} | out_alias) direction?")
        ordered = f"(order_{key} limit?)?" if o.plausible else f"order_{key}? limit?"
        r.add(f"tail_{key}", f"where_{key}? group_{key}? {ordered}")
        return f"items_{key}", f"tail_{key}"

    def query(self, depth: int) -> None:
        """``query_<d>`` (any number of columns) and ``query1_<d>`` (one column, for IN and scalars).

        A query without joins is one alternative per table whose expressions see only that table's
        columns, so ``SELECT x FROM t`` can only name columns of ``t``. A query with joins (or a
        derived table) sees every column: which table an alias stands for is beyond a CFG."""
        if self.has(f"query_{depth}"):
            return
        o, r, kw = self.o, self.r, self.kw
        d = depth
        sub = depth < o.max_depth
        head = f"{kw('SELECT')} sp ({kw('DISTINCT')} sp)?"
        many, one = [], []
        scoped = self.scoped
        as_alias = f" (sp {kw('AS')} sp alias)?" if o.table_aliases else ""
        for i, t in enumerate(self.table_names if scoped else []):
            items, tail = self.clauses(f"t{i}", d)
            frm = r.add(f"from_t{i}_{d}",
                        f"sp {kw('FROM')} sp {ebnf_literal(quote_ident(t))}{as_alias}")
            many.append(f"{items} {frm} {tail}")
            one.append(f"item1_t{i}_{d} {frm} {tail}")
        items, tail = self.clauses("all", d)
        ref = r.add(f"table_ref_{d}", f"table_name{as_alias}")
        joins = " | ".join(kw(j) for j in ("JOIN", "INNER JOIN", "LEFT JOIN", "LEFT OUTER JOIN"))
        p = self.expr_family("all", d, False)
        keyed_from = None
        if o.foreign_key_joins and not o.table_aliases and self.keys:
            keyed_from = self.keyed_from(d, f"sp ({joins}) sp", f"(sp {kw('AND')} sp conj_{p})?")
            # The joined table is one end of the key it is joined on.
            pairs: dict[str, list[str]] = {}
            for child, col, parent, pk in self.keys:
                a, b = quote_ident(child) + "." + quote_ident(col), quote_ident(parent) + "." + quote_ident(pk)
                for t in {child, parent}:
                    pairs.setdefault(t, []).extend([ebnf_literal(f"{a} = {b}"), ebnf_literal(f"{b} = {a}")])
            keyed = [f"{ebnf_literal(quote_ident(t))} sp {kw('ON')} sp ({alts(eqs)})"
                     for t, eqs in sorted(pairs.items())]
            r.add(f"join_{d}", f"sp ({joins}) sp ({alts(keyed)}) (sp {kw('AND')} sp conj_{p})?")
        else:
            r.add(
                f"join_{d}",
                alts([
                    f"sp ({joins}) sp {ref} sp {kw('ON')} sp cond_{p}",
                    f"sp {kw('CROSS JOIN')} sp {ref}",
                    f"comma {ref}",
                ]),
            )
        froms = keyed_from or [f"sp {kw('FROM')} sp {ref} join_{d}{{{1 if scoped else 0},{o.max_joins}}}"]
        if sub:
            # Without table aliases a derived table goes unnamed (SQLite allows it; its columns are bare).
            derived = f" sp {kw('AS')} sp alias" if o.table_aliases else ""
            froms.append(f"sp {kw('FROM')} sp lp query_{d + 1} rp{derived} join_{d}{{0,{o.max_joins}}}")
        r.add(f"from_all_{d}", alts(froms))
        many.append(f"{items} from_all_{d} {tail}")
        one.append(f"item1_all_{d} from_all_{d} {tail}")
        r.add(f"query_{d}", f"{head} ({alts(many)})")
        r.add(f"query1_{d}", f"{head} ({alts(one)})")
        if sub:
            self.query(d + 1)


    def keyed_from(self, d: int, join: str, extra: str) -> list[str] | None:
        """FROM alternatives where each JOIN brings a new table on a declared key whose other end is
        a table already in FROM (a state per set of joined tables); None past ``max_join_states``.

        Without aliases a table joined twice is ambiguous and a key to a table not yet joined is
        ``no such column``: both were the commonest reasons a 135M model's joins did not run."""
        links: dict[str, list[tuple[str, str]]] = {}  # table -> (other table, "a = b" literal)
        for child, col, parent, pk in self.keys:
            if child == parent:
                continue  # a self-join needs aliases
            a, b = quote_ident(child) + "." + quote_ident(col), quote_ident(parent) + "." + quote_ident(pk)
            for eq in (ebnf_literal(f"{a} = {b}"), ebnf_literal(f"{b} = {a}")):
                links.setdefault(child, []).append((parent, eq))
                links.setdefault(parent, []).append((child, eq))
        bit = {t: 1 << i for i, t in enumerate(self.table_names)}
        nexts: dict[int, list[tuple[str, list[str]]]] = {}
        todo = [bit[t] for t in self.table_names]
        while todo:
            state = todo.pop()
            if state in nexts:
                continue
            if len(nexts) >= self.o.max_join_states:
                return None
            joined = {t for t in self.table_names if state & bit[t]}
            steps: dict[str, list[str]] = {}
            if len(joined) <= self.o.max_joins:
                for t in sorted(joined):
                    for other, eq in links.get(t, []):
                        if other not in joined:
                            steps.setdefault(other, []).append(eq)
            nexts[state] = sorted(steps.items())
            todo.extend(state | bit[t] for t in steps)
        kw, singles = self.kw, set(bit.values())
        for state, steps in nexts.items():
            options = [f"{join} {ebnf_literal(quote_ident(t))} sp {kw('ON')} sp ({alts(eqs)}) {extra} "
                       f"joined_{d}_{state | bit[t]}" for t, eqs in steps]
            # Scoped grammars serve single-table queries elsewhere, so FROM here needs a join.
            optional = state not in singles or not self.scoped
            body = alts(options) if options else '""'
            self.r.add(f"joined_{d}_{state}", f"({body})?" if optional and options else body)
        return [f"sp {kw('FROM')} sp {ebnf_literal(quote_ident(t))} joined_{d}_{bit[t]}"
                for t in self.table_names if nexts[bit[t]] or not self.scoped]


def sql_grammar(schema: Schema | Mapping[str, Sequence[str]], options: GrammarOptions | None = None) -> str:
    """The EBNF text for ``SamplingParams(guided=GuidedSpec(Grammar(...)))``.

    ``schema`` is a :class:`Schema` or a plain ``{table: [columns]}`` mapping. The grammar's
    dialect (which functions exist) follows the schema's unless ``options`` names one.
    """
    opts = options or GrammarOptions()
    keys: list[tuple[str, str, str, str]] = []
    sorts: dict[str, dict[str, str | None]] = {}
    key_names: frozenset[str] = frozenset()
    if isinstance(schema, Schema):
        key_names = schema.key_columns()
        tables: Mapping[str, Sequence[str]] = schema.columns_by_table()
        dialect = opts.dialect or schema.dialect
        keys = schema.single_keys()
        sorts = {t.name: {c.name: value_sort(c.type, dialect) for c in t.columns} for t in schema.tables}
    else:
        tables, dialect = schema, opts.dialect or "sqlite"
    opts = replace(opts, dialect=dialect)
    b = _Builder(tables, opts, keys, sorts, key_names)
    b.r.add("root", f"query_0 ({alts(ebnf_literal(t) for t in opts.terminators)})")
    b.lexical()
    b.query(0)
    return b.r.text()


def matches_grammar(ebnf: str, text: str) -> bool:
    """Whether ``text`` is a complete sentence of ``ebnf`` (a character-level check, no tokenizer).

    For tests and diagnostics: e.g. does the grammar of a schema admit a hand-written query."""
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(ebnf), terminate_without_stop_token=True)
    return bool(matcher.accept_string(text)) and matcher.is_terminated()
