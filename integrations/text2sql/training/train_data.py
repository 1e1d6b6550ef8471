"""Training data for the text-to-SQL adapter: generated SQLite schemas, questions and checked gold SQL.

Each schema is one domain of :mod:`.train_domains` laid out by :mod:`.train_schema` (a place lookup,
people, a catalog, a header and a line table, often staff and ratings), with its column names, comments,
table order and rows varied by a seeded RNG. Questions come from the bilingual templates of
:mod:`.train_templates` (one table), :mod:`.train_join_templates` (two to five tables),
:mod:`.train_table_templates` (any table, any column, by its own words), :mod:`.train_edge_templates`
(any foreign key: a child table and its parent, by their own words), :mod:`.train_path_templates` (two
keys in a row, the table between them unnamed) and :mod:`.train_history_templates` (current values of
periods whose end is NULL), several phrasings each,
with values read back from the generated rows. Every gold query is executed on its database and
dropped unless it runs and returns rows; it is stored in the style the adapter is trained to write,
columns qualified by table names instead of aliases (:mod:`.table_names`), checked to return the same
rows. Prompts are made exactly as the evaluation makes them: the seed template over ``Source.ddl()``
of the SQLite file, followed by the stored values the question names (:mod:`..value_hints`).

Disjointness from the shipped evaluation set is enforced, not assumed: :func:`check_disjoint` raises
when a schema name, a table name or a question (case- and space-normalised) of the eval set appears.

Run ``python -m integrations.text2sql.training.train_data OUT.jsonl.gz --schemas N`` to write a file.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from integrations.text2sql.dataset import EvalItem, load_eval, render_prompt, schema_ddl, schema_names
from integrations.text2sql.training import (
    train_edge_templates,
    train_history_templates,
    train_join_templates,
    train_path_templates,
    train_table_templates,
    train_templates,
)
from integrations.text2sql.training.table_names import drop_table_aliases
from integrations.text2sql.training.train_domains import DOMAINS
from integrations.text2sql.training.train_schema import Layout, create
from integrations.text2sql.training.train_templates import Ctx
from integrations.text2sql.value_hints import prompt_ddl, render_hints

if TYPE_CHECKING:
    from integrations.text2sql.sources import Source

ROLE_TEMPLATES = train_templates.TEMPLATES + train_join_templates.TEMPLATES
TABLE_TEMPLATES = train_table_templates.TEMPLATES
EDGE_TEMPLATES = train_edge_templates.TEMPLATES
PATH_TEMPLATES = train_path_templates.TEMPLATES
HISTORY_TEMPLATES = train_history_templates.TEMPLATES
TEMPLATES = ROLE_TEMPLATES + TABLE_TEMPLATES + EDGE_TEMPLATES + PATH_TEMPLATES + HISTORY_TEMPLATES
# The schema-agnostic families' shares of the draws: enough that a column and a join are found by reading
# the DDL, not by the role templates' habits, while the role templates keep the longer joins.
TABLE_SHARE = 0.28
EDGE_SHARE = 0.22
PATH_SHARE = 0.1
HISTORY_SHARE = 0.07  # of every schema's draws; only the schemas with a history table answer them
FAMILIES = ((TABLE_SHARE, TABLE_TEMPLATES, train_table_templates.WEIGHTS),
            (EDGE_SHARE, EDGE_TEMPLATES, train_edge_templates.WEIGHTS),
            (PATH_SHARE, PATH_TEMPLATES, train_path_templates.WEIGHTS),
            (HISTORY_SHARE, HISTORY_TEMPLATES, train_history_templates.WEIGHTS))


@dataclass(frozen=True)
class Example:
    schema: str
    lang: str
    question: str
    sql: str
    ddl: str
    template: str = ""  # the function that made it (files written before v3 lack it)
    hints: str = ""  # the question's stored values, rendered (value_hints; files before v4 lack them)

    def prompt(self) -> str:
        return render_prompt(prompt_ddl(self.ddl, self.hints), self.question)


# -- eval disjointness -------------------------------------------------------------------------------

def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def eval_names() -> tuple[set[str], set[str], set[str]]:
    """(schema names, table names, normalised questions) of the shipped evaluation set."""
    tables = {t.lower() for s in schema_names() for t in re.findall(r"CREATE TABLE (\w+)", schema_ddl(s))}
    return set(schema_names()), tables, {_norm(i.question) for i in load_eval()}


def check_disjoint(examples: Iterable[Example]) -> None:
    """Raises ``ValueError`` when any example shares a schema, a table or a question with the eval set."""
    schemas, tables, questions = eval_names()
    for ex in examples:
        used = {t.lower() for t in re.findall(r"CREATE TABLE (\w+)", ex.ddl)}
        if ex.schema in schemas or used & tables or _norm(ex.question) in questions:
            raise ValueError(f"training example overlaps the eval set: {ex.schema}: {ex.question!r}")


# -- generation --------------------------------------------------------------------------------------

def _layouts(n: int, rng: random.Random, start: int = 0) -> Iterator[Layout]:
    for k in range(start, start + n):
        d = DOMAINS[k % len(DOMAINS)]
        yield Layout(f"{d.name}_{k}", d, random.Random(rng.random()))


def _draw(rng: random.Random):
    """A template: each schema-agnostic family its share of the draws (by its own weights), the rest spread
    evenly over the role templates."""
    roll = rng.random()
    for share, family, weights in FAMILIES:
        if roll < share:
            return rng.choices(family, weights)[0]
        roll -= share
    return rng.choice(ROLE_TEMPLATES)


def _trivial(rows: list[tuple]) -> bool:
    """An empty answer, or a lone NULL or zero, teaches nothing about the question."""
    return not rows or rows == [(None,)] or rows == [(0,)]


def generate(n_schemas: int, per_schema: int = 40, seed: int = 0, db_dir: Path | None = None,
             start: int = 0) -> list[Example]:
    """``per_schema`` checked examples (at most; duplicates are dropped) for each of ``n_schemas`` schemas.

    The SQLite files are kept in ``db_dir`` (as ``<schema>.sqlite``) when given, else thrown away. Schemas
    are numbered from ``start``, so shards made in parallel (another seed, another start) join into one
    file without two schemas of one name."""
    from integrations.text2sql.sources import Source

    rng = random.Random(seed)
    _, eval_tables, eval_questions = eval_names()
    out: list[Example] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(db_dir or tmp_dir)
        tmp.mkdir(parents=True, exist_ok=True)
        for lay in _layouts(n_schemas, rng, start):
            if lay.tables() & eval_tables:
                raise ValueError(f"domain {lay.d.name} reuses an eval table name")
            path = tmp / f"{lay.name}.sqlite"
            path.unlink(missing_ok=True)
            con = sqlite3.connect(path)
            # A generated file is rebuilt, never recovered: no fsync per table (most of the run's time on disk).
            con.execute("PRAGMA synchronous = OFF")
            create(con, lay)
            source = Source(lay.name, f"sqlite:///{path}")
            ddl = source.ddl()
            values = source.values()
            ctx = Ctx(lay, con, lay.rng)
            seen: set[str] = set()
            # Both languages about equally often.
            for attempt in range(per_schema * 3):
                if len(seen) >= per_schema:
                    break
                make = _draw(rng)
                made = make(ctx)
                if made is None:
                    continue
                en, ko, sql = made
                lang = "en" if attempt % 2 else "ko"
                question = rng.choice(en if lang == "en" else ko)
                if question in seen or _norm(question) in eval_questions:
                    continue
                named = drop_table_aliases(sql)
                try:
                    rows = con.execute(sql).fetchall()
                    if named != sql and con.execute(named).fetchall() != rows:
                        raise ValueError(f"without its aliases the gold query means something else: {named}")
                except sqlite3.Error as exc:
                    raise ValueError(f"template made a broken gold query: {sql}: {exc}") from exc
                sql = named
                if _trivial(rows):
                    continue
                seen.add(question)
                out.append(Example(lay.name, lang, question, sql, ddl, make.__name__,
                                   render_hints(values.match(question))))
            con.close()
            source.close()
    check_disjoint(out)
    return out


def held_out(n_schemas: int, per_schema: int, seed: int, db_dir: Path) -> tuple[list[EvalItem], dict[str, Source]]:
    """Questions on fresh generated schemas, as eval items with their databases (kept in ``db_dir``): how
    well a model answers what its training data looks like, to set beside the shipped eval set's score."""
    from integrations.text2sql.sources import Source

    examples = generate(n_schemas, per_schema, seed, db_dir)
    items = [EvalItem(f"{ex.schema}-{n:03d}", ex.schema, ex.lang, ex.question, ex.sql)
             for n, ex in enumerate(examples)]
    return items, {name: Source(name, f"sqlite:///{db_dir / name}.sqlite") for name in {ex.schema for ex in examples}}


def write(examples: Iterable[Example], path: Path) -> int:
    opener = gzip.open if str(path).endswith(".gz") else open
    n = 0
    with opener(path, "wt", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(json.dumps(asdict(ex), ensure_ascii=False) + "\n")
            n += 1
    return n


def read(path: Path) -> list[Example]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [Example(**json.loads(line)) for line in fh if line.strip()]


if __name__ == "__main__":
    import typer

    def main(out: Path, schemas: int = 240, per_schema: int = 40, seed: int = 0, start: int = 0) -> None:
        n = write(generate(schemas, per_schema, seed, start=start), out)
        typer.echo(f"wrote {n} examples over {schemas} schemas to {out}")

    typer.run(main)
