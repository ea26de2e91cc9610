"""Upgrades reach the state of a fresh load: a warehouse written by the code of each earlier
revision (tests/fixtures/upgrade/<rev>.db.gz, written by make_fixtures.py there), upgraded to
head, holds what a fresh ingest of the same sources at head holds.

On PostgreSQL the old warehouse is rebuilt at its revision: the schema by `alembic upgrade
<rev>`, then the old SQLite file's rows copied in table by table, as they were stored."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import JSON, DateTime, MetaData, text

from canonical import differences, dump
from ingest.pipeline import ingest
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.runs import resolve_run

FIXTURES = Path(__file__).parent / "fixtures" / "upgrade"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
REVISIONS = sorted(MANIFEST["commits"])


def test_every_earlier_revision_has_a_fixture():
    earlier = [rev.revision for rev in reversed(list(schema.script().walk_revisions()))
               if rev.revision != schema.HEAD_REVISION]
    assert REVISIONS == earlier, "add the last commit at the old head to make_fixtures.COMMITS and run it"


def _old_sqlite(rev: str, path: Path) -> Path:
    with gzip.open(FIXTURES / f"{rev}.db.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _copy_rows(sqlite_path: Path, engine, rev: str) -> None:
    """The schema at `rev` by its migrations, then every row of the SQLite warehouse as stored:
    JSON as its JSON, times as UTC (SQLite keeps them without an offset), ids kept (and each id
    sequence moved past them); generated columns are the database's own."""
    schema.upgrade(engine, rev)
    meta = MetaData()
    meta.reflect(engine)
    old = sqlite3.connect(sqlite_path)
    try:
        with engine.begin() as conn:
            for table in meta.sorted_tables:
                if table.name == "alembic_version":
                    continue
                cursor = old.execute(f'SELECT * FROM "{table.name}"')
                names = [d[0] for d in cursor.description]
                columns = {c.name: c for c in table.columns if c.computed is None}
                rows = [{name: _value(columns[name], value) for name, value in zip(names, row) if name in columns}
                        for row in cursor]
                if rows:
                    conn.execute(table.insert(), rows)
                if "id" in table.columns:
                    conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), max(id)) "
                                      f"FROM {table.name} HAVING max(id) IS NOT NULL"))
    finally:
        old.close()


def _value(column, value):
    if value is None:
        return None
    if isinstance(column.type, JSON):
        return json.loads(value)
    if isinstance(column.type, DateTime):
        return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
    return value


def _move_sources(engine, root: Path) -> None:
    """The uri a source was recorded under is where make_fixtures.py put the files; this test's
    copy of them is elsewhere."""
    old = MANIFEST["sources_root"]
    with engine.begin() as conn:
        conn.execute(text("UPDATE sources SET uri = :new || substr(uri, :n) WHERE substr(uri, 1, :m) = :old"),
                     {"new": str(root), "n": len(old) + 1, "m": len(old), "old": old})


def _fresh(engine, root: Path) -> None:
    """The same ingests make_fixtures.py ran, at head."""
    for source in ("jobs", "hub-sample"):
        summary = ingest(engine, [str(root / source)])
        assert summary.errors == [] and summary.units_loaded > 0


# What the code of a revision did not store, which no migration can recover (the trace files are
# not in the warehouse; archives delete them once ingested): left out of both dumps for fixtures
# written by that code, and only that.
#
# Before 0008 (commit 315bb71) a trajectory's final observation, which no later turn holds, was
# dropped; now it is the `observation` of the turn extra of the last turn of the trace's last episode.
FINAL_OBSERVATION_KEPT_FROM = "0008"


def _without_final_observations(turns: list[str]) -> list[str]:
    rows = [json.loads(line) for line in turns]
    last_turn: dict[str, int] = {}
    last_episode: dict[str, int] = {}
    for row in rows:
        episode = json.dumps(row["episode"])
        last_turn[episode] = max(last_turn.get(episode, -1), row["idx"])
        trace = json.dumps(row["episode"][:2])
        last_episode[trace] = max(last_episode.get(trace, -1), row["episode"][2])
    for row in rows:
        final = (row["idx"] == last_turn[json.dumps(row["episode"])]
                 and row["episode"][2] == last_episode[json.dumps(row["episode"][:2])])
        if final and isinstance(row["extra"], dict):
            row["extra"].pop("observation", None)
    return sorted(json.dumps(row, sort_keys=True, ensure_ascii=True) for row in rows)


def _comparable(engine, rev: str) -> dict[str, list[str]]:
    """The canonical dump, order-independent (the per-load counters of which unit wrote an
    episode first, and run names, are left out there: both warehouses loaded in the same order
    anyway, and names are compared on their own), without the version of the code that wrote
    each unit, and without what the code of `rev` could not store."""
    out = dump(engine, order_independent=True)
    # Which code wrote each unit: the old release's, in an upgraded warehouse.
    out["loads"] = sorted(json.dumps({k: v for k, v in json.loads(line).items() if k != "tool_version"},
                                     sort_keys=True, ensure_ascii=True) for line in out["loads"])
    if rev < FINAL_OBSERVATION_KEPT_FROM:
        out["turns"] = _without_final_observations(out["turns"])
        out["conversations"] = _without_last_observations(out["conversations"])
    return out


def _without_last_observations(conversations: list[str]) -> list[str]:
    """The final observation is a trajectory's last turn's: its conversation's last turn."""
    rows = [json.loads(line) for line in conversations]
    for row in rows:
        extra = row["turns"][-1][3] if row["turns"] else None
        if isinstance(extra, dict):
            extra.pop("observation", None)
    return sorted(json.dumps(row, sort_keys=True, ensure_ascii=True) for row in rows)


def _run_names(engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT run_key, name FROM runs")).all())


@pytest.mark.parametrize("rev", REVISIONS)
def test_an_upgraded_warehouse_is_a_fresh_one(rev, backend, db_url, tmp_path, request):
    root = tmp_path / "sources"
    shutil.copytree(FIXTURES / "sources", root)
    old_file = _old_sqlite(rev, tmp_path / f"{rev}.db")
    if backend == "sqlite":
        upgraded = make_engine(resolve_url(str(old_file)))
    else:
        upgraded = make_engine(resolve_url(request.getfixturevalue("empty_db_url")))
        _copy_rows(old_file, upgraded, rev)
    fresh = make_engine(resolve_url(db_url))
    try:
        assert schema.current_revision(upgraded) == rev
        _move_sources(upgraded, root)
        schema.upgrade(upgraded)
        _fresh(fresh, root)
        names = _run_names(fresh)
        assert _run_names(upgraded) == names
        with upgraded.connect() as conn:  # `--run <name>` finds each run, as on the fresh warehouse
            assert {resolve_run(conn, name).run_key: name for name in names.values()} == names
        assert differences(_comparable(upgraded, rev), _comparable(fresh, rev)) == []
    finally:
        upgraded.dispose()
        fresh.dispose()


def test_migration_0012_names_the_runs_named_by_their_job_uuid(engine, db_url, tmp_path):
    """Each run the old code named by its job UUID gets its first source's name: a trial folder
    without job files, an RL `trace_jobs/` folder, a dataset; a run whose key is no job's (an
    `ingest --run` key) and one renamed by hand keep theirs."""
    import random

    from helpers import hub_row, write_shard
    from trace_trees import make_trial

    rng = random.Random(12)
    uuids = [f"{n}{n}{n}{n}{n}{n}{n}{n}-1111-4222-8333-444455556666" for n in "abcd"]
    make_trial(tmp_path / "src" / "2026-06-01__10-00-00" / "t__AAA", rng, task="t", job_id=uuids[0],
               n_agent_steps=1, words=3)
    make_trial(tmp_path / "src" / "sweep" / "trace_jobs" / "u__BBB", rng, task="u", job_id=uuids[1],
               n_agent_steps=1, words=3)
    make_trial(tmp_path / "own" / "o__DDD", rng, task="o", job_id=None, n_agent_steps=1, words=3)
    make_trial(tmp_path / "mine" / "m__EEE", rng, task="m", job_id=uuids[3], n_agent_steps=1, words=3)
    write_shard(tmp_path / "ds" / "data" / "a.parquet", [hub_row("v__CCC", 0, [("user", "q")], run_id=uuids[2])])
    for spec, run in ((tmp_path / "src", None), (tmp_path / "ds", None), (tmp_path / "own", "by-hand-key"),
                      (tmp_path / "mine", None)):
        assert ingest(engine, [str(spec)], run=run).errors == []
    fresh = _run_names(engine)
    assert [fresh[key] for key in uuids[:3]] == ["2026-06-01__10-00-00", "sweep", "ds"]
    assert fresh["by-hand-key"] == "by-hand-key"
    with engine.begin() as conn:  # as the code before 0008 left them; and one renamed by hand
        conn.execute(text("UPDATE runs SET name = run_key WHERE run_key IN (:a, :b, :c)"),
                     dict(zip("abc", uuids)))
        conn.execute(text("UPDATE runs SET name = 'custom' WHERE run_key = :d"), {"d": uuids[3]})
    old = dict(fresh, **{key: key for key in uuids[:3]}, **{uuids[3]: "custom"})
    schema.downgrade(engine, "0011")
    assert _run_names(engine) == old
    schema.upgrade(engine)
    assert _run_names(engine) == dict(fresh, **{uuids[3]: "custom"})
    schema.downgrade(engine, "0011")  # downgrading keeps the names
    assert _run_names(engine) == dict(fresh, **{uuids[3]: "custom"})
