"""Every database test runs on a real SQLite file and on a real PostgreSQL server.

PostgreSQL comes from $WAREHOUSE_TEST_PG_URL (a URL to a database whose user may create
databases). Without it the PostgreSQL half is skipped locally; under CI (or with
WAREHOUSE_REQUIRE_PG=1) a missing or unreachable server is a failure, not a skip."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from warehouse import readonly
from warehouse.db import roles, schema
from warehouse.db.engine import make_engine, resolve_url

# A table printed by a CLI run in a test fits COLUMNS when it is set: without it, as to any pipe,
# every value is printed whole. Tests of fitting set it. Some pytest set-ups put COLUMNS into the
# process's C environment behind os.environ's back, after this module is imported (the children
# of a test under pytest 9.0 here saw COLUMNS=80 that os.environ did not hold): setting and
# deleting it through os.environ unsets it there too, before every test.
@pytest.fixture(autouse=True)
def _no_columns() -> None:
    os.environ["COLUMNS"] = ""
    del os.environ["COLUMNS"]


PG_URL = os.environ.get("WAREHOUSE_TEST_PG_URL")
# Chromium missing: the browser tests are skipped locally, a failure under CI or with
# WAREHOUSE_REQUIRE_BROWSER=1 (.ci/run installs it).
REQUIRE_BROWSER = bool(os.environ.get("CI") or os.environ.get("WAREHOUSE_REQUIRE_BROWSER"))
REQUIRE_PG = bool(os.environ.get("CI") or os.environ.get("WAREHOUSE_REQUIRE_PG"))
# pyspark or Java missing: the lake's Spark tests are skipped locally, a failure under CI or with
# WAREHOUSE_REQUIRE_SPARK=1 (.ci/run installs Java).
REQUIRE_SPARK = bool(os.environ.get("CI") or os.environ.get("WAREHOUSE_REQUIRE_SPARK"))
BACKENDS = ["sqlite", "postgresql"]


def _pg_admin_conninfo() -> str:
    url = make_url(PG_URL).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def _no_postgres(reason: str) -> None:
    if REQUIRE_PG:
        pytest.fail(f"PostgreSQL is required here but {reason}")
    pytest.skip(f"PostgreSQL tests need WAREHOUSE_TEST_PG_URL ({reason})")


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database at the head revision, cloned by each test that needs a fresh warehouse."""
    if not PG_URL:
        _no_postgres("WAREHOUSE_TEST_PG_URL is not set")
    name = f"wh_tmpl_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(_pg_admin_conninfo(), autocommit=True)
    except psycopg.OperationalError as exc:
        _no_postgres(f"the server did not answer: {exc}")
    admin.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(resolve_url(_db_url(name)))
    schema.upgrade(engine)
    engine.dispose()
    yield name
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f"DROP ROLE IF EXISTS {roles.reader_role(name)}")
    admin.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A SQLite warehouse at the head revision, copied by each test that needs a fresh one (as
    pg_template is cloned): the migrations run once, not for every test (70 ms each)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "warehouse.db"
    engine = make_engine(resolve_url(f"sqlite:///{path}"))
    schema.upgrade(engine)
    engine.dispose()
    # The last connection closed has moved its log into the file: the file alone is the warehouse.
    assert not path.with_name(path.name + "-wal").exists()
    return path


def _db_url(name: str) -> str:
    return make_url(PG_URL).set(drivername="postgresql+psycopg", database=name).render_as_string(
        hide_password=False
    )


def _fresh_pg(template: str | None) -> Iterator[str]:
    if not PG_URL:
        _no_postgres("WAREHOUSE_TEST_PG_URL is not set")
    name = f"wh_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template or "template0"}"')
    if template:
        # A copy holds the template's grants, to the template's reader: its own reader is what
        # `db upgrade` would make (warehouse.db.roles), made here for less.
        engine = make_engine(resolve_url(_db_url(name)))
        with engine.begin() as conn:
            roles.grant(conn)
        engine.dispose()
    yield _db_url(name)
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f"DROP ROLE IF EXISTS {roles.reader_role(name)}")  # roles are the server's


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def empty_db_url(backend, tmp_path) -> Iterator[str]:
    """A URL to a database that exists and holds nothing."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'warehouse.db'}"
    else:
        yield from _fresh_pg(None)


@pytest.fixture
def db_url(backend, tmp_path, request) -> Iterator[str]:
    """A URL to a fresh warehouse at the head revision."""
    yield from fresh_warehouse(backend, tmp_path, request)


def fresh_warehouse(backend: str, folder, request) -> Iterator[str]:
    """A fresh warehouse at the head revision: a file in `folder`, or a PostgreSQL database made
    from the template (dropped after). `db_url`'s, for fixtures of a wider scope too."""
    if backend == "sqlite":
        shutil.copyfile(request.getfixturevalue("sqlite_template"), folder / "warehouse.db")
        yield f"sqlite:///{folder / 'warehouse.db'}"
    else:
        yield from _fresh_pg(request.getfixturevalue("pg_template"))


@contextmanager
def another_warehouse(backend: str, folder: Path, request, fill: Callable[[Engine], None]) -> Iterator[str]:
    """A further fresh warehouse beside a test's own (fresh_warehouse's, its file in `folder`),
    filled by `fill`; a PostgreSQL one is dropped after."""
    folder.mkdir(parents=True, exist_ok=True)
    with contextmanager(fresh_warehouse)(backend, folder, request) as url:
        engine = make_engine(resolve_url(url))
        try:
            fill(engine)
        finally:
            engine.dispose()
        yield url


@contextmanager
def copied_warehouse(backend: str, url: str, folder: Path) -> Iterator[str]:
    """A copy of the warehouse at `url`: its file copied into `folder`, or a PostgreSQL database
    made from it (dropped after). Cheaper than filling a further warehouse alike
    (another_warehouse) where a test needs several. No session may be open on it but the
    read-only ones the library keeps, closed here."""
    readonly.release(resolve_url(url))
    if backend == "sqlite":
        source = Path(url.removeprefix("sqlite:///"))
        # Its last connection closed has moved its log into the file: the file alone is the warehouse.
        assert not source.with_name(source.name + "-wal").exists()
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / "warehouse.db")
        yield f"sqlite:///{folder / 'warehouse.db'}"
    else:
        with contextmanager(_fresh_pg)(make_url(url).database) as copy:
            yield copy


@pytest.fixture
def engine(db_url):
    eng = make_engine(resolve_url(db_url))
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (the report's and the viewer's tests): Debian's,
    so nothing is downloaded."""
    executable = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable, why = None, "playwright is not installed (pip install -e '.[test]')"
    else:
        why = "chromium is not installed (apt-get install -y chromium)"
    if executable is None:
        if REQUIRE_BROWSER:
            pytest.fail(f"this test needs a browser, but {why}")
        pytest.skip(why)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable)
        yield chromium
        chromium.close()
