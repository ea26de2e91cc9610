"""`warehouse db archive OUT.db`: a warehouse frozen for the archive. One compact SQLite file in
rollback-journal mode (no -wal or -shm beside it, ever: a reader on a read-only mount or under
another account opens it without writing a byte), with its SHA-256 beside it as `OUT.db.sha256`
in `sha256sum` format (`sha256sum -c OUT.db.sha256` checks it).

From SQLite, `VACUUM INTO` writes the snapshot compactly in one pass; from PostgreSQL the
warehouse is copied (warehouse.db.copy, checked table by table) into a new file, then compacted.
Either way the file is built beside OUT and renamed over it only when whole: a failed archive
leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from pathlib import Path

from sqlalchemy.engine import URL

from warehouse.db import schema
from warehouse.db.engine import make_read_engine, sqlite_path, sqlite_read_uri
from warehouse.errors import WarehouseError

CHUNK = 1 << 20


def archive(source_url: URL, out: Path, *, force: bool = False) -> str:
    """Write the archive of the warehouse at source_url to `out`; its SHA-256 (hex)."""
    out = Path(out)
    if out.exists() and not force:
        raise WarehouseError(f"{out} exists: pass --force to replace it")
    if not out.parent.is_dir():
        raise WarehouseError(f"{out.parent} is not a folder")
    schema.ensure_current(make_read_engine(source_url))
    source_file = sqlite_path(source_url) if source_url.get_backend_name() == "sqlite" else None
    if source_file is not None and out.exists() and out.resolve() == source_file.resolve():
        raise WarehouseError(f"{out} is the warehouse itself: archive it to another file")
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    partial = Path(name)
    partial.unlink()  # VACUUM INTO and the copy want a path with nothing there
    try:
        if source_file is not None:
            # Opened as every reader opens the file (nothing on disk changes), without query_only,
            # which refuses VACUUM INTO although it only reads this database.
            reader = sqlite3.connect(sqlite_read_uri(source_file), uri=True, isolation_level=None)
            try:
                reader.execute("VACUUM INTO ?", (str(partial),))
            finally:
                reader.close()
        else:
            from warehouse.db.copy import copy

            copy(source_url, URL.create("sqlite", database=str(partial)))
        _freeze(partial)
        digest = _sha256(partial)
        os.replace(partial, out)
    finally:
        for leftover in (partial, Path(f"{partial}-journal"), Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            leftover.unlink(missing_ok=True)
    Path(f"{out}.sha256").write_text(f"{digest}  {out.name}\n")
    return digest


def _freeze(path: Path) -> None:
    """Rollback-journal mode, compacted, every page checked."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
        (verdict,) = conn.execute("PRAGMA integrity_check").fetchone()
        if verdict != "ok":
            raise WarehouseError(f"the archive did not pass SQLite's integrity check: {verdict}")
    finally:
        conn.close()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
