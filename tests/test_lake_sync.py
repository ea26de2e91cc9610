"""`warehouse lake sync`: the first sync holds what `export tables` writes; later ones write only
the runs that changed (new, a trial replaced, a delete), leave every other file as it was, and
keep a manifest whose every file is there with its rows and SHA-256; a killed sync leaves the
last good lake; syncing A then B gives the lake one sync of both gives; bad OUTs are refused in
one line. Both backends, real files, read back with pyarrow."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

import harbor_jobs
import query_fixture
from conftest import another_warehouse
from helpers import hub_row, write_shard
from ingest.pipeline import ingest
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from procs import run_cli
from warehouse.export_tables import export_tables
from warehouse.lake.layout import table_files
from warehouse.lake.sync import sync_lake

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
R1, R2 = "6a29732a-0000-4000-8000-0000000000a1", "6a29732a-0000-4000-8000-0000000000a2"
RUN_SCOPED = {"trials", "trial_loads", "episodes", "episode_loads", "conversations", "conversation_turns"}
PER_RUN = {"trial_lengths", "run_task_breakdown", "run_task_outcomes"}
# Every table of the warehouse, as `export tables` writes them.
ALL_TABLES = {"messages", "run_sources", "run_task_breakdown", "run_task_outcomes", "runs", "sources", "tasks",
              "trial_lengths", "loads", "run_labels", "trials", "conflicts", "conversations", "trial_loads",
              "conversation_turns", "episodes", "episode_loads"}


# --- reading a lake back -----------------------------------------------------------------------


def _table_dicts(files: list[Path], table: str, base: Path) -> list[dict]:
    """A table's rows from its files (a run-scoped table's run_id from the path)."""
    if table in RUN_SCOPED:
        data = ds.dataset([str(f) for f in files], format="parquet", partitioning="hive",
                          partition_base_dir=str(base / table)).to_table()
    else:
        data = ds.dataset([str(f) for f in files], format="parquet").to_table()
    return data.to_pylist()


def lake_rows(out: Path, drop: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Each table's rows, as the files table_files names give them: each row a sorted-key repr
    (less the columns in `drop`), sorted."""
    return {table: sorted(repr(sorted((k, v) for k, v in row.items() if k not in drop))
                          for row in _table_dicts(files, table, out))
            for table, files in table_files(out).items()}


def export_rows(engine, out: Path) -> dict[str, list[str]]:
    """What `export tables` of the same warehouse holds (a plain folder: its files by glob)."""
    export_tables(engine, out)
    return lake_rows(out)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def assert_manifest_true(out: Path) -> None:
    """Every file the manifest names is there, with its bytes, SHA-256 and rows; every table has one."""
    m = manifest(out)
    assert m["format"] == "trajectory-warehouse-lake" and m["version"] == 1
    for entry in m["files"]:
        data = (out / entry["path"]).read_bytes()
        assert len(data) == entry["bytes"], entry["path"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]
        assert pq.ParquetFile(out / entry["path"]).metadata.num_rows == entry["rows"], entry["path"]
        assert entry["path"].startswith(entry["table"] + "/")
        if entry["table"] in RUN_SCOPED:
            assert entry["path"].split("/")[1] == f"run_id={entry['run_id']}"
    assert {e["table"] for e in m["files"]} == ALL_TABLES


def assert_views_name_files_that_are_there(out: Path) -> None:
    named = re.findall(r"'([^']+\.parquet)'", (out / "views.sql").read_text(encoding="utf-8"))
    assert named and all((out / path).is_file() for path in named)


def stamps(out: Path) -> dict[str, tuple[int, int]]:
    """Every Parquet file under OUT: its mtime (ns) and size."""
    return {str(p.relative_to(out)): (p.stat().st_mtime_ns, p.stat().st_size) for p in out.rglob("*.parquet")}


def run_ids(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT run_key, id FROM runs")).all())


def files_of(out: Path, run: int) -> set[str]:
    return {e["path"] for e in manifest(out)["files"] if run in (e["run_id"], e.get("of_run"))}


# --- the first sync, and a sync with nothing new -----------------------------------------------


def test_first_sync_holds_what_export_tables_writes(engine, tmp_path):
    query_fixture.build(engine)
    ingest(engine, [str(SAMPLE)])
    assert ingest(engine, [str(harbor_jobs.build_job(tmp_path / "jobs"))]).errors == []  # turn extras, subagents
    out = tmp_path / "lake"
    info = sync_lake(engine, out)
    ids = run_ids(engine)
    assert info.changed and info.sync == 1 and sorted(info.runs_new) == sorted(ids.values())
    assert_manifest_true(out)
    got, want = lake_rows(out), export_rows(engine, tmp_path / "export")
    assert set(got) == ALL_TABLES
    for table in ALL_TABLES:
        assert got[table] == want[table], table
    with engine.connect() as conn:
        n_trials = conn.execute(text("SELECT count(*) FROM trials")).scalar_one()
    assert len(got["trials"]) == n_trials == 22 + 36 + 4  # the fixture's 22 (11, 9, 2), the sample's 36, the job's 4
    # Each run's files list the units its trials came from.
    with engine.connect() as conn:
        loads = conn.execute(text("SELECT DISTINCT t.run_id, tl.load_id FROM trial_loads tl "
                                  "JOIN trials t ON t.id = tl.trial_id")).all()
    for entry in manifest(out)["files"]:
        if entry["table"] == "trials":
            assert entry["loads"] == sorted(load for run, load in loads if run == entry["run_id"])


def test_a_sync_with_nothing_new_writes_nothing(engine, tmp_path):
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    before, text_before = stamps(out), (out / "manifest.json").read_bytes()
    again = sync_lake(engine, out)
    assert not again.changed and again.sync == 1 and again.files_written == 0
    assert again.line() == f"Synced {out}: nothing changed (3 runs, sync 1)"
    assert stamps(out) == before and (out / "manifest.json").read_bytes() == text_before


def test_a_lake_of_another_schema_revision_is_written_anew(engine, tmp_path):
    """Its files' columns could differ from the new ones' (a migration adds a column)."""
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    before = set(stamps(out))
    older = manifest(out)
    older["bookkeeping"]["schema_revision"] = "0014"
    (out / "manifest.json").write_text(json.dumps(older))
    info = sync_lake(engine, out)
    assert info.changed and sorted(info.runs_new) == sorted(run_ids(engine).values())
    assert not before & set(stamps(out))  # no file of the old lake left
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")


def test_an_empty_warehouse_gives_every_table_a_file(engine, tmp_path):
    out = tmp_path / "lake"
    sync_lake(engine, out)
    assert_manifest_true(out)
    assert all(rows == [] for rows in lake_rows(out).values())
    query_fixture.build(engine)  # its placeholders give way to the runs' files
    sync_lake(engine, out)
    assert_manifest_true(out)
    assert not [e for e in manifest(out)["files"] if e["table"] in RUN_SCOPED and e["run_id"] == 0]
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")


# --- what a later sync writes ------------------------------------------------------------------


def test_a_new_run_writes_only_its_files(engine, tmp_path):
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    before, old_runs = stamps(out), set(run_ids(engine).values())
    ingest(engine, [str(SAMPLE)])
    new_runs = set(run_ids(engine).values()) - old_runs
    assert len(new_runs) == 2
    with engine.connect() as conn:
        n_loads = conn.execute(text("SELECT count(*) FROM loads")).scalar_one()

    info = sync_lake(engine, out)
    assert sorted(info.runs_new) == sorted(new_runs) and info.runs_changed == [] and info.runs_removed == []
    assert info.runs_unchanged == 3 and info.sync == 2
    after = stamps(out)
    for run in old_runs:  # every file of the old runs is where it was, as it was
        for path in files_of(out, run):
            assert after[path] == before[path], path
    new_files = {e["path"]: e for e in manifest(out)["files"] if e["path"] not in before}
    assert new_files and all(Path(p).name.startswith("part-s2-") for p in new_files)
    for path, entry in new_files.items():  # a new run's files, or a shared table's
        assert entry["run_id"] in new_runs or entry.get("of_run") in new_runs or entry["table"] not in RUN_SCOPED | PER_RUN
    assert {e["run_id"] for e in new_files.values() if e["table"] == "trials"} == new_runs
    assert sum(e["rows"] for e in new_files.values() if e["table"] == "trials") == 36
    # The ledger grows by the sample's units; the fixture's three stay in the file they were in.
    assert sum(e["rows"] for e in new_files.values() if e["table"] == "loads") == n_loads - 3
    assert [e["rows"] for e in manifest(out)["files"] if e["table"] == "loads" and e["path"] in before] == [3]
    assert_manifest_true(out)
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")
    assert info.line() == (f"Synced {out}: 2 runs written (0 changed, 2 new), 0 removed, 3 unchanged; "
                           f"{info.files_written} files, {info.bytes_written / 1000:.1f} kB (sync 2)")


def test_a_replaced_trial_rewrites_only_its_run(engine, tmp_path):
    """run-a's incomplete trial, loaded again finished by a later unit: run-a is rewritten."""
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    ids = run_ids(engine)
    before = stamps(out)
    source = writer.ensure_source(engine, "parquet", "/fixture/a", "fixture-a")
    finished = Trial(run_key="run-a", trial_name="task4__a0", task_name="task4", reward=1.0, result="1.0",
                     status="complete", agent="terminus", model="m1",
                     episodes=[Episode(0, [Turn("user", "do it"), Turn("assistant", "finished now")])])
    with writer.unit(engine, source, "unit-a-finished", "hash-finished") as unit:
        unit.add_trials([finished])
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM trials WHERE trial_name = 'task4__a0'")).scalar_one() == "complete"

    info = sync_lake(engine, out)
    assert info.runs_changed == [ids["run-a"]] and info.runs_new == [] and info.runs_unchanged == 2
    after = stamps(out)
    for run in (ids["run-b"], ids["run-c"]):
        for path in files_of(out, run):
            assert after[path] == before[path], path
    assert not any(path in before for path in files_of(out, ids["run-a"]))  # all anew
    assert not any((out / path).exists() for path in before if f"run_id={ids['run-a']}/" in path)
    assert_manifest_true(out)
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")


def test_a_trial_a_resumed_job_dropped_rewrites_its_run(engine, tmp_path):
    """A running trial stored, then taken away by the next ingest of its job's folder (its unit
    leaves the ledger: the sync checks every run's fingerprint), then the trial run again: each
    sync rewrites the job's run alone."""
    from test_resumed_jobs import B, D, REWARDS, add_trial, running_job, write_job

    query_fixture.build(engine)
    root = tmp_path / "jobs"
    job = running_job(root)
    assert ingest(engine, [str(root)]).errors == []
    out = tmp_path / "lake"
    sync_lake(engine, out)
    ids = run_ids(engine)
    [job_run] = [run for key, run in ids.items() if key not in ("run-a", "run-b", "run-c")]
    before = stamps(out)

    shutil.rmtree(job / B)
    assert ingest(engine, [str(root)]).trials_removed == 1
    removed = sync_lake(engine, out)
    assert removed.runs_changed == [job_run] and removed.runs_unchanged == 3 and removed.full_pass
    assert_manifest_true(out)
    _assert_same_but_orphans(lake_rows(out), export_rows(engine, tmp_path / "export1"))
    assert sum(e["rows"] for e in manifest(out)["files"] if e["table"] == "trials" and e["run_id"] == job_run) == 2
    add_trial(job, D, reward=REWARDS[D])  # run again under a new name (`harbor jobs resume`)
    write_job(job, REWARDS, finished=True)
    assert ingest(engine, [str(root)]).errors == []
    again = sync_lake(engine, out)
    assert again.runs_changed == [job_run] and again.runs_unchanged == 3
    after = stamps(out)
    for run in (ids["run-a"], ids["run-b"], ids["run-c"]):
        for path in files_of(out, run):
            assert after[path] == before[path], path
    assert_manifest_true(out)
    _assert_same_but_orphans(lake_rows(out), export_rows(engine, tmp_path / "export2"))


def test_deletes_drop_runs_and_rewrite_what_they_changed(db_url, engine, tmp_path):
    """`runs delete`: the run's files go. `sources delete two`: its own run goes, and the run of
    the trial dataset `one` holds too is rewritten though no new unit names it; the rest stays."""
    one = [hub_row("x__1", 0, [("user", "one")], run_id=R1), hub_row("x__2", 0, [("user", "two")], run_id=R1)]
    two = [one[1], hub_row("y__1", 0, [("user", "three")], run_id=R2)]
    write_shard(tmp_path / "one" / "data" / "train-00000.parquet", one)
    write_shard(tmp_path / "two" / "data" / "train-00000.parquet", two)
    ingest(engine, [str(SAMPLE), str(tmp_path / "one"), str(tmp_path / "two")])
    out = tmp_path / "lake"
    sync_lake(engine, out)
    ids = run_ids(engine)
    sample_runs = sorted(key for key in ids if key not in (R1, R2))
    gone_files = files_of(out, ids[sample_runs[0]])
    assert run_cli(db_url, "runs", "delete", sample_runs[0], "--yes").returncode == 0

    info = sync_lake(engine, out)
    assert info.runs_removed == [ids[sample_runs[0]]] and info.runs_changed == [] and info.runs_new == []
    assert not info.full_pass  # the run's unit holds the other sample run too: the ledger kept it
    assert not any((out / path).exists() for path in gone_files)
    assert not files_of(out, ids[sample_runs[0]])
    assert_manifest_true(out)
    _assert_same_but_orphans(lake_rows(out), export_rows(engine, tmp_path / "export1"))

    before = stamps(out)
    deleted = run_cli(db_url, "sources", "delete", str(tmp_path / "two"), "--yes")
    assert deleted.returncode == 0, deleted.stderr
    info = sync_lake(engine, out)
    assert info.full_pass and info.runs_removed == [ids[R2]] and info.runs_changed == [ids[R1]]
    after = stamps(out)
    assert files_of(out, ids[sample_runs[1]])
    for path in files_of(out, ids[sample_runs[1]]):
        assert after[path] == before[path], path
    assert_manifest_true(out)
    _assert_same_but_orphans(lake_rows(out), export_rows(engine, tmp_path / "export2"))

    full = sync_lake(engine, out, full=True)  # --full: everything anew, the orphans gone
    assert full.changed and sorted(full.runs_new) == sorted(run_ids(engine).values())
    assert lake_rows(out) == export_rows(engine, tmp_path / "export3")


def _assert_same_but_orphans(got: dict, want: dict) -> None:
    """Every table as exported, but messages, which may keep texts a delete took away."""
    assert {t: r for t, r in got.items() if t != "messages"} == {t: r for t, r in want.items() if t != "messages"}
    assert set(want["messages"]) <= set(got["messages"])


def test_views_sql_reads_the_manifests_files_in_duckdb(engine, tmp_path):
    """views.sql lists the manifest's files (a later sync's leftovers are not read), and gives
    each table and view what the warehouse gives, after an incremental sync."""
    import duckdb

    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    ingest(engine, [str(SAMPLE)])
    sync_lake(engine, out)
    stray = out / "trials" / "run_id=1" / "part-s9-00000.parquet"  # as a sync in progress leaves it
    stray.write_bytes((out / manifest(out)["files"][0]["path"]).read_bytes())
    duck = duckdb.connect()
    duck.execute(f"SET file_search_path = '{out}'")
    duck.execute((out / "views.sql").read_text(encoding="utf-8"))
    with engine.connect() as conn:
        for name in [*ALL_TABLES, "turns", "trial_summary"]:
            want = conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
            assert duck.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == want, name


def test_a_pyarrow_file_system_other_than_the_local_one(engine, tmp_path):
    """An object store's way (fsspec's in-memory file system through pyarrow): whole-file puts,
    the manifest one PUT; its files, read back, hold what export tables writes."""
    import fsspec
    import pyarrow.fs as pafs

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    fs = pafs.PyFileSystem(pafs.FSSpecHandler(memory))
    query_fixture.build(engine)
    first = sync_lake(engine, "/bucket/lake", filesystem=fs)
    ingest(engine, [str(SAMPLE)])
    second = sync_lake(engine, "/bucket/lake", filesystem=fs)
    assert first.sync == 1 and second.sync == 2 and len(second.runs_new) == 2 and second.runs_unchanged == 3
    copy = tmp_path / "copy"  # the bucket's objects, copied down as they are
    for path in memory.find("/bucket/lake"):
        target = copy / path.removeprefix("/bucket/lake/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(memory.cat_file(path))
    assert_manifest_true(copy)
    assert lake_rows(copy) == export_rows(engine, tmp_path / "export")
    memory.store.clear()


# --- the order law -----------------------------------------------------------------------------

# Provenance aside: when rows were made, when units loaded, by which code.
PROVENANCE = frozenset({"created_at", "started_at", "finished_at", "tool_version"})


def _comparable(out: Path) -> dict[str, list[str]]:
    rows = lake_rows(out, drop=PROVENANCE)
    rows["trials"] = lake_rows(out, drop=frozenset({"created_at"}))["trials"]  # a trial's own times count
    return rows


def test_syncing_a_then_b_is_syncing_both_once(engine, backend, tmp_path, request):
    out = tmp_path / "stepwise"
    query_fixture.build(engine)
    sync_lake(engine, out)
    ingest(engine, [str(SAMPLE)])
    sync_lake(engine, out)

    def both(other):
        query_fixture.build(other)
        ingest(other, [str(SAMPLE)])

    with another_warehouse(backend, tmp_path / "both", request, both) as url:
        from warehouse.db.engine import make_engine, resolve_url

        other = make_engine(resolve_url(url))
        try:
            sync_lake(other, tmp_path / "once")
        finally:
            other.dispose()
    assert _comparable(out) == _comparable(tmp_path / "once")


# --- a killed sync -----------------------------------------------------------------------------

KILL = {  # where the sync is killed: after its first data files, or with its new manifest written to
    # its temporary file, or with the manifest replaced but not views.sql
    "writing files": ("warehouse.lake.sync", "write_parts", 3),
    "replacing the manifest": ("os", "replace", 1),
    "replacing views.sql": ("os", "replace", 2),
}


@pytest.mark.parametrize("where", KILL)
def test_a_killed_sync_leaves_the_last_good_lake(db_url, engine, tmp_path, where):
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    good, good_rows = (out / "manifest.json").read_bytes(), lake_rows(out)
    ingest(engine, [str(SAMPLE)])
    module, name, nth = KILL[where]
    # The sync in a process of its own, SIGKILLed by itself at the chosen call.
    script = textwrap.dedent(f"""
        import importlib, os, signal, sys
        from warehouse.db.engine import make_read_engine, resolve_url
        import warehouse.lake.sync as sync
        target = importlib.import_module({module!r})
        real, calls = getattr(target, {name!r}), []
        def killing(*args, **kwargs):
            calls.append(1)
            if len(calls) == {nth}:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        setattr(target, {name!r}, killing)
        sync.sync_lake(make_read_engine(resolve_url(sys.argv[1])), sys.argv[2])
    """)
    killed = subprocess.run([sys.executable, "-c", script, db_url, str(out)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert killed.returncode == -9, killed.stderr
    assert_views_name_files_that_are_there(out)
    if where == "replacing views.sql":  # the new sync is in: a reader reads it
        assert manifest(out)["sync"] == 2 and lake_rows(out) == export_rows(engine, tmp_path / "export0")
    else:
        leftovers = set(stamps(out)) - {e["path"] for e in manifest(out)["files"]}
        assert leftovers  # it had written something
        assert (out / "manifest.json").read_bytes() == good
        assert lake_rows(out) == good_rows  # a reader still reads the last sync
    assert_manifest_true(out)

    info = sync_lake(engine, out)  # the next sync cleans up and completes
    if where == "replacing views.sql":
        assert not info.changed
    else:
        assert info.sync == 3 and len(info.runs_new) == 2  # 2 was the killed sync's
    assert_views_name_files_that_are_there(out)
    assert set(stamps(out)) == {e["path"] for e in manifest(out)["files"]}
    assert not (out / "manifest.json.tmp").exists() and not (out / "views.sql.tmp").exists()
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")


def test_a_full_disk_is_one_line_and_leaves_the_last_lake(db_url, engine, tmp_path):
    """A file-size limit (as a full disk refuses a write): one line, exit 1, the last manifest
    and its files as they were, nothing of the failed sync left; the next sync completes."""
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    good = (out / "manifest.json").read_bytes()
    source = writer.ensure_source(engine, "parquet", "/fixture/big", "big")
    big = os.urandom(150_000).hex()  # 300 kB of text that zstd packs into no less than 150 kB
    with writer.unit(engine, source, "unit-big", "hash-big") as unit:
        unit.add_trials([Trial(run_key="run-big", trial_name="big__1", task_name="task1", reward=1.0, result="1.0",
                               episodes=[Episode(0, [Turn("user", big)])])])
    limited = subprocess.run(["bash", "-c", f'ulimit -f 100; exec "{sys.executable}" -m warehouse --db "$0" lake sync "$1"',
                              db_url, str(out)], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert limited.returncode == 1, limited.stderr
    assert limited.stderr.startswith(f"Error: {out}: cannot write: ") and "File too large" in limited.stderr
    assert len(limited.stderr.strip().splitlines()) == 1
    assert (out / "manifest.json").read_bytes() == good
    assert set(stamps(out)) == {e["path"] for e in manifest(out)["files"]}
    assert_manifest_true(out)
    assert sync_lake(engine, out).runs_new == [run_ids(engine)["run-big"]]
    assert lake_rows(out) == export_rows(engine, tmp_path / "export")


# --- the command, and what it refuses ----------------------------------------------------------


def test_cli_sync_and_a_file_url(db_url, engine, tmp_path):
    query_fixture.build(engine)
    done = run_cli(db_url, "lake", "sync", str(tmp_path / "lake"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"Synced {tmp_path / 'lake'}: 3 runs written (0 changed, 3 new), 0 removed, "
                                  "0 unchanged; ") and done.stderr.endswith(" (sync 1)\n")
    as_json = run_cli(db_url, "lake", "sync", f"file://{tmp_path / 'url-lake'}", "--json")
    assert as_json.returncode == 0, as_json.stderr
    said = json.loads(as_json.stdout)
    assert said["sync"] == 1 and len(said["runs_new"]) == 3 and said["files_written"] > 0
    assert lake_rows(tmp_path / "url-lake") == lake_rows(tmp_path / "lake")


def _refused(db_url: str, out: str, *words: str) -> None:
    done = run_cli(db_url, "lake", "sync", out)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and all(w in done.stderr for w in words), done.stderr


def test_bad_outs_are_refused_in_one_line(db_url, engine, tmp_path):
    query_fixture.build(engine)
    (tmp_path / "file").write_text("x")
    _refused(db_url, str(tmp_path / "file"), "not a directory")
    _refused(db_url, str(tmp_path / "no" / "lake"), "does not exist")
    _refused(db_url, f"file://{tmp_path / 'file'}", "not a directory")
    _refused(db_url, "nosuch://bucket/lake", "not a lake location pyarrow can write")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "manifest.json").write_text('{"format": "something-else"}')
    _refused(db_url, str(theirs), "not a lake manifest")
    assert sorted(p.name for p in theirs.iterdir()) == ["manifest.json"]  # nothing made there
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _refused(db_url, str(other), "not a lake", "notes.txt")
    export_tables(engine, tmp_path / "exported")  # an export is no lake to sync into either
    _refused(db_url, str(tmp_path / "exported"), "not a lake")
    # A folder that cannot be written and a full disk: tests/test_cli_corpus.py (WRITERS).


def test_two_syncs_at_once(db_url, engine, tmp_path):
    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    fd = os.open(out / ".lake-sync.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a sync at work holds it
        _refused(db_url, str(out), "another `warehouse lake sync` is writing")
    finally:
        os.close(fd)
    assert run_cli(db_url, "lake", "sync", str(out)).returncode == 0


def test_the_canned_queries_answer_on_a_synced_lake_as_on_the_warehouse(engine, tmp_path):
    """`query --lake` reads a lake `lake sync` keeps (its manifest's files): after the first sync
    and after an incremental one, every canned query answers there as the warehouse does."""
    from warehouse.lake import Lake
    from warehouse.queries import QUERIES, run_canned

    def same(name: str, lake: Lake) -> None:
        keys = [row[0] for row in run_canned(engine.url, QUERIES["runs"]).rows]
        given = {"a": keys[0], "b": keys[-1]} if {"a", "b"} <= {p.name for p in QUERIES[name].params} else {}
        want = run_canned(engine.url, QUERIES[name], given, summaries=False)
        got = run_canned(lake, QUERIES[name], given)
        assert got.columns == want.columns, name
        assert [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in got.rows] == \
            [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in want.rows], name

    query_fixture.build(engine)
    out = tmp_path / "lake"
    sync_lake(engine, out)
    lake = Lake(out, "duckdb")
    for name in ("runs", "pass-rate", "solve-matrix", "loads"):
        same(name, lake)
    ingest(engine, [str(SAMPLE)])  # two runs more
    sync_lake(engine, out)
    for name in QUERIES:
        same(name, lake)
