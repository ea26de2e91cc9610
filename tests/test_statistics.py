"""Planner statistics after every ingest and every schema change (warehouse.db.statistics): on
PostgreSQL the tables a command changed are analysed (the summary tables vacuumed too) before it
returns, whether or not autovacuum runs; on SQLite nothing is gathered (the canned queries are
written for its planner without statistics)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from sqlalchemy.engine import make_url

from procs import run_cli, units
from tools.generate import generate_dataset
from warehouse.db.statistics import _stale

SUMMARY_TABLES = {"trial_lengths", "run_task_breakdown", "run_task_outcomes", "run_sources"}
# Tables every Hub ingest writes rows to.
WRITTEN = {"sources", "loads", "runs", "tasks", "trials", "episodes", "conversations", "conversation_turns", "messages", "episode_loads",
           "trial_loads", *SUMMARY_TABLES}


def _pg_tables(url: str) -> dict[str, tuple]:
    """{table: (last_analyze, last_vacuum, reltuples, relallvisible)}: last_analyze and last_vacuum
    are the commands' own, never autovacuum's (which has columns of its own)."""
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.relname, s.last_analyze, s.last_vacuum, c.reltuples, c.relallvisible "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.schemaname = current_schema()")
        return {name: rest for name, *rest in rows}


def _sqlite_stat_tables(url: str) -> set[str]:
    with sqlite3.connect(make_url(url).database) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'sqlite_stat%'")}


@pytest.fixture
def dataset(tmp_path) -> str:
    generate_dataset(tmp_path / "ds", "tiny", shards=2, seed=4)
    return str(tmp_path / "ds")


def test_ingest_leaves_the_changed_tables_analysed(backend, empty_db_url, dataset):
    done = run_cli(empty_db_url, "ingest", dataset)
    assert done.returncode == 0, done.stderr
    assert units(done.stderr) == (2, 0, 0)
    if backend == "sqlite":
        assert not _sqlite_stat_tables(empty_db_url), "SQLite is planned without gathered statistics"
        return
    tables = _pg_tables(empty_db_url)
    for name in WRITTEN:
        last_analyze, last_vacuum, reltuples, all_visible = tables[name]
        assert last_analyze is not None, f"{name} was not analysed by the ingest"
        assert reltuples > 0, f"{name}: the planner does not know it holds rows"
        if name in SUMMARY_TABLES:  # vacuumed too: the visibility map their index-only scans use
            assert last_vacuum is not None and all_visible > 0, name
    assert tables["conflicts"][0] is None, "an empty table is not analysed"


def test_an_ingest_that_loads_nothing_analyses_nothing(backend, empty_db_url, dataset):
    def analysed() -> object:  # when each table was last analysed and vacuumed by a command
        if backend == "sqlite":
            return _sqlite_stat_tables(empty_db_url)
        return {name: state[:2] for name, state in _pg_tables(empty_db_url).items()}

    assert run_cli(empty_db_url, "ingest", dataset).returncode == 0
    before = analysed()
    again = run_cli(empty_db_url, "ingest", dataset)
    assert again.returncode == 0, again.stderr
    assert units(again.stderr) == (0, 2, 0)
    assert analysed() == before


def test_db_upgrade_analyses_what_the_migrations_rebuilt(backend, empty_db_url, dataset):
    assert run_cli(empty_db_url, "ingest", dataset).returncode == 0
    down = run_cli(empty_db_url, "db", "downgrade", "0008")
    assert down.returncode == 0, down.stderr
    before = _pg_tables(empty_db_url) if backend == "postgresql" else None
    up = run_cli(empty_db_url, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    if backend == "sqlite":
        assert not _sqlite_stat_tables(empty_db_url)
        return
    after = _pg_tables(empty_db_url)
    # 0009 rewrites trial_lengths and run_task_outcomes; every table holding rows is analysed.
    # (conversations and conversation_turns are new since 0008: made by 0014, then analysed.)
    for name in WRITTEN:
        assert after[name][0] is not None and (name not in before or after[name][0] > before[name][0]), name


@pytest.mark.parametrize(("reltuples", "relpages", "pages", "modified", "stale"), [
    (-1, 0, 3, 0, True),  # never analysed, now holds rows
    (-1, 0, 0, 0, False),  # never analysed, still empty
    (0, 0, 2, 0, True),  # analysed while empty, now holds rows
    (10_000, 100, 105, 0, False),  # grew 5% (500 rows)
    (10_000, 100, 120, 0, True),  # grew 20%
    (10_000, 100, 100, 900, False),  # 9% of its rows changed in place
    (10_000, 100, 100, 1_200, True),  # 12% changed in place
    (100, 1, 1, 40, False),  # a small table: under the floor of 50 rows changed
    (100, 1, 1, 70, True),
])
def test_a_table_is_stale_when_much_of_it_changed(reltuples, relpages, pages, modified, stale):
    assert _stale(reltuples, relpages, pages, modified, every_table=False) is stale
    assert _stale(reltuples, relpages, pages, modified, every_table=True) is (pages > 0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_table_another_session_holds_is_analysed_last_and_the_rest_without_waiting(empty_db_url, dataset):
    """What autovacuum does to an ingest's last step, done on purpose: another session holds
    the lock VACUUM and ANALYZE need on `run_task_outcomes` (a summary table: vacuumed, by the
    first statement). Every other table is analysed while the refresh waits for that one, and it
    is analysed too once the lock is let go."""
    import threading
    import time

    from sqlalchemy import create_engine

    from warehouse.db.statistics import refresh

    held = "run_task_outcomes"
    assert run_cli(empty_db_url, "ingest", dataset).returncode == 0
    before = _pg_tables(empty_db_url)
    conninfo = make_url(empty_db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    engine = create_engine(empty_db_url)
    result = {}
    with psycopg.connect(conninfo) as holder:
        holder.execute(f"LOCK TABLE {held} IN SHARE UPDATE EXCLUSIVE MODE")  # what VACUUM takes
        worker = threading.Thread(target=lambda: result.update(done=refresh(engine, every_table=True)))
        worker.start()
        with psycopg.connect(conninfo, autocommit=True) as watcher:
            for _ in range(200):  # until the refresh waits for the lock (10 s at most)
                waiting = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
                                          "%s::regclass", [held]).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.05)
            assert waiting, "the refresh never asked for the held table"
        during = _pg_tables(empty_db_url)
        holder.rollback()  # the lock let go
    worker.join(30)
    engine.dispose()
    after = _pg_tables(empty_db_url)
    for name in WRITTEN - {held}:
        assert during[name][0] > before[name][0], f"{name} waited for another table's lock"
    assert during[held][0] == before[held][0]
    assert after[held][0] > before[held][0], "the held table was left unanalysed"
    assert after[held][1] > before[held][1], "the held table was left unvacuumed"
    assert held in result["done"].vacuumed
