"""Each PostgreSQL warehouse's own reader role (warehouse.db.roles, migration 0011): a teammate
granted one warehouse's reader reads that one and nothing else on the server; upgrading a
warehouse of the cluster-wide `warehouse_reader` moves its grants, downgrading moves them back;
a warehouse copied from another by TEMPLATE gets its own reader at `db upgrade`; and the README's
team set-up works as written. Every role a test makes is dropped after it (roles are the
server's, not a database's)."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

import query_fixture
from conftest import PG_URL, _pg_admin_conninfo
from query_fixture import cli
from warehouse.db import roles, schema
from warehouse.db.engine import make_engine, resolve_url

PG = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
OLD_ROLE = "warehouse_reader"
SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"


class Server:
    """Databases and login roles made by one test, dropped after it (databases first: a role
    that owns one cannot go before it)."""

    def __init__(self):
        self.admin = psycopg.connect(_pg_admin_conninfo(), autocommit=True)
        self.databases: list[str] = []
        self.roles: list[str] = []

    def role(self, *options: str) -> tuple[str, str]:
        name, password = f"wh_mate_{uuid.uuid4().hex[:10]}", secrets.token_hex(12)
        self.admin.execute(f"CREATE ROLE {name} LOGIN {' '.join(options)} PASSWORD '{password}'")
        self.roles.append(name)
        return name, password

    def database(self, name: str | None = None, *, template: str = "template0", owner: str | None = None) -> str:
        name = name or f"wh_test_{uuid.uuid4().hex[:12]}"
        self.databases.append(name)
        self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"' + (f" OWNER {owner}" if owner else ""))
        return name

    def url(self, database: str, role: tuple[str, str] | None = None) -> str:
        url = make_url(PG_URL).set(drivername="postgresql+psycopg", database=database)
        if role:
            url = url.set(username=role[0], password=role[1])
        return url.render_as_string(hide_password=False)

    def reads(self, role: str, database: str) -> bool:
        """Whether `role` may read this warehouse's runs."""
        with psycopg.connect(make_url(self.url(database)).set(drivername="postgresql").render_as_string(
                hide_password=False), autocommit=True) as conn:
            return conn.execute("SELECT has_table_privilege(%s, 'runs', 'SELECT')", [role]).fetchone()[0]

    def close(self):
        for name in self.databases:
            self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for name in [roles.reader_role(name) for name in self.databases] + self.roles:
            self.admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        self.admin.close()


@pytest.fixture
def server(backend):
    if not PG_URL:
        pytest.skip("PostgreSQL tests need WAREHOUSE_TEST_PG_URL")
    made = Server()
    yield made
    made.close()


def _warehouse(server: Server, url: str) -> None:
    engine = make_engine(resolve_url(url))
    try:
        schema.upgrade(engine)
        query_fixture.build(engine)
    finally:
        engine.dispose()


def _one_error_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("database", ["evals", "x" * 46, "x" * 47, "Team-A", "team_a", "Équipe «β» " * 6, "a\"b"])
def test_the_role_name_is_a_plain_identifier_that_fits(database):
    role = roles.reader_role(database)
    assert role.startswith("warehouse_reader_") and len(role.encode()) <= 63
    assert all(c.isascii() and (c.islower() or c.isdigit() or c == "_") for c in role), role
    assert role == roles.reader_role(database)  # deterministic
    if database in ("evals", "x" * 46, "team_a"):
        assert role == f"warehouse_reader_{database}"


def test_names_that_need_a_hash_keep_apart():
    assert roles.reader_role("Team-A") != roles.reader_role("team_a") != roles.reader_role("team-a")
    assert roles.reader_role("x" * 47) != roles.reader_role("x" * 48)


@PG
def test_a_teammate_reads_the_warehouse_granted_and_no_other(server):
    a, b = server.database(), server.database()
    for name in (a, b):
        _warehouse(server, server.url(name))
    alice = server.role()
    server.admin.execute(f"GRANT {roles.reader_role(a)} TO {alice[0]}")

    done = cli(server.url(a, alice), "sql", "-f", "csv", "SELECT count(*) AS n, current_user AS u FROM runs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == f"3,{roles.reader_role(a)}"
    done = cli(server.url(a, alice), "query", "runs", "-f", "csv")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 4, done.stderr

    for args in (("sql", "SELECT count(*) FROM runs"), ("query", "runs")):
        assert "permission denied" in _one_error_line(cli(server.url(b, alice), *args))
    with psycopg.connect(make_url(server.url(b, alice)).set(drivername="postgresql").render_as_string(
            hide_password=False)) as plain:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            plain.execute("SELECT count(*) FROM runs")


@PG
def test_upgrading_from_0010_moves_the_grants_and_downgrading_moves_them_back(server):
    name = server.database()
    url = server.url(name)
    engine = make_engine(resolve_url(url))
    try:
        schema.upgrade(engine, "0010")  # 0007 made the cluster's role, if it was missing
        assert server.reads(OLD_ROLE, name)
        alice = server.role()
        server.admin.execute(f"GRANT {OLD_ROLE} TO {alice[0]}")  # what `db upgrade` advised
        alices = make_url(server.url(name, alice)).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(alices) as plain:
            assert plain.execute("SELECT count(*) FROM runs").fetchone() == (0,)

        upgraded = cli(url, "db", "upgrade")
        assert upgraded.returncode == 0 and "note:" not in upgraded.stderr, upgraded.stderr
        reader = roles.reader_role(name)
        assert server.reads(reader, name)
        with psycopg.connect(alices) as plain:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                plain.execute("SELECT count(*) FROM runs")
        # The old role is dropped where no other database grants it anything; on a shared
        # server other warehouses come and go meanwhile, so only this database is asserted:
        # nothing here is granted to it (tables, schema, default privileges).
        with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_shdepend WHERE refobjid = (SELECT oid FROM pg_roles WHERE rolname = %s) "
                "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [OLD_ROLE]).fetchone() == (0,)
        done = cli(url, "sql", "-f", "csv", "SELECT current_user AS u")
        assert done.stdout.splitlines()[1:] == [reader], done.stderr

        schema.downgrade(engine, "0010")
        assert server.reads(OLD_ROLE, name) and not server.reads(reader, name)
        schema.upgrade(engine)
        assert server.reads(reader, name)
    finally:
        engine.dispose()


@PG
def test_a_copy_made_from_a_template_gets_its_own_reader_at_db_upgrade(server):
    a = server.database()
    _warehouse(server, server.url(a))
    alice = server.role()
    server.admin.execute(f"GRANT {roles.reader_role(a)} TO {alice[0]}")
    # Its reader exists already (a database of that name was there before), but is granted
    # nothing in the copy, which holds the template's grants (PostgreSQL copies them): queries
    # run as the connecting user, neither as the template's reader nor refused as the copy's.
    copy = f"wh_test_{uuid.uuid4().hex[:12]}"
    server.admin.execute(f"CREATE ROLE {roles.reader_role(copy)} NOLOGIN")
    server.database(copy, template=a)
    assert server.reads(roles.reader_role(a), copy)
    done = cli(server.url(copy), "sql", "-f", "csv", "SELECT current_user AS u")
    assert done.stdout.splitlines()[1:] == [make_url(PG_URL).username], done.stderr

    upgraded = cli(server.url(copy), "db", "upgrade")
    assert upgraded.returncode == 0 and "already at" in upgraded.stderr and "note:" not in upgraded.stderr
    assert server.reads(roles.reader_role(copy), copy) and not server.reads(roles.reader_role(a), copy)
    assert "permission denied" in _one_error_line(cli(server.url(copy, alice), "sql", "SELECT 1 FROM runs"))
    done = cli(server.url(copy), "sql", "-f", "csv", "SELECT current_user AS u")
    assert done.stdout.splitlines()[1:] == [roles.reader_role(copy)], done.stderr


@PG
def test_a_database_with_an_odd_long_name_gets_its_hashed_reader(server):
    name = server.database("Équipe «β» évals " + "x" * 41)  # 63 bytes: PostgreSQL's longest
    assert len(name.encode()) == 63
    url = server.url(name)
    assert cli(url, "db", "upgrade").returncode == 0
    done = cli(url, "sql", "-f", "csv", "SELECT current_user AS u")
    assert done.stdout.splitlines()[1:] == [roles.reader_role(name)], done.stderr
    assert roles.reader_role(name) != f"warehouse_reader_{name}"


@PG
def test_the_readmes_team_set_up(server):
    """The DBA makes the owner, the database and its reader (ADMIN to the owner); the owner runs
    `db upgrade` and grants read access; write access is the owner role's membership."""
    owner, alice, bob = server.role("NOSUPERUSER NOCREATEROLE NOCREATEDB"), server.role(), server.role()
    name = server.database(owner=owner[0])
    reader = roles.reader_role(name)
    server.admin.execute(f"CREATE ROLE {reader} NOLOGIN")
    server.admin.execute(f"GRANT {reader} TO {owner[0]} WITH ADMIN OPTION")
    upgraded = cli(server.url(name, owner), "db", "upgrade")
    assert upgraded.returncode == 0 and "note:" not in upgraded.stderr, upgraded.stderr

    with psycopg.connect(make_url(server.url(name, owner)).set(drivername="postgresql").render_as_string(
            hide_password=False), autocommit=True) as as_owner:
        as_owner.execute(f"GRANT {reader} TO {alice[0]}")  # read: the owner may give it
    server.admin.execute(f"GRANT {owner[0]} TO {bob[0]}")  # write: the DBA gives it

    loaded = cli(server.url(name, bob), "ingest", str(SAMPLE))
    assert loaded.returncode == 0, loaded.stderr
    done = cli(server.url(name, alice), "sql", "-f", "csv", "SELECT count(*) > 0 AS some, current_user AS u FROM trials")
    assert done.stdout.splitlines()[1:] == [f"True,{reader}"], done.stderr
    assert "permission denied" in _one_error_line(cli(server.url(name, alice), "ingest", str(SAMPLE)))
    # Neither reaches another owner's warehouse on the same server.
    other = server.database()
    _warehouse(server, server.url(other))
    for who in (alice, bob):
        assert "permission denied" in _one_error_line(cli(server.url(other, who), "query", "runs"))
    assert "permission denied" in _one_error_line(cli(server.url(other, bob), "ingest", str(SAMPLE)))


@PG
def test_a_migration_another_database_raced_on_a_role_runs_again(server):
    """Roles are the server's, the migration lock a database's: another warehouse's upgrade may
    drop a role between this migration's look-up and its grant (0011 drops 0007's role, seen in
    CI). Done on purpose here: the first run's grant fails on the dropped role, the whole
    transaction is rolled back and runs again, and finds the role gone."""
    role = f"wh_race_{uuid.uuid4().hex[:10]}"
    server.roles.append(role)
    server.admin.execute(f"CREATE ROLE {role} NOLOGIN")
    engine = make_engine(resolve_url(server.url(server.database())))
    runs = []

    def migration(conn):
        runs.append(conn.exec_driver_sql("SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)).scalar())
        conn.exec_driver_sql("CREATE TABLE made_by_the_run (x int)")  # rolled back with the failed run
        if runs[-1]:
            server.admin.execute(f"DROP ROLE {role}")  # another database's upgrade, meanwhile
            conn.exec_driver_sql(f"GRANT SELECT ON made_by_the_run TO {role}")

    try:
        schema._run(engine, migration)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_tables WHERE tablename = 'made_by_the_run'").scalar() == 1
    finally:
        engine.dispose()
    assert runs == [1, 0]


@PG
def test_a_migration_that_fails_for_another_reason_is_not_run_again(server):
    engine = make_engine(resolve_url(server.url(server.database())))
    runs = []

    def migration(conn):
        runs.append(1)
        conn.exec_driver_sql("SELECT * FROM no_such_table")

    try:
        with pytest.raises(Exception, match="no_such_table"):
            schema._run(engine, migration)
    finally:
        engine.dispose()
    assert runs == [1]
