"""`warehouse lake sync OUT --iceberg CATALOG`: every table of the lake is an Iceberg table in a
SQL catalog (a SQLite file beside a SQLite warehouse, a PostgreSQL database beside a PostgreSQL
one) over the lake's own files, and two real readers, pyiceberg and DuckDB's iceberg extension
(loaded from its PyPI wheel, no download), read from it exactly the rows the manifest's files
hold, sync after sync: a new run, a deleted run, nothing new. Each table's snapshot names only
files that are there; a catalog that fails leaves the lake synced and is caught up by the next
sync; a lake once published refuses a sync without its catalog; bad catalogs are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import make_url

import query_fixture
from conftest import _fresh_pg
from procs import run_cli
from test_lake_sync import ALL_TABLES, SAMPLE, _table_dicts, manifest, run_ids, stamps
from ingest.pipeline import ingest
from warehouse.api import Warehouse
from warehouse.db.engine import redact, resolve_url
from warehouse.lake.layout import table_files
from warehouse.lake.sync import Catalog, sync_lake


@pytest.fixture
def catalog_url(backend, tmp_path):
    """The catalog on the warehouse's own kind of database: a SQLite file, or a PostgreSQL
    database of its own on the test server."""
    if backend == "sqlite":
        yield str(tmp_path / "catalog.db")
    else:
        yield from _fresh_pg(None)


def _catalog(url: str) -> SqlCatalog:
    return SqlCatalog("warehouse", uri=resolve_url(url).render_as_string(hide_password=False))


@contextmanager
def _duckdb():
    """DuckDB with its iceberg and avro extensions loaded from their PyPI wheels (made for this
    DuckDB release: nothing is downloaded, and a mismatch fails here)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for module in (duckdb_extension_avro, duckdb_extension_iceberg):
            folder = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
            con.execute(f"LOAD '{next(folder.glob('*.duckdb_extension'))}'")
        yield con
    finally:
        con.close()


def _value(v):
    return v.astimezone(timezone.utc).isoformat() if isinstance(v, datetime) else v


def _rows(rows: list[dict]) -> list[str]:
    """As test_lake_sync.lake_rows gives a table's rows: sorted-key reprs, sorted."""
    return sorted(repr(sorted((k, _value(v)) for k, v in row.items())) for row in rows)


def iceberg_rows(url: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each table's rows as pyiceberg reads them, and as DuckDB's iceberg_scan reads them."""
    catalog = _catalog(url)
    by_pyiceberg, by_duckdb = {}, {}
    with _duckdb() as con:
        for _, name in catalog.list_tables("warehouse"):
            table = catalog.load_table(("warehouse", name))
            by_pyiceberg[name] = _rows(table.scan().to_arrow().to_pylist())
            got = con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").to_arrow_table()
            by_duckdb[name] = _rows(got.to_pylist())
    return by_pyiceberg, by_duckdb


def _lake_rows_utc(out: Path) -> dict[str, list[str]]:
    """The rows the manifest's files hold (test_lake_sync.lake_rows' reading), as _rows gives them."""
    return {table: _rows(_table_dicts(files, table, out)) for table, files in table_files(out).items()}


def assert_published(out: Path, url: str) -> None:
    """The catalog's tables hold the manifest's rows, read by both readers; each table is at
    the manifest's sync, with one snapshot, and names only files that are there."""
    want = _lake_rows_utc(out)
    by_pyiceberg, by_duckdb = iceberg_rows(url)
    assert set(want) == ALL_TABLES
    assert by_pyiceberg == want
    assert by_duckdb == want
    sync = str(manifest(out)["sync"])
    catalog = _catalog(url)
    for name in ALL_TABLES:
        table = catalog.load_table(("warehouse", name))
        assert table.properties["warehouse.lake-sync"] == sync, name
        assert len(table.metadata.snapshots) <= 1, name  # the older ones expired: their files go
        for task in table.scan().plan_files():
            assert Path(task.file.file_path.removeprefix("file://")).is_file(), task.file.file_path


def test_the_iceberg_tables_hold_the_lakes_rows_sync_after_sync(db_url, engine, catalog_url, tmp_path):
    query_fixture.build(engine)
    out = tmp_path / "lake"
    info = sync_lake(engine, out, iceberg=Catalog(catalog_url))
    assert info.iceberg_tables == len(ALL_TABLES)
    shown = redact(resolve_url(catalog_url))
    assert info.line().endswith(f"(sync 1); Iceberg: {len(ALL_TABLES)} tables committed to {shown}")
    assert manifest(out)["iceberg"] == {"catalog": shown, "namespace": "warehouse"}
    password = make_url(catalog_url).password if "://" in catalog_url else None
    assert not password or f":{password}@" not in json.dumps(manifest(out))  # the manifest keeps no password
    assert_published(out, catalog_url)

    ingest(engine, [str(SAMPLE)])  # two new runs
    info = sync_lake(engine, out, iceberg=Catalog(catalog_url))
    assert len(info.runs_new) == 2 and info.iceberg_tables == len(ALL_TABLES)
    assert_published(out, catalog_url)

    gone = sorted(run_ids(engine))[0]
    assert run_cli(db_url, "runs", "delete", gone, "--yes").returncode == 0
    info = sync_lake(engine, out, iceberg=Catalog(catalog_url))
    assert info.runs_removed and info.sync == 3
    assert_published(out, catalog_url)

    before = stamps(out)
    info = sync_lake(engine, out, iceberg=Catalog(catalog_url))
    assert not info.changed and info.iceberg_tables == 0 and stamps(out) == before


def test_the_command_and_the_api(db_url, engine, catalog_url, tmp_path):
    query_fixture.build(engine)
    out = tmp_path / "a lake, named [oddly]"  # written as it is in the data files' file:// paths
    done = run_cli(db_url, "lake", "sync", str(out), "--iceberg", catalog_url, "--iceberg-namespace", "warehouse")
    assert done.returncode == 0, done.stderr
    assert "; Iceberg: 17 tables committed to " in done.stderr
    assert_published(out, catalog_url)
    ingest(engine, [str(SAMPLE)])
    info = Warehouse(db_url).lake_sync(out, iceberg=catalog_url)
    assert len(info.runs_new) == 2
    assert_published(out, catalog_url)


def test_a_published_lake_refuses_a_sync_without_its_catalog(db_url, engine, tmp_path):
    query_fixture.build(engine)
    out, catalog = tmp_path / "lake", tmp_path / "catalog.db"
    sync_lake(engine, out, iceberg=Catalog(str(catalog)))
    ingest(engine, [str(SAMPLE)])
    before, good = stamps(out), (out / "manifest.json").read_bytes()
    done = run_cli(db_url, "lake", "sync", str(out))
    assert done.returncode == 1
    assert done.stderr == (f"Error: {out}: its tables are published to the Iceberg catalog {catalog} (namespace "
                           f"warehouse): give --iceberg CATALOG to keep them current\n")
    assert stamps(out) == before and (out / "manifest.json").read_bytes() == good


def test_bad_catalogs_are_refused_before_anything_is_written(db_url, engine, tmp_path):
    query_fixture.build(engine)
    for args, words in [(["--iceberg", "nosuch://x/y"], "unsupported database 'nosuch'"),
                        (["--iceberg", "sqlite://"], "an in-memory SQLite database keeps nothing"),
                        (["--iceberg", str(tmp_path / "c.db"), "--iceberg-namespace", "a b"],
                         "Iceberg namespace must be a plain name"),
                        (["--iceberg", str(tmp_path / "c.db"), "#1"],  # a fragment to a URI's reader
                         "Iceberg cannot name files under a path holding '#'")]:
        out = tmp_path / ("lake" + (args.pop() if args[-1] == "#1" else ""))
        done = run_cli(db_url, "lake", "sync", str(out), *args)
        assert done.returncode != 0, args
        assert done.stderr.startswith("Error: ") and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert not out.exists() and not (tmp_path / "c.db").exists()


def test_a_catalog_that_fails_leaves_the_lake_synced_and_the_next_sync_catches_up(db_url, engine, tmp_path):
    query_fixture.build(engine)
    out, catalog = tmp_path / "lake", str(tmp_path / "catalog.db")
    sync_lake(engine, out, iceberg=Catalog(catalog))
    first = {e["path"] for e in manifest(out)["files"]}
    gone = sorted(run_ids(engine))[0]
    assert run_cli(db_url, "runs", "delete", gone, "--yes").returncode == 0
    unreachable = str(tmp_path / "no-such-folder" / "catalog.db")  # SQLite cannot open it
    done = run_cli(db_url, "lake", "sync", str(out), "--iceberg", unreachable)
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: {out}: synced (sync 2), but its Iceberg tables were not published: "
                                  f"Iceberg catalog {unreachable}: "), done.stderr
    assert done.stderr.endswith("; the next sync publishes them\n") and len(done.stderr.splitlines()) == 1
    assert manifest(out)["sync"] == 2
    assert all((out / path).is_file() for path in first)  # the first catalog still names them: kept
    by_pyiceberg, _ = iceberg_rows(catalog)  # and reads the first sync whole
    assert by_pyiceberg["runs"] and len(by_pyiceberg["runs"]) == 3

    info = sync_lake(engine, out, iceberg=Catalog(catalog))
    assert info.changed and info.iceberg_tables == len(ALL_TABLES)
    assert_published(out, catalog)
    assert set(stamps(out)) == {e["path"] for e in manifest(out)["files"]}  # the old files went only now


def test_a_sync_killed_while_publishing_leaves_every_table_readable(db_url, engine, tmp_path):
    """SIGKILLed after some tables are committed: the catalog holds some tables at the new sync
    and some at the last, each with every file it names; the next sync publishes the rest."""
    query_fixture.build(engine)
    out, catalog = tmp_path / "lake", str(tmp_path / "catalog.db")
    sync_lake(engine, out, iceberg=Catalog(catalog))
    gone = sorted(run_ids(engine))[0]
    assert run_cli(db_url, "runs", "delete", gone, "--yes").returncode == 0
    ingest(engine, [str(SAMPLE)])
    script = textwrap.dedent("""
        import os, signal, sys
        from warehouse.db.engine import make_read_engine, resolve_url
        import warehouse.lake.iceberg as iceberg
        from warehouse.lake.sync import Catalog, sync_lake
        real, calls = iceberg._publish_table, []
        def killing(*args, **kwargs):
            calls.append(1)
            if len(calls) == 6:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        iceberg._publish_table = killing
        sync_lake(make_read_engine(resolve_url(sys.argv[1])), sys.argv[2], iceberg=Catalog(sys.argv[3]))
    """)
    killed = subprocess.run([sys.executable, "-c", script, db_url, str(out), catalog], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert killed.returncode == -9, killed.stderr
    assert manifest(out)["sync"] == 2
    syncs = {}
    for name in ALL_TABLES:
        table = _catalog(catalog).load_table(("warehouse", name))
        syncs[name] = table.properties["warehouse.lake-sync"]
        for task in table.scan().plan_files():
            assert Path(task.file.file_path.removeprefix("file://")).is_file(), task.file.file_path
    assert set(syncs.values()) == {"1", "2"}  # five tables committed, the rest not
    iceberg_rows(catalog)  # every table reads

    info = sync_lake(engine, out, iceberg=Catalog(catalog))
    assert not info.changed and info.iceberg_tables == len(ALL_TABLES) - 5
    assert_published(out, catalog)
    assert set(stamps(out)) == {e["path"] for e in manifest(out)["files"]}


def test_a_namespace_without_a_catalog_is_refused(db_url, engine, tmp_path):
    query_fixture.build(engine)
    done = run_cli(db_url, "lake", "sync", str(tmp_path / "lake"), "--iceberg-namespace", "team")
    # One line, exit 1, as the command's other refusals of what --iceberg and --iceberg-namespace
    # name (a catalog it cannot open, a namespace engines cannot name): the rule is the API's own.
    assert done.returncode == 1 and done.stderr == ("Error: --iceberg-namespace names the namespace of --iceberg's "
                                                    "catalog: give --iceberg too\n")
    assert "Traceback" not in done.stderr and not (tmp_path / "lake").exists()
    with pytest.raises(ValueError, match="give iceberg too"):
        Warehouse(db_url).lake_sync(tmp_path / "lake", iceberg_namespace="team")
    assert not (tmp_path / "lake").exists()
