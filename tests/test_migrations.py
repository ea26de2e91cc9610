"""The schema under Alembic: one head, upgrade from empty, every step down and up, models
that match the migrations, and commands that refuse a schema they do not know."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

import forked_cli
from procs import fresh_database
from ingest.pipeline import ingest
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.db.models import metadata
from warehouse.errors import SchemaError

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
TABLES = {
    "sources", "loads", "runs", "tasks", "trials", "episodes", "conversations", "conversation_turns", "messages",
    "episode_loads", "trial_loads", "conflicts",
}
VIEWS = {"turns", "turn_text", "trial_summary"}


@pytest.fixture
def empty_engine(empty_db_url):
    eng = make_engine(resolve_url(empty_db_url))
    yield eng
    eng.dispose()


def _revisions_oldest_first() -> list[str]:
    return [rev.revision for rev in reversed(list(schema.script().walk_revisions()))]


def test_single_head_and_the_code_knows_it():
    assert schema.script().get_heads() == [schema.HEAD_REVISION]


def test_upgrade_from_empty_creates_tables_and_views(empty_engine):
    schema.upgrade(empty_engine)
    insp = inspect(empty_engine)
    assert TABLES <= set(insp.get_table_names())
    assert VIEWS <= set(insp.get_view_names())
    assert schema.current_revision(empty_engine) == schema.head_revision()


def test_every_revision_down_and_up(empty_engine):
    revisions = _revisions_oldest_first()
    for rev in revisions:
        schema.upgrade(empty_engine, rev)
        assert schema.current_revision(empty_engine) == rev
        down_to = schema.script().get_revision(rev).down_revision or "base"
        schema.downgrade(empty_engine, down_to)
        assert schema.current_revision(empty_engine) == (None if down_to == "base" else down_to)
        schema.upgrade(empty_engine, rev)
    schema.downgrade(empty_engine, "base")
    assert not (set(inspect(empty_engine).get_table_names()) & TABLES)


def test_models_match_migrations(empty_engine):
    schema.upgrade(empty_engine)
    with empty_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    if empty_engine.dialect.name == "postgresql":
        # The bulk tables' references, which the models declare and PostgreSQL leaves to the
        # writer (migration 0016): exactly those are missing there.
        from importlib import import_module

        dropped = import_module("migrations.versions.0016_references_kept_by_the_writer").REFERENCES
        missing = sorted((d[1].parent.name, d[1].name) for d in diff if d[0] == "add_fk")
        assert missing == sorted((table, name) for table, name, _, _ in dropped)
        diff = [d for d in diff if d[0] != "add_fk"]
    assert diff == []


def _schema_of(url: str) -> list[str]:
    """Everything a warehouse's schema is, as text: SQLite's stored statements, or pg_dump's with
    grants (the database's own read role named alike), and the version row."""
    from warehouse.db.head import pg_dump

    engine = make_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).all()
            if engine.dialect.name == "sqlite":
                found = [" ".join(map(str, row)) for row in conn.execute(text(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"))]
            else:
                found = sorted(re.sub(r"warehouse_reader_\w+", "warehouse_reader_DB", s)
                               for s in pg_dump(engine.url, privileges=True))
    finally:
        engine.dispose()
    return [*found, f"version {version}"]


def test_a_new_warehouse_is_made_as_the_migrations_make_it(backend, tmp_path):
    """A first ingest creates the schema from migrations/head (warehouse.db.head), not migration by
    migration: the two make the same warehouse, to the last index, view and grant."""
    with fresh_database(backend, tmp_path, "by-migrations") as migrated, \
            fresh_database(backend, tmp_path, "by-head") as created:
        schema.upgrade(make_engine(resolve_url(migrated)))
        engine = make_engine(resolve_url(created))
        schema.ensure_current(engine, create=True)  # what `warehouse ingest` does on an empty database
        engine.dispose()
        made = _schema_of(created)
        assert made == _schema_of(migrated)
        assert any("CREATE VIEW" in line for line in made) and f"version [('{schema.HEAD_REVISION}',)]" in made
        loaded = make_engine(resolve_url(created))
        assert not ingest(loaded, [str(SAMPLE)]).errors
        loaded.dispose()


def test_downgrade_below_0006_keeps_byte_identical_units(engine, tmp_path):
    """0005 keys the ledger by content alone: a warehouse holding two identical shards of one
    dataset refuses to go below 0006 rather than lose one's provenance; without them it goes."""
    from helpers import hub_row, write_shard
    from ingest.pipeline import ingest
    from warehouse.errors import WarehouseError

    shard = write_shard(tmp_path / "ds" / "data" / "a.parquet", [hub_row("t__abcdefg", 0, [("user", "q")])])
    (tmp_path / "ds" / "data" / "b.parquet").write_bytes(shard.read_bytes())
    assert ingest(engine, [str(tmp_path / "ds")]).units_loaded == 2
    with pytest.raises(WarehouseError, match="1 ledger rows .* are byte-identical copies"):
        schema.downgrade(engine, "0005")
    assert schema.current_revision(engine) == schema.HEAD_REVISION
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM episode_loads WHERE load_id = (SELECT max(id) FROM loads)"))
        conn.execute(text("DELETE FROM trial_loads WHERE load_id = (SELECT max(id) FROM loads)"))
        conn.execute(text("DELETE FROM loads WHERE id = (SELECT max(id) FROM loads)"))
    schema.downgrade(engine, "0005")
    assert schema.current_revision(engine) == "0005"


def test_views_answer_queries(engine):
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM turn_text")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM trial_summary")).scalar() == 0


def test_current_schema_is_accepted(engine):
    schema.ensure_current(engine)


def test_empty_database_is_created_on_demand_or_refused(empty_engine):
    with pytest.raises(SchemaError, match="db upgrade"):
        schema.ensure_current(empty_engine)
    schema.ensure_current(empty_engine, create=True)
    assert schema.current_revision(empty_engine) == schema.head_revision()


def test_stale_schema_is_refused(engine):
    schema.downgrade(engine, "base")
    schema.upgrade(engine, _revisions_oldest_first()[0])
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    with pytest.raises(SchemaError, match="does not know"):
        schema.ensure_current(engine)


def test_newer_schema_is_refused(engine):
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffffnewer'"))
    with pytest.raises(SchemaError, match="newer or foreign"):
        schema.ensure_current(engine)


def test_foreign_database_is_refused(empty_engine):
    with empty_engine.begin() as conn:
        conn.execute(text("CREATE TABLE something_else (x INTEGER)"))
    with pytest.raises(SchemaError, match="no warehouse schema version"):
        schema.ensure_current(empty_engine, create=True)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return forked_cli.run(list(args), env=env)


def test_cli_upgrade_current_is_idempotent(empty_db_url):
    first = _cli("--db", empty_db_url, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    current = _cli("--db", empty_db_url, "db", "current")
    assert current.stdout.strip() == schema.head_revision()
    second = _cli("--db", empty_db_url, "db", "upgrade")
    assert second.returncode == 0 and "already at" in second.stderr
    password = make_url(empty_db_url).password
    assert not password or f":{password}@" not in second.stderr + second.stdout


def test_cli_refuses_stale_schema_in_one_line(db_url):
    eng = make_engine(resolve_url(db_url))
    with eng.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffffnewer'"))
    eng.dispose()
    result = _cli("--db", db_url, "db", "check")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    assert "Traceback" not in result.stderr


def test_password_is_never_printed(tmp_path):
    url = "postgresql+psycopg://someone:s3cret-pw@127.0.0.1:1/nowhere"
    result = _cli("--db", url, "db", "check")
    assert result.returncode == 1
    assert "s3cret-pw" not in result.stderr + result.stdout


# --- a downgrade that would delete data ---------------------------------------------------------

def _warehouse_with_rows(engine, tmp_path) -> dict[str, int]:
    """Counts of every table after loading a small dataset, with one value in the column the
    step down to 0004 drops (episode_loads.extra)."""
    from helpers import counts
    from ingest.pipeline import ingest
    from tools.generate import generate_dataset

    generate_dataset(tmp_path / "ds", "tiny", seed=3)
    assert ingest(engine, [str(tmp_path / "ds")]).errors == []
    with engine.begin() as conn:
        conn.execute(text("UPDATE episode_loads SET extra = '{\"note\": 1}' "
                          "WHERE episode_id = (SELECT min(episode_id) FROM episode_loads)"))
    before = counts(engine)
    assert before["trials"] > 0
    return before


def test_downgrade_losses_count_dropped_tables_and_columns(engine, tmp_path):
    from helpers import TABLES as ALL_TABLES, counts

    before = _warehouse_with_rows(engine, tmp_path)
    to_base = schema.downgrade_losses(engine, "base")
    assert to_base.rows == {t: before[t] for t in ALL_TABLES} and to_base.values == {}
    assert str(to_base).startswith(f"{before['trials']} trials, ")
    to_0004 = schema.downgrade_losses(engine, "0004")
    assert to_0004.rows == {"run_labels": 0} and to_0004.values == {"episode_loads.extra": 1}
    assert str(to_0004) == "1 value of episode_loads.extra"
    summaries = ("run_task_breakdown", "run_task_outcomes", "trial_lengths", "run_sources")
    assert schema.downgrade_losses(engine, "0003").rows == {t: before[t] for t in (*summaries, "run_labels")}
    # Counting touches nothing.
    assert counts(engine) == before and schema.current_revision(engine) == schema.head_revision()
    with pytest.raises(SchemaError, match="Can't locate revision"):
        schema.downgrade_losses(engine, "NO_SUCH_REVISION")


def test_cli_downgrade_that_deletes_rows_needs_yes_without_a_terminal(db_url, engine, tmp_path):
    from helpers import counts
    from procs import run_cli

    before = _warehouse_with_rows(engine, tmp_path)
    for revision, says in (("base", f"would delete {before['trials']} trials, "),
                           ("0004", "would delete 1 value of episode_loads.extra")):
        refused = run_cli(db_url, "db", "downgrade", revision)  # stdin is not a terminal
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), refused.stderr
        assert says in lines[0] and "pass --yes" in lines[0], lines[0]
        assert counts(engine) == before and schema.current_revision(engine) == schema.head_revision()

    done = run_cli(db_url, "db", "downgrade", "base", "--yes")
    assert done.returncode == 0 and "now at base" in done.stderr, done.stderr
    assert schema.is_empty(engine)


def _on_a_terminal(db_url: str, answer: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI with a pseudo-terminal as stdin, answering a prompt with `answer`."""
    import os
    import pty

    from procs import CLI

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*CLI, "--db", db_url, *args], stdin=slave, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        os.write(master, answer.encode())
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_cli_downgrade_asks_on_a_terminal(db_url, engine, tmp_path):
    from helpers import counts

    before = _warehouse_with_rows(engine, tmp_path)
    declined = _on_a_terminal(db_url, "n\n", "db", "downgrade", "base")
    assert declined.returncode == 1, declined.stderr
    assert f"would delete {before['trials']} trials" in declined.stderr and "Go ahead?" in declined.stderr
    assert "Error: downgrade cancelled: nothing done" in declined.stderr
    assert counts(engine) == before and schema.current_revision(engine) == schema.head_revision()

    accepted = _on_a_terminal(db_url, "y\n", "db", "downgrade", "base")
    assert accepted.returncode == 0 and "now at base" in accepted.stderr, accepted.stderr
    assert schema.is_empty(engine)


def test_cli_downgrade_of_an_empty_warehouse_does_not_ask(db_url):
    from procs import run_cli

    done = run_cli(db_url, "db", "downgrade", "base")
    assert done.returncode == 0 and "now at base" in done.stderr, done.stderr


@pytest.mark.parametrize("args", [("query", "runs"), ("sql", "select 1"), ("search", "hello")],
                         ids=["query", "sql", "search"])
def test_a_read_refuses_a_stale_schema_in_one_line(db_url, args):
    """The reads that go through warehouse.readonly check the revision on its own connection
    (PostgreSQL: the one the read then uses); a revision behind head is still refused, with the fix."""
    from procs import run_cli

    assert run_cli(db_url, "db", "upgrade").returncode == 0
    assert run_cli(db_url, "db", "downgrade", "0009", "--yes").returncode == 0
    done = run_cli(db_url, *args)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: ") and line.endswith(
        f" is at schema 0009, this tool needs {schema.head_revision()}: run `warehouse db upgrade`"), line


def test_0013_counts_the_unmarked_steps_of_a_harbor_export_read_alone(engine, tmp_path):
    """Harbor's export of a multi-step trial read alone keeps its later steps under "main#<n>":
    the trial is as long as its trace directory says (every step), and 0013 brings a warehouse
    whose lengths counted only the first step to the same figures."""
    golden = Path(__file__).parent / "fixtures" / "harbor" / "golden" / "export"
    shard = tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"
    shard.parent.mkdir(parents=True)
    shutil.copy(golden / "pinchbench-instruction-verifier.parquet", shard)
    assert ingest(engine, [str(shard.parents[1])]).errors == []
    lengths = "SELECT t.trial_name, l.turns, l.chars FROM trial_lengths l JOIN trials t ON t.id = l.trial_id ORDER BY 1"
    summaries = "SELECT n_with_trajectory FROM run_task_breakdown ORDER BY id"
    with engine.connect() as conn:
        fresh = conn.execute(text(lengths)).all(), conn.execute(text(summaries)).all()
    assert ("task-session-chain-analysis__UGpJKzs", 34, 85435) in fresh[0]  # the trace directory's figures

    schema.downgrade(engine, "0012")
    with engine.begin() as conn:  # what the code at 0012 stored: the first step only
        conn.execute(text("""UPDATE trial_lengths SET turns = 1, chars = 1 WHERE trial_id IN
                             (SELECT trial_id FROM episodes WHERE trace_source = 'main#2')"""))
    schema.upgrade(engine)
    with engine.connect() as conn:
        assert (conn.execute(text(lengths)).all(), conn.execute(text(summaries)).all()) == fresh
