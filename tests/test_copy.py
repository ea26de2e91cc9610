"""One warehouse, any backend: `warehouse db copy FROM TO` (SQLite to PostgreSQL, back, and to a
new file), `db check --against`, and `db archive`, through the real CLI on real databases."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import text

import forked_cli
from conftest import _fresh_pg
from procs import CLI, run_cli
from test_read_never_writes import readonly_mounts, run_on_readonly_view, snapshot  # noqa: F401 (a fixture)
from warehouse.db import schema
from warehouse.db.engine import make_engine, redact, resolve_url
from warehouse.queries import QUERIES, run_canned

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample"
JOB = ROOT / "tests" / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"


def ok(db: str, *args: str) -> subprocess.CompletedProcess:
    done = run_cli(db, *args)
    assert done.returncode == 0, done.stderr
    return done


def fill(db: str, tmp_path: Path) -> None:
    """The sample and a trace job, a run renamed and labelled: ids, provenance, labels, summaries."""
    job = tmp_path / JOB.name
    if not job.exists():
        shutil.copytree(JOB, job)
    ok(db, "ingest", str(SAMPLE), str(job))
    ok(db, "runs", "rename", "9f8c2915", "baseline")
    ok(db, "runs", "label", "baseline", "step=100", "lr=3e-5")


def answers(db: str) -> dict:
    """Every canned query's answer without parameters (those that need none)."""
    out = {}
    for name, query in QUERIES.items():
        if not any(p.required for p in query.params):
            result = run_canned(db, query)
            out[name] = (result.columns, result.rows)
    return out


@pytest.fixture
def pg_empty():
    yield from _fresh_pg(None)


@pytest.mark.parametrize("route", ["sqlite-to-postgresql", "postgresql-to-sqlite", "sqlite-to-sqlite"])
def test_a_copy_is_the_same_warehouse_on_the_other_side(route, tmp_path, request):
    source_kind, target_kind = route.split("-to-")
    urls = {}
    for side, kind in (("from", source_kind), ("to", target_kind)):
        if kind == "sqlite":
            urls[side] = f"sqlite:///{tmp_path / f'{side}.db'}"
        else:  # (one route has PostgreSQL on one side only)
            urls[side] = request.getfixturevalue("pg_empty")
    if source_kind == "postgresql":
        schema.upgrade(make_engine(resolve_url(urls["from"])))
    fill(urls["from"], tmp_path)

    done = ok(urls["from"], "db", "copy", urls["from"], urls["to"])
    assert "each the same on both (rows and checksums)" in done.stderr
    assert "checksums" in done.stderr and "Traceback" not in done.stderr
    ok(urls["to"], "db", "check", "--against", urls["from"])
    assert answers(urls["to"]) == answers(urls["from"])
    assert ok(urls["to"], "show", "baseline/" + _a_trial(urls["from"]), "--format", "json").stdout == \
        ok(urls["from"], "show", "baseline/" + _a_trial(urls["from"]), "--format", "json").stdout
    # The copy is a warehouse to go on with: a unit it has is skipped; new ones get new ids.
    again = ok(urls["to"], "ingest", str(SAMPLE))
    assert "0 loaded, 1 skipped" in again.stderr
    extra = tmp_path / "extra"
    shutil.copytree(SAMPLE, extra)
    ok(urls["to"], "ingest", str(extra), "--run", "more")
    engine = make_engine(resolve_url(urls["to"]))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sources")).scalar() == 3
        assert conn.execute(text("SELECT count(DISTINCT id) = count(*) FROM trials")).scalar()
    engine.dispose()


def _a_trial(db: str) -> str:
    engine = make_engine(resolve_url(db))
    with engine.connect() as conn:
        name = conn.execute(text("SELECT t.trial_name FROM trials t JOIN runs r ON r.id = t.run_id "
                                 "WHERE r.name = 'baseline' ORDER BY t.trial_name LIMIT 1")).scalar()
    engine.dispose()
    return name


def test_what_a_copy_refuses_changes_nothing(db_url, tmp_path):
    fill(db_url, tmp_path)
    target = tmp_path / "target.db"
    ok(db_url, "db", "copy", db_url, str(target))
    before = target.read_bytes()
    # A TO that is not empty.
    done = run_cli(db_url, "db", "copy", db_url, str(target))
    assert done.returncode == 1 and "is not empty" in done.stderr and done.stderr.count("\n") == 1
    assert target.read_bytes() == before
    # A TO at another revision.
    old = tmp_path / "old.db"
    ok(f"sqlite:///{old}", "db", "upgrade", "0014")
    done = run_cli(db_url, "db", "copy", db_url, str(old))
    assert done.returncode == 1 and "at revision 0014" in done.stderr and done.stderr.count("\n") == 1
    # A FROM that does not exist; FROM and TO the same.
    done = forked_cli.run(["db", "copy", str(tmp_path / "nope.db"), str(tmp_path / "new.db")])
    assert done.returncode == 1 and "no warehouse at" in done.stderr and not (tmp_path / "new.db").exists()
    done = run_cli(db_url, "db", "copy", db_url, db_url)
    assert done.returncode == 1 and done.stderr.count("\n") == 1


def test_one_database_named_is_the_target_of_dbs_warehouse(db_url, tmp_path):
    """`warehouse --db W db copy TARGET` copies W, as every command works on --db's warehouse;
    a SOURCE beside a different --db is refused, not silently preferred."""
    fill(db_url, tmp_path)
    want = run_canned(db_url, QUERIES["runs"]).rows
    ok(db_url, "db", "copy", str(tmp_path / "a.db"))
    assert run_canned(str(tmp_path / "a.db"), QUERIES["runs"]).rows == want
    done = run_cli(str(tmp_path / "other.db"), "db", "copy", db_url, str(tmp_path / "b.db"))
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"Error: --db names {tmp_path / 'other.db'} and SOURCE {redact(resolve_url(db_url))}: give the warehouse "
        f"to copy once"]
    assert not (tmp_path / "b.db").exists() and not (tmp_path / "other.db").exists()
    many = run_cli(db_url, "db", "copy", db_url, str(tmp_path / "c.db"), str(tmp_path / "d.db"))
    assert many.returncode == 2 and "takes [SOURCE] TARGET, not 3 databases" in many.stderr


def test_check_against_names_the_table_that_differs(db_url, tmp_path):
    fill(db_url, tmp_path)
    copy = tmp_path / "copy.db"
    ok(db_url, "db", "copy", db_url, str(copy))
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE run_labels SET value = '200' WHERE key = 'step'")
    done = run_cli(db_url, "db", "check", "--against", str(copy))
    assert done.returncode == 1
    assert [line.split(" differ: ")[1].split(":")[0] for line in done.stderr.splitlines() if " differ: " in line] == [
        "run_labels"]


def test_a_killed_copy_leaves_the_target_empty_or_whole(tmp_path, pg_empty):
    source = f"sqlite:///{tmp_path / 'from.db'}"
    fill(source, tmp_path)
    for extra in range(4):  # enough rows that the copy takes a while
        folder = tmp_path / f"more{extra}"
        shutil.copytree(SAMPLE, folder)
        ok(source, "ingest", str(folder), "--run", f"more{extra}")
    proc = subprocess.Popen([*CLI, "db", "copy", source, pg_empty], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    engine = make_engine(resolve_url(pg_empty))
    with engine.connect() as conn:
        trials = conn.execute(text("SELECT count(*) FROM trials")).scalar() if schema.current_revision(engine) else 0
    engine.dispose()
    if trials:
        ok(pg_empty, "db", "check", "--against", source)
    else:  # nothing committed: copying again works
        ok(source, "db", "copy", source, pg_empty)
        ok(pg_empty, "db", "check", "--against", source)


def test_an_archive_is_one_checksummed_file_that_reads_from_a_read_only_mount(
        db_url, backend, tmp_path, readonly_mounts):
    fill(db_url, tmp_path)
    folder = tmp_path / "archive"
    folder.mkdir()
    out = folder / "sweep.db"
    done = ok(db_url, "db", "archive", str(out))
    assert sorted(p.name for p in folder.iterdir()) == ["sweep.db", "sweep.db.sha256"]
    digest, name = (folder / "sweep.db.sha256").read_text().split()
    assert (digest, name) == (hashlib.sha256(out.read_bytes()).hexdigest(), "sweep.db")
    assert subprocess.run(["sha256sum", "-c", "sweep.db.sha256"], cwd=folder, capture_output=True).returncode == 0
    with sqlite3.connect(f"file:{out}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    ok(f"sqlite:///{out}", "db", "check", "--against", db_url)
    assert "archived" in done.stderr
    # Refused when it exists, unless --force.
    again = run_cli(db_url, "db", "archive", str(out))
    assert again.returncode == 1 and "exists" in again.stderr
    # Every read answers from a read-only mount of it, writing nothing.
    before = snapshot(folder)
    view = tmp_path / "view"
    view.mkdir()
    runs = run_on_readonly_view(folder, view, "sweep.db", "query", "runs", "--format", "json")
    assert runs.returncode == 0, runs.stderr
    assert {row["name"] for row in json.loads(runs.stdout)} >= {"baseline"}
    assert snapshot(folder) == before
