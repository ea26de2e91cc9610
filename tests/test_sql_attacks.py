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
from ingest.bulk import PG_WRITE_LOCK
from query_fixture import cli
from sql_attacks import CASES
from warehouse.db import schema
from warehouse.db.roles import reader_role
from warehouse.db.engine import make_engine, resolve_url

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
    wh = warehouses(backend, role)
    witness = wh["witness"]
    pid = witness.info.backend_pid if witness else 0
    statement = sql.format(tmp=scratch, pid=pid, lock=PG_WRITE_LOCK)
    started = time.monotonic()
    done, peak_kb = _run(wh["url"], statement, scratch)
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
        assert len(done.stdout) < 2_000_000, statement  # the row cap held
        assert "Traceback" not in done.stderr and len(lines) <= 2, done.stderr[-500:]
    assert elapsed < TIMEOUT + MARGIN, (statement, elapsed)

    assert canonical.differences(wh["dump"], canonical.dump(wh["engine"])) == [], statement
    assert os.listdir(scratch) == [], statement
    if witness is not None:
        assert witness.execute("SELECT 1").fetchone() == (1,), "the other session was touched"
        held = witness.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                               "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
        assert held.fetchone() == (0,), statement
        assert _server_state(witness) == wh["server"], statement
    assert peak_kb < 1_000_000, (statement, peak_kb)  # the CLI's memory stayed under 1 GB


# Runs a command and writes its peak resident memory (KB) to the descriptor its first argument names. A child's ru_maxrss starts
# at its parent's resident size when it was forked (Linux keeps the high-water mark across
# exec), so the CLI is forked from this small process rather than from the test worker, whose
# own size would be all the test saw.
_PEAK_OF = """
import os, signal, sys
report, command = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.close(report)
    os.execv(command[0], command)
_, status, usage = os.wait4(pid, 0)
os.write(report, str(usage.ru_maxrss).encode())
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _run(url: str, statement: str, cwd: str) -> tuple[subprocess.CompletedProcess, int]:
    """The CLI's result and its peak resident memory in KB (its own, read as it is reaped).
    Run from the scratch folder, so a file written relative to the CLI's folder shows too."""
    args = [sys.executable, "-m", "warehouse", "--db", url, "sql", "-f", "csv",
            "--timeout", str(TIMEOUT), "--max-rows", "1000", statement]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    peak_r, peak_w = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-c", _PEAK_OF, str(peak_w), *args], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, cwd=cwd, env=env, timeout=TIMEOUT + 60,
                              pass_fds=(peak_w,))
        os.close(peak_w)
        peak_w = -1
        peak = os.read(peak_r, 64)
    finally:
        if peak_w >= 0:
            os.close(peak_w)
        os.close(peak_r)
    done.args = args
    return done, int(peak or 0)


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
