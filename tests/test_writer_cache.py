"""The SQLite writer's page cache grows with the file (warehouse.db.engine._cache_kib): at 20×
the math profile the message-hash index no longer fit a fixed 16 MB and every unit read it back.
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


def test_the_cache_is_a_thirty_second_of_the_file_within_its_bounds(tmp_path):
    assert _cache_kib(None) == SQLITE_CACHE_KIB  # in memory
    assert _cache_kib(tmp_path / "missing.db") == SQLITE_CACHE_KIB  # a file the ingest creates
    assert _cache_kib(_sparse(tmp_path / "small.db", 100 << 20)) == SQLITE_CACHE_KIB
    assert _cache_kib(_sparse(tmp_path / "math20.db", 2600 << 20)) == (2600 << 20) // 32 // 1024  # 81.25 MB
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
