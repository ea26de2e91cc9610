"""The attack corpus (tests/sql_attacks.py) through the real CLI: on SQLite, and on PostgreSQL
both through a superuser's URL and through an ordinary role that owns its database. Each case
must be refused in one line (or end within its limits), leave the warehouse as it was (canonical
dump), write no file, and leave a second session of the same role, and the server, untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import psycopg
import pytest
from sqlalchemy.engine import make_url

import canonical
import query_fixture
from conftest import PG_URL, _fresh_pg, _pg_admin_conninfo
from ingest.write.bulk import PG_WRITE_LOCK
from procs import run_with_peak
from query_fixture import cli
from sql_attacks import CASES, SIZED, WHERE
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.db.roles import reader_role

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMBOS = [("sqlite", "owner"), ("postgresql", "superuser"), ("postgresql", "ordinary")]
TIMEOUT = 2
MARGIN = 8  # seconds past the time limit a bounded case may take: starting Python on a busy machine


def _params():
    for backend, role in COMBOS:
        for sql, outcome, backends in CASES:
            if backend in backends:
                yield pytest.param(backend, role, sql, outcome, id=f"{backend}-{role}-{sql[:60]}")


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory, request):
    """One loaded warehouse per combination, made on first use, kept for the module."""
    made: dict[tuple[str, str], dict] = {}
    cleanups = []

    def get(backend: str, role: str) -> dict:
        if (backend, role) not in made:
            made[(backend, role)] = _make(backend, role, tmp_path_factory, request, cleanups)
        return made[(backend, role)]

    yield get
    for cleanup in reversed(cleanups):
        cleanup()


def _make(backend, role, tmp_path_factory, request, cleanups) -> dict:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('attacks') / 'warehouse.db'}"
        engine = make_engine(resolve_url(url))
        schema.upgrade(engine)
    elif role == "superuser":
        gen = _fresh_pg(request.getfixturevalue("pg_template"))
        url = next(gen)
        cleanups.append(lambda: next(gen, None))
        engine = make_engine(resolve_url(url))
    else:
        url = _ordinary_database(cleanups)
        upgraded = cli(url, "db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        engine = make_engine(resolve_url(url))
    query_fixture.build(engine)
    cleanups.append(engine.dispose)
    witness = None
    if backend == "postgresql":
        witness = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                                  autocommit=True)
        cleanups.append(witness.close)
    return {"url": url, "engine": engine, "dump": canonical.dump(engine), "witness": witness,
            "server": _server_state(witness) if witness else None}


def _ordinary_database(cleanups) -> str:
    """A LOGIN role that is no superuser and may not create roles, owning a new database."""
    if not PG_URL:
        pytest.skip("PostgreSQL tests need WAREHOUSE_TEST_PG_URL")
    name = f"wh_attacker_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pw' NOSUPERUSER NOCREATEROLE NOCREATEDB")
        admin.execute(f'CREATE DATABASE "{name}" OWNER {name} TEMPLATE template0')

    def drop():
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f"DROP ROLE IF EXISTS {name}")
    cleanups.append(drop)
    return make_url(PG_URL).set(drivername="postgresql+psycopg", username=name, password="pw",
                                database=name).render_as_string(hide_password=False)


def _server_state(witness) -> tuple:
    """What a statement reaching the server would change: the configuration's load time, this
    database's statistics reset time."""
    return witness.execute("SELECT pg_conf_load_time(), (SELECT stats_reset FROM pg_stat_database "
                           "WHERE datname = current_database())").fetchone()


@pytest.fixture
def scratch():
    """A folder any OS user may write in (the server's too): it must stay empty."""
    path = tempfile.mkdtemp(prefix="wh_attack_", dir="/tmp")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("backend,role,sql,outcome", list(_params()))
def test_attack(warehouses, scratch, backend, role, sql, outcome):
    _attack(warehouses(backend, role), scratch, sql, (), outcome)


def _sized_params():
    for backend, role in COMBOS:
        for sql, options, outcome, backends in SIZED:
            if backend in backends:
                yield pytest.param(backend, role, sql, options, outcome, id=f"{backend}-{role}-{' '.join(options)}-{sql[:50]}")


@pytest.mark.parametrize("backend,role,sql,options,outcome", list(_sized_params()))
def test_sized(warehouses, scratch, backend, role, sql, options, outcome):
    """Huge rows when one is wanted, rows over the row cap, the server's memory: within the
    client's memory bound and the time limit."""
    _attack(warehouses(backend, role), scratch, sql, options, outcome)


def _attack(wh, scratch, sql, options, outcome):
    witness = wh["witness"]
    pid = witness.info.backend_pid if witness else 0
    statement = sql.format(tmp=scratch, pid=pid, lock=PG_WRITE_LOCK)
    started = time.monotonic()
    done, peak_kb = _run(wh["url"], statement, scratch, options)
    elapsed = time.monotonic() - started

    lines = done.stderr.strip().splitlines()
    if outcome == "refused":
        assert done.returncode == 1, (statement, done.returncode, done.stdout[:300], done.stderr)
        assert len(lines) == 1 and lines[0].startswith("Error: "), (statement, done.stderr)
        assert done.stdout == "", (statement, done.stdout[:300])
    elif outcome == "harmless":
        assert done.returncode == 0, (statement, done.stderr)
    else:
        assert done.returncode in (0, 1), (statement, done.returncode, done.stderr[-500:])
        assert len(done.stdout) < 20_000_000, statement  # the row cap held
        assert "Traceback" not in done.stderr and len(lines) <= 2, done.stderr[-500:]
    assert elapsed < TIMEOUT + MARGIN, (statement, elapsed)
    _untouched(wh, scratch, statement, [])
    assert peak_kb < 1_000_000, (statement, peak_kb)  # the CLI's memory stayed under 1 GB


def _untouched(wh, scratch, statement, allowed):
    """The warehouse as it was, nothing written in the scratch folder but `allowed`, the second
    session alive and the server's state as it was."""
    witness = wh["witness"]
    assert canonical.differences(wh["dump"], canonical.dump(wh["engine"])) == [], statement
    assert sorted(os.listdir(scratch)) == sorted(allowed), statement
    if witness is not None:
        assert witness.execute("SELECT 1").fetchone() == (1,), "the other session was touched"
        held = witness.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                               "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
        assert held.fetchone() == (0,), statement
        assert _server_state(witness) == wh["server"], statement


def _run(url: str, statement: str, cwd: str, options: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, int]:
    """`warehouse sql` on the statement: see _peak."""
    return _peak([*_SQL_OPTIONS, *options, statement], url, cwd)


_SQL_OPTIONS = ("sql", "-f", "csv", "--timeout", str(TIMEOUT), "--max-rows", "1000")  # later options win


def _peak(command: list[str], url: str, cwd: str) -> tuple[subprocess.CompletedProcess, int]:
    """The CLI's result and its peak resident memory in KB (its own, read as it is reaped).
    Run from the scratch folder, so a file written relative to the CLI's folder shows too."""
    args = [sys.executable, "-m", "warehouse", "--db", url, *command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    return run_with_peak(args, stdin=subprocess.DEVNULL, cwd=cwd, env=env, timeout=TIMEOUT + 60)


@pytest.mark.parametrize("role", ["superuser", "ordinary"])
def test_who_runs_ad_hoc_sql(warehouses, role):
    """Through a superuser's URL the statement runs as the database's own reader role; an
    ordinary role that may not take it on runs as itself, and `db upgrade` said so."""
    wh = warehouses("postgresql", role)
    done = cli(wh["url"], "sql", "-f", "csv", "SELECT current_user AS u")
    assert done.returncode == 0, done.stderr
    user = done.stdout.splitlines()[1]
    if role == "superuser":
        assert user == reader_role(make_url(wh["url"]).database)
    else:
        assert user == make_url(wh["url"]).username
        again = cli(wh["url"], "db", "upgrade")
        assert "note: `warehouse sql` will run as" in again.stderr and again.returncode == 0
        assert f"CREATE ROLE {reader_role(make_url(wh['url']).database)} NOLOGIN" in again.stderr


def test_acceptance_truncate_through_ordinary_role(warehouses):
    wh = warehouses("postgresql", "ordinary")
    done = cli(wh["url"], "sql", "EXPLAIN SELECT 1 AS x$q$; COMMIT; TRUNCATE runs CASCADE; EXPLAIN SELECT 1 AS y$q$")
    assert done.returncode == 1 and done.stderr.startswith("Error: one statement at a time")
    assert canonical.differences(wh["dump"], canonical.dump(wh["engine"])) == []


def _where_params():
    for backend, role in COMBOS:
        for predicate, outcome, backends, roles in WHERE:
            if backend in backends and role in roles:
                yield pytest.param(backend, role, predicate, outcome, id=f"{backend}-{role}-{predicate[:60]}")


@pytest.mark.parametrize("backend,role,predicate,outcome", list(_where_params()))
def test_export_where(warehouses, scratch, backend, role, predicate, outcome):
    """`export hub --where` runs its predicate as `warehouse sql` runs a query: as the reader
    role (what it probes it cannot see), read-only, within --timeout and the caps; a refusal is
    one line and leaves no OUT."""
    wh = warehouses(backend, role)
    witness = wh["witness"]
    secret = f"secret-{uuid.uuid4().hex[:8]}"
    if witness is not None:
        witness.execute(f"SELECT '{secret}'")  # the query text a probe would look for
    statement = predicate.format(secret=secret, pid=witness.info.backend_pid if witness else 0)
    started = time.monotonic()
    done, peak_kb = _peak(["export", "hub", "out", "--timeout", str(TIMEOUT), "--where", statement], wh["url"], scratch)
    elapsed = time.monotonic() - started

    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, (statement, done.stderr[-800:])
    if outcome == "refused" or (outcome == "bounded" and done.returncode == 1):
        assert done.returncode == 1 and lines[0].startswith("Error: "), (statement, done.stderr)
        _untouched(wh, scratch, statement, [])
    else:
        assert done.returncode == 0, (statement, done.stderr)
        if outcome == "empty":
            assert lines[0] == "wrote out: 0 rows in 1 files under data/", (statement, lines)
        _untouched(wh, scratch, statement, ["out"])
    assert elapsed < TIMEOUT + MARGIN, (statement, elapsed)
    assert peak_kb < 1_000_000, (statement, peak_kb)


@pytest.mark.parametrize("role", ["superuser", "ordinary"])
def test_server_limits(warehouses, role):
    """The read transaction's limits on the server: work_mem, hash_mem_multiplier, the client
    check, and temp_file_limit where the connecting user may set it (a superuser; not an
    ordinary role, which keeps the server's)."""
    wh = warehouses("postgresql", role)
    done = cli(wh["url"], "sql", "-f", "csv", "SELECT current_setting('work_mem') AS w, "
               "current_setting('hash_mem_multiplier') AS h, current_setting('client_connection_check_interval') AS c, "
               "current_setting('temp_file_limit') AS t")
    assert done.returncode == 0, done.stderr
    expected_temp = "512MB" if role == "superuser" else "-1"
    assert done.stdout.splitlines()[1] == f"16MB,1,1s,{expected_temp}"


def test_temp_file_limit(warehouses, scratch):
    """A sort that spills: stopped at temp_file_limit (512 MB), long before its time limit."""
    wh = warehouses("postgresql", "superuser")
    witness = wh["witness"]

    def temp_bytes() -> int:
        witness.execute("SELECT pg_stat_clear_snapshot()")
        return witness.execute("SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]

    before = temp_bytes()
    done, peak_kb = _peak(["sql", "--timeout", "120", "SELECT count(*) FROM (SELECT md5(g::text) m FROM "
                           "generate_series(1, 100000000) g ORDER BY 1 OFFSET 0) q"], wh["url"], scratch)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "Error: database error: temporary file size exceeds temp_file_limit (524288kB)"], done.stderr
    for _ in range(50):  # the statistics arrive a moment after the statement
        written = temp_bytes() - before
        if written:
            break
        time.sleep(0.2)
    assert 0 < written <= 512 * 2**20 + 16 * 2**20, written
    _untouched(wh, scratch, "sort", [])


@pytest.mark.parametrize("role", ["superuser", "ordinary"])
@pytest.mark.parametrize("command", [
    ["sql", "--timeout", "120", "SELECT pg_sleep(60)"],
    ["export", "hub", "out", "--where", "pg_sleep(60) IS NOT NULL"],
], ids=["sql", "export"])
def test_killed_client(warehouses, scratch, role, command):
    """A CLI killed (SIGKILL) mid-statement: its backend stops within seconds, rather than run
    the statement to its end (client_connection_check_interval)."""
    wh = warehouses("postgresql", role)
    witness = wh["witness"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    active = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
              "AND pid <> pg_backend_pid()")
    process = subprocess.Popen([sys.executable, "-m", "warehouse", "--db", wh["url"], *command], cwd=scratch, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while witness.execute(active).fetchone()[0] == 0:
            assert process.poll() is None and time.monotonic() < deadline, "the statement never started"
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
    killed = time.monotonic()
    while witness.execute(active).fetchone()[0]:
        assert time.monotonic() - killed < 10, "the killed client's statement is still running"
        time.sleep(0.1)
    _untouched(wh, scratch, " ".join(command), [])


# In-process, the Python API: the same caps and time limit as `warehouse sql`.
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_api_bounds(warehouses, backend):
    import warehouse

    wh = warehouses(backend, "owner" if backend == "sqlite" else "superuser")
    blob = "randomblob({n})" if backend == "sqlite" else "repeat('x', {n})"
    with warehouse.open(wh["url"]) as api:
        with pytest.raises(warehouse.WarehouseError, match=r"^a value would be larger than 100,000,000 bytes"):
            api.sql(f"SELECT {blob.format(n=400_000_000 if backend == 'sqlite' else 150_000_000)} AS v")
        with pytest.raises(warehouse.WarehouseError, match=r"^a row would be larger than 200,000,000 bytes"):
            api.sql("SELECT " + ", ".join(blob.format(n=60_000_000) + f" AS v{i}" for i in range(4)))
        with pytest.raises(warehouse.WarehouseError, match="max_row_bytes must be a whole number"):
            api.sql("SELECT 1", max_row_bytes=0)
        lifted = api.sql(f"SELECT {blob.format(n=150_000_000)} AS v", max_value_bytes=None, timeout=60)
        assert len(lifted.rows[0][0]) == 150_000_000
        del lifted
        started = time.monotonic()
        with pytest.raises(warehouse.WarehouseError, match="longer than the time limit"):
            api.sql("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c", timeout=3)
        assert time.monotonic() - started < 3 + MARGIN
        with api.sql_stream("SELECT 1 AS n UNION ALL SELECT 2", max_rows=1) as rows:
            assert list(rows) == [(1,)]
        assert rows.truncated
    assert canonical.differences(wh["dump"], canonical.dump(wh["engine"])) == []
