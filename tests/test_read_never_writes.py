"""Reads never write: every read command, through the real CLI, leaves a warehouse (WAL or
rollback journal), an empty file, someone else's SQLite database and a missing path exactly as
it found them (bytes, mtime, mode, the folder's listing); it answers from a read-only mount; and
on PostgreSQL every statement it runs is in a READ ONLY transaction."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from conftest import REQUIRE_PG, _fresh_pg, _pg_admin_conninfo
from procs import CLI, run_cli
from warehouse.db import schema
from warehouse.db.engine import make_read_engine, resolve_url
from warehouse.queries import QUERIES

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
HEAD = schema.HEAD_REVISION


def _commands() -> dict[str, list[str]]:
    """Every read command, by test id. {trial}, {a}, {b}, {out} and {db} (the warehouse itself,
    for `db copy FROM`) are filled in per target."""
    commands = {
        "sql": ["sql", "select count(*) AS n from trials"],
        "search": ["search", "the", "--limit", "3"],
        "show": ["show", "{trial}"],
        "export-hub": ["export", "hub", "{out}"],
        "export-tables": ["export", "tables", "{out}"],
        "lake-sync": ["lake", "sync", "{out}"],
        "report": ["report", "{out}"],
        "db-current": ["db", "current"],
        "db-check": ["db", "check"],
        "runs": ["runs"],
        "sources": ["sources"],
        "loads": ["loads"],
        "db-archive": ["db", "archive", "{out}"],
        "db-copy": ["db", "copy", "{db}", "{out}"],
        "query-filtered": ["query", "pass-rate", "--run", "{a}", "--task", "*", "--by", "label:step"],
    }
    for name in QUERIES:
        two_runs = any(p.name == "a" for p in QUERIES[name].params)  # compare, compare-test
        commands[f"query-{name}"] = ["query", name, *(["--a", "{a}", "--b", "{b}"] if two_runs else [])]
    return commands


COMMANDS = _commands()


def snapshot(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Each entry of the folder: its sha256, mtime (ns) and mode."""
    entries = {}
    for path in sorted(folder.iterdir()):
        st = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        entries[path.name] = (digest, st.st_mtime_ns, st.st_mode)
    return entries


def journal_mode(path: Path) -> str:
    """From the header, without opening the file with SQLite."""
    versions = path.read_bytes()[18:20]
    return {b"\x01\x01": "delete", b"\x02\x02": "wal"}[versions]


# --- the databases -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory) -> Path:
    """examples/sample ingested by the CLI into a WAL-mode warehouse, nothing beside it."""
    folder = tmp_path_factory.mktemp("sample")
    path = folder / "warehouse.db"
    done = run_cli(str(path), "ingest", str(SAMPLE))
    assert done.returncode == 0, done.stderr
    sqlite3.connect(path).close()  # the last connection to close removes any -wal/-shm
    assert [p.name for p in folder.iterdir()] == ["warehouse.db"] and journal_mode(path) == "wal"
    return path


def _facts(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        run_keys = [r for (r,) in conn.execute("SELECT run_key FROM runs ORDER BY run_key")]
        (trial,) = conn.execute("SELECT trial_name FROM trials ORDER BY id LIMIT 1").fetchone()
        (n,) = conn.execute("SELECT count(*) FROM trials").fetchone()
    finally:
        conn.close()
    return {"trial": trial, "a": run_keys[0], "b": run_keys[-1], "n_trials": str(n)}


def make_target(kind: str, sample: Path, folder: Path) -> Path:
    """The database a read command is pointed at, in `folder` (which holds nothing else)."""
    folder.mkdir()
    path = folder / "warehouse.db"
    if kind in ("wal", "rollback"):
        shutil.copy2(sample, path)
        if kind == "rollback":
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.close()
        assert journal_mode(path) == ("wal" if kind == "wal" else "delete")
    elif kind == "empty":
        path.touch()
    elif kind == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('not a warehouse')")
        conn.commit()
        conn.close()
    else:
        assert kind == "missing"
        return folder / "absent" / "warehouse.db"  # its folder does not exist either
    return path


# A one-line error for each target that is not a warehouse; `db current` answers "none" for a
# database that exists and holds nothing.
FAILURES = {
    "empty": "{path} holds no warehouse yet: run `warehouse ingest …` or `warehouse db upgrade`",
    "foreign": "{path} holds tables but no warehouse schema version: point --db at a warehouse",
    "missing": "no warehouse at {path}: `warehouse ingest …` or `warehouse db upgrade` creates one",
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["wal", "rollback", "empty", "foreign", "missing"])
def test_read_command_leaves_every_file_as_it_was(kind, command, sample_warehouse, tmp_path):
    folder = tmp_path / "db"
    path = make_target(kind, sample_warehouse, folder)
    facts = _facts(sample_warehouse) if kind in ("wal", "rollback") else {"trial": "t", "a": "a", "b": "b"}
    out = tmp_path / "out"  # outside the database's folder
    args = [a.format(out=out, db=path, **facts) for a in COMMANDS[command]]
    before = snapshot(folder)

    done = run_cli(str(path), *args)

    assert snapshot(folder) == before, done.stderr
    if kind == "missing":
        assert not path.parent.exists()
    if kind in ("wal", "rollback"):
        assert journal_mode(path) == ("wal" if kind == "wal" else "delete")
        assert done.returncode == 0, done.stderr
        if command == "sql":
            assert facts["n_trials"] in done.stdout
        if command == "db-current":
            assert done.stdout.strip() == HEAD
        if command.startswith("export"):
            assert (out / "README.md").is_file()
        if command == "lake-sync":
            assert (out / "manifest.json").is_file()
        if command == "report":
            assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        return
    if command == "db-current" and kind == "empty":
        assert (done.returncode, done.stdout.strip()) == (0, "none")
        return
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: " + FAILURES[kind].format(path=path)
    assert not out.exists()  # an export that cannot read makes no folder either


def test_a_writer_changes_what_the_snapshot_sees(sample_warehouse, tmp_path):
    """The check above can fail: a command that writes (`index build`) shows in the snapshot,
    and so does the old behaviour of every connection, switching a rollback file to WAL."""
    folder = tmp_path / "db"
    path = make_target("rollback", sample_warehouse, folder)
    before = snapshot(folder)
    done = run_cli(str(path), "index", "build")
    assert done.returncode == 0, done.stderr
    assert snapshot(folder) != before and journal_mode(path) == "wal"


def test_a_file_that_is_not_sqlite_gets_one_line(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("hello\n")
    before = snapshot(tmp_path)
    for args in (["sql", "select 1"], ["db", "current"], ["ingest", str(SAMPLE)]):
        done = run_cli(str(path), *args)
        assert done.returncode == 1
        assert done.stderr.strip() == f"Error: {path} is not a SQLite database: point --db at a warehouse"
    assert snapshot(tmp_path) == before


def test_the_read_engine_refuses_writes_on_sqlite(sample_warehouse, tmp_path):
    path = make_target("wal", sample_warehouse, tmp_path / "db")
    engine = make_read_engine(resolve_url(str(path)))
    try:
        with engine.connect() as conn, pytest.raises(DBAPIError, match="readonly|read-only"):
            conn.execute(text("DELETE FROM runs"))
    finally:
        engine.dispose()
    assert sorted(p.name for p in path.parent.iterdir()) == ["warehouse.db"]


# --- a read-only mount ---------------------------------------------------------------------

# A private mount namespace (`unshare -rm`, or `unshare -m` for root where user namespaces are
# not allowed): the read-only bind mount exists only for the command run inside it, so nothing is
# left mounted whatever happens to the test. The fixture readonly_mounts picks the one that works.
_UNSHARE = ["unshare", "-rm"]
_READONLY_VIEW = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'


def run_on_readonly_view(source: Path, view: Path, db_name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_UNSHARE, "sh", "-c", _READONLY_VIEW, "sh", str(source), str(view),
                           *CLI, "--db", str(view / db_name), *args],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def readonly_mounts(tmp_path_factory) -> None:
    """Fails (under CI) or skips when this machine cannot make a read-only mount."""
    root = tmp_path_factory.mktemp("probe")
    (root / "src").mkdir()
    (root / "view").mkdir()
    ok, why = False, "unshare is not installed"
    for unshare in (["unshare", "-rm"], ["unshare", "-m"]):
        try:
            probe = subprocess.run([*unshare, "sh", "-c", _READONLY_VIEW + " ", "sh", str(root / "src"),
                                    str(root / "view"), "sh", "-c", f"! touch {root / 'view' / 'x'} 2>/dev/null"],
                                   capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            break
        ok, why = probe.returncode == 0, probe.stderr.strip()
        if ok:
            _UNSHARE[:] = unshare
            break
    if not ok:
        reason = f"no read-only mount could be made (unshare -rm and mount --bind: {why or 'the mount was writable'})"
        if REQUIRE_PG:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(params=["wal", "rollback"])
def readonly_warehouse(request, sample_warehouse, tmp_path) -> tuple[Path, Path, str]:
    """(source folder, mount point, journal mode) of a warehouse seen through a read-only mount."""
    source = tmp_path / "archive"
    make_target(request.param, sample_warehouse, source)
    view = tmp_path / "view"
    view.mkdir()
    return source, view, request.param


READONLY_COMMANDS = {
    "sql": (["sql", "select count(*) AS n from trials"], "{n_trials}"),
    "query-runs": (["query", "runs", "--format", "csv"], "{a}"),
    "show": (["show", "{trial}"], "{trial}"),
    "search": (["search", "the", "--limit", "3"], "the"),
    "export-tables": (["export", "tables", "{out}"], None),
    "lake-sync": (["lake", "sync", "{out}"], None),
}


@pytest.mark.parametrize("command", READONLY_COMMANDS)
def test_read_commands_answer_from_a_read_only_mount(command, readonly_mounts, readonly_warehouse,
                                                      sample_warehouse, tmp_path):
    source, view, mode = readonly_warehouse
    facts = _facts(sample_warehouse)
    out = tmp_path / "out"  # outside the mount
    template, expected = READONLY_COMMANDS[command]
    before = snapshot(source)

    done = run_on_readonly_view(source, view, "warehouse.db", *(a.format(out=out, **facts) for a in template))

    assert done.returncode == 0, done.stderr
    if expected is not None:
        assert expected.format(**facts).lower() in done.stdout.lower()
    elif command == "lake-sync":
        assert (out / "manifest.json").is_file()
    else:
        assert (out / "runs" / "part-00000.parquet").is_file() and (out / "README.md").is_file()
    assert snapshot(source) == before
    assert journal_mode(source / "warehouse.db") == ("wal" if mode == "wal" else "delete")


def _wal_with_pending_commit(sample: Path, folder: Path, *, keep_shm: bool) -> None:
    """A copy of a WAL warehouse taken while a commit sat in its -wal (not yet checkpointed),
    with or without the -shm: what an archive of a live warehouse can hold."""
    folder.mkdir()
    live = folder / "live.db"
    shutil.copy2(sample, live)
    conn = sqlite3.connect(live)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("UPDATE runs SET name = 'renamed-in-the-wal' WHERE id = (SELECT min(id) FROM runs)")
    conn.commit()
    for suffix in ("", "-wal", "-shm") if keep_shm else ("", "-wal"):
        shutil.copy2(f"{live}{suffix}", folder / f"warehouse.db{suffix}")
    conn.close()
    for p in folder.glob("live.db*"):
        p.unlink()


def test_a_wal_archive_with_its_shm_reads_its_pending_commits(readonly_mounts, sample_warehouse, tmp_path):
    source, view = tmp_path / "archive", tmp_path / "view"
    _wal_with_pending_commit(sample_warehouse, source, keep_shm=True)
    view.mkdir()
    before = snapshot(source)
    done = run_on_readonly_view(source, view, "warehouse.db", "sql", "select name from runs order by id")
    assert done.returncode == 0, done.stderr
    assert "renamed-in-the-wal" in done.stdout
    assert snapshot(source) == before


def test_a_wal_archive_without_its_shm_is_refused_with_the_fix(readonly_mounts, sample_warehouse, tmp_path):
    """Without the -shm SQLite cannot read the -wal's commits, and reading the file alone
    (immutable) would silently drop them: one line naming the file and the fix instead."""
    source, view = tmp_path / "archive", tmp_path / "view"
    _wal_with_pending_commit(sample_warehouse, source, keep_shm=False)
    view.mkdir()
    before = snapshot(source)
    done = run_on_readonly_view(source, view, "warehouse.db", "sql", "select name from runs")
    assert done.returncode == 1
    db = view / "warehouse.db"
    assert done.stderr.strip() == (
        f"Error: {db} is in WAL mode with no warehouse.db-shm beside it, and this user may not write "
        f"there to create one: ask the owner to run `sqlite3 {db} 'PRAGMA journal_mode=DELETE'`, or "
        f"copy the file and its -wal to a folder you can write")
    assert snapshot(source) == before


# --- PostgreSQL: READ ONLY transactions ----------------------------------------------------

def test_the_read_engine_refuses_writes_on_postgresql(pg_template):
    with contextmanager(_fresh_pg)(pg_template) as url:
        engine = make_read_engine(resolve_url(url))
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SHOW transaction_read_only")).scalar() == "on"
                with pytest.raises(DBAPIError) as refused:
                    conn.execute(text("DELETE FROM runs"))
            assert refused.value.orig.sqlstate == "25006"  # read_only_sql_transaction
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def probed_pg(request) -> Iterator[tuple[str, dict[str, str]]]:
    """A PostgreSQL warehouse holding examples/sample, and a URL for an ordinary role every
    read of whose rows, in any table, raises unless the transaction is READ ONLY (a row-level
    security policy calling a check): a read command that runs anything outside a READ ONLY
    transaction fails."""
    template = request.getfixturevalue("pg_template")
    role = f"wh_ro_probe_{uuid.uuid4().hex[:10]}"
    with contextmanager(_fresh_pg)(template) as url:
        done = run_cli(url, "ingest", str(SAMPLE))
        assert done.returncode == 0, done.stderr
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'probe'")
            conn.execute("""
                CREATE FUNCTION public.assert_read_only() RETURNS boolean LANGUAGE plpgsql AS $$
                BEGIN
                    IF current_setting('transaction_read_only') <> 'on' THEN
                        RAISE EXCEPTION 'read outside a READ ONLY transaction';
                    END IF;
                    RETURN true;
                END $$""")
            tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            for table in tables:
                conn.execute(f'GRANT SELECT ON "{table}" TO {role}')
                conn.execute(f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY')
                conn.execute(f'CREATE POLICY read_only ON "{table}" FOR SELECT TO {role} '
                             f'USING (public.assert_read_only())')
            # A view reads its tables as the role reading it (security_invoker, PostgreSQL 15),
            # so their policies hold through it too (`turns` is a view of conversation_turns).
            invoker = int(conn.execute("SHOW server_version_num").fetchone()[0]) >= 150000
            views = [v for (v,) in conn.execute("SELECT viewname FROM pg_views WHERE schemaname = 'public'")]
            for view in views:
                conn.execute(f'GRANT SELECT ON "{view}" TO {role}')
                if invoker:
                    conn.execute(f'ALTER VIEW "{view}" SET (security_invoker = true)')
        probe_url = make_url(url).set(username=role, password="probe").render_as_string(hide_password=False)
        facts = {}
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            keys = [k for (k,) in conn.execute("SELECT run_key FROM runs ORDER BY run_key")]
            (facts["trial"],) = conn.execute("SELECT trial_name FROM trials ORDER BY id LIMIT 1").fetchone()
            (n,) = conn.execute("SELECT count(*) FROM trials").fetchone()
        facts.update(a=keys[0], b=keys[-1], n_trials=str(n))
        yield probe_url, facts
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_the_probe_refuses_a_read_outside_read_only(probed_pg):
    """The check the next test relies on can fail: the same role reading in an ordinary
    transaction is refused."""
    url, _ = probed_pg
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="outside a READ ONLY"):
            conn.execute("SELECT count(*) FROM runs").fetchone()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_read_command_runs_read_only_on_postgresql(command, probed_pg, tmp_path):
    url, facts = probed_pg
    out = tmp_path / "out"
    done = run_cli(url, *(a.format(out=out, db=url, **facts) for a in COMMANDS[command]))
    assert done.returncode == 0, done.stderr
    if command == "sql":
        assert facts["n_trials"] in done.stdout
    if command == "db-current":
        assert done.stdout.strip() == HEAD
