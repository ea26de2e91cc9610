"""The SQLite writer's page cache grows with the file (warehouse.db.engine._cache_kib): at 20×
the math profile the message-hash index no longer fit a fixed 16 MB (nor, past the tenth unit, a
thirty-second of the file) and every unit read it back.
SQLite only: PostgreSQL's buffers are the server's (its shared_buffers)."""

from __future__ import annotations

import shutil

from warehouse.db.engine import SQLITE_CACHE_KIB, SQLITE_CACHE_MAX_KIB, _cache_kib, make_engine
from warehouse.db.engine import resolve_url
from warehouse.db.session import write_transaction


def _sparse(path, size: int):
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_the_cache_is_a_sixteenth_of_the_file_within_its_bounds(tmp_path):
    assert _cache_kib(None) == SQLITE_CACHE_KIB  # in memory
    assert _cache_kib(tmp_path / "missing.db") == SQLITE_CACHE_KIB  # a file the ingest creates
    assert _cache_kib(_sparse(tmp_path / "small.db", 200 << 20)) == SQLITE_CACHE_KIB
    assert _cache_kib(_sparse(tmp_path / "math20.db", 2600 << 20)) == (2600 << 20) // 16 // 1024  # 162.5 MB
    assert _cache_kib(_sparse(tmp_path / "huge.db", 64 << 30)) == SQLITE_CACHE_MAX_KIB


def test_each_write_transaction_sizes_the_cache_for_the_file_as_it_is(tmp_path, sqlite_template):
    path = tmp_path / "warehouse.db"
    shutil.copyfile(sqlite_template, path)
    engine = make_engine(resolve_url(str(path)))
    try:
        with write_transaction(engine) as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -SQLITE_CACHE_KIB
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA cache_size = -1")  # what an earlier, smaller file had set
        with write_transaction(engine) as conn:
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -_cache_kib(path)
    finally:
        engine.dispose()


def test_a_first_ingest_writes_a_new_file_once_then_switches_it_to_wal(tmp_path):
    """A new file is loaded under a rollback journal (its pages written once, no WAL to
    checkpoint) and is in WAL mode when the ingest ends; a file that exists is written in WAL."""
    import contextlib
    import sqlite3

    from ingest.write import writer
    from warehouse.api import Warehouse

    path = tmp_path / "new.db"
    modes = []
    real_unit = writer.unit

    @contextlib.contextmanager
    def watched_unit(*args, **kwargs):  # the journal each unit is written under
        with real_unit(*args, **kwargs) as unit:
            conn = sqlite3.connect(path)
            modes.append(conn.execute("PRAGMA journal_mode").fetchone()[0])
            conn.close()
            yield unit

    def ingest(source):
        modes.clear()
        writer.unit = watched_unit
        try:
            Warehouse(str(path)).ingest(source)
        finally:
            writer.unit = real_unit
        return set(modes)

    assert ingest("examples/sample") == {"delete"}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT count(*) FROM trials").fetchone()[0] > 0
    conn.close()
    assert not (tmp_path / "new.db-journal").exists()
    shutil.copytree("examples/sample", tmp_path / "another")  # another source: loaded again
    assert ingest(tmp_path / "another") == {"wal"}
