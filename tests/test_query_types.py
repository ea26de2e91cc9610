"""Every canned query answers with the same Python types on SQLite and PostgreSQL: run over the
same warehouse (tests/query_fixture.py) on both, with each of its parameters' forms and every
filter (which pick other statements: the definition, the summaries, their narrowed forms), each
column's values must have one type per backend and the same on both, and counts must be ints
(PostgreSQL sums integers as numeric, which once came back as 928.0)."""

from __future__ import annotations

from contextlib import contextmanager
from decimal import Decimal

import query_fixture
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.filters import Filters
from warehouse.queries import QUERIES, run_canned

# Columns that count things: ints on both backends, whatever the statement.
COUNTS = {"trials", "complete", "incomplete", "errors", "successes", "attempts", "runs_solved",
          "runs_attempted", "a_attempts", "a_successes", "b_attempts", "b_successes", "tasks", "n", "c",
          "min_attempts", "shared", "gained", "lost"}

FILTERS = [Filters(), Filters.of(model="m1"), Filters.of(task="task1"), Filters.of(run="run-a"),
           Filters.of(agent="terminus", label="k=v")]


def _variants(query) -> list[dict]:
    """The query's parameters at their defaults, then each in another form it takes."""
    given: dict = {"a": "run-a", "b": "run-b"} if any(p.name == "a" for p in query.params) else {}
    out = [dict(given)]
    for param in query.params:
        if param.type is bool:
            out.append({**given, param.name: True})
        elif param.name == "threshold":
            out.append({**given, "threshold": 0.5})
        elif param.name == "by":
            out += [{**given, "by": by} for by in (*param.choices, "label:k") if by != param.default]
    return out


@contextmanager
def _warehouse(backend: str, tmp_path, request):
    from conftest import _fresh_pg

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'types.db'}"
        engine = make_engine(resolve_url(url))
        schema.upgrade(engine)
        yield url, engine
        engine.dispose()
        return
    with contextmanager(_fresh_pg)(request.getfixturevalue("pg_template")) as url:
        engine = make_engine(resolve_url(url))
        yield url, engine
        engine.dispose()


def _types(url: str) -> dict[tuple, set[type]]:
    """(query, parameters, filters, column) -> the types of its non-NULL values."""
    out: dict[tuple, set[type]] = {}
    for query in QUERIES.values():
        for given in _variants(query):
            for filters in FILTERS:
                result = run_canned(url, query, given, filters=filters)
                for i, column in enumerate(result.columns):
                    key = (query.name, tuple(sorted(given.items())), filters, column)
                    out[key] = {type(row[i]) for row in result.rows if row[i] is not None}
    return out


def test_every_canned_query_has_the_same_column_types_on_both_backends(tmp_path, request):
    answers = {}
    for backend in ("sqlite", "postgresql"):
        with _warehouse(backend, tmp_path, request) as (url, engine):
            query_fixture.build(engine)
            with engine.begin() as conn:
                from sqlalchemy import text

                conn.execute(text("INSERT INTO run_labels (run_id, key, value) "
                                  "SELECT id, 'k', 'v' FROM runs WHERE run_key <> 'run-c'"))
            answers[backend] = _types(url)
    sqlite, postgresql = answers["sqlite"], answers["postgresql"]
    assert sqlite.keys() == postgresql.keys()
    assert len(sqlite) > 500  # every query, form and filter: each column
    differ = {key: (sqlite[key], postgresql[key]) for key in sqlite if sqlite[key] != postgresql[key]}
    assert not differ, "; ".join(sorted({f"{k[0]}.{k[-1]}: {v}" for k, v in differ.items()}))
    for key, kinds in sqlite.items():
        assert len(kinds) <= 1, (key, kinds)  # one type per column
        assert Decimal not in kinds, key
        if key[-1] in COUNTS:
            assert kinds <= {int}, (key, kinds)
    # The answers are not all empty: every count column met some value.
    seen = {key[-1] for key, kinds in sqlite.items() if kinds}
    assert COUNTS <= seen, COUNTS - seen
