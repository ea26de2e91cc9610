"""`export_tables`: every warehouse table as Parquet, for the engines that read Parquet where
it lies (DuckDB, Spark, Trino, pyarrow.dataset) once one database is not enough.

    OUT/<table>/run_id=<runs.id>/part-00000.parquet   trials, episodes, conversations,
                                                      conversation_turns, episode_loads, trial_loads
    OUT/<table>/part-00000.parquet                    runs, tasks, sources, loads, conflicts, messages
    OUT/views.sql                                     the tables and the warehouse's views, for DuckDB
    OUT/README.md                                     this layout and how to read it

Run-scoped tables are partitioned Hive style on the integer `runs.id`: an integer needs no
escaping (run keys hold '/' and other characters engines decode differently) and every engine
infers it as an integer. As Spark's `partitionBy` does, the partition column is not repeated
inside the files, so readers take it from the path (`trials.run_id` keeps its meaning; the other
run-scoped tables gain a `run_id` column). A run-scoped table with no rows gets one empty file
under `run_id=0/` (no run has id 0) so that readers still find its columns. Shared tables are
plain folders of files; large ones (messages) roll over into several files.

Types: int64, float64, string, binary (content_hash, content_raw), timestamp[us, UTC] for
datetimes, and JSON columns as JSON text (lossless: unsafe strings come back unwrapped and are
\\u-escaped where UTF-8 cannot hold them). Rows are streamed from the database and written in
row groups, so memory stays bounded.

The views (turns, turn_text, trial_summary) are written as SQL a reader runs, not as rows:
views.sql makes each table a DuckDB view over its files, then each of the warehouse's views with
the definition the warehouse holds. Their rows would repeat what the tables store: `turns` lists
every episode's turns, about n^2/2 rows for a trajectory of n steps exported episode by episode
(a 20,000-step trial: 200 million), and `turn_text` each of those with its message's text.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from sqlalchemy import Column, Connection, Engine, Float, Integer, LargeBinary, Select, String, Text, inspect, select

from warehouse.db import models
from warehouse.db.types import Json, UtcDateTime
from warehouse.errors import WarehouseError
from warehouse.outdir import staged_output

FETCH_ROWS = 1000
ROW_GROUP_ROWS = 128 * 1024
ROW_GROUP_BYTES = 64 << 20
PART_BYTES = 256 << 20  # a file rolls over past this much (uncompressed Arrow) data
COMPRESSION = "zstd"

TABLES = {t.name: t for t in models.metadata.sorted_tables}
TRIALS, EPISODES, CONVERSATIONS = TABLES["trials"], TABLES["episodes"], TABLES["conversations"]
# How each run-scoped table reaches trials.run_id: the joins, and the order rows are written in.
RUN_SCOPED: dict[str, tuple[list, list[str]]] = {
    "trials": ([], ["id"]),
    "trial_loads": ([(TRIALS, TRIALS.c.id == TABLES["trial_loads"].c.trial_id)], ["trial_id", "load_id"]),
    "episodes": ([(TRIALS, TRIALS.c.id == EPISODES.c.trial_id)], ["id"]),
    "episode_loads": ([(EPISODES, EPISODES.c.id == TABLES["episode_loads"].c.episode_id),
                       (TRIALS, TRIALS.c.id == EPISODES.c.trial_id)], ["load_id", "row_number"]),
    "conversations": ([(TRIALS, TRIALS.c.id == CONVERSATIONS.c.trial_id)], ["id"]),
    "conversation_turns": ([(CONVERSATIONS, CONVERSATIONS.c.id == TABLES["conversation_turns"].c.conversation_id),
                            (TRIALS, TRIALS.c.id == CONVERSATIONS.c.trial_id)], ["conversation_id", "idx"]),
}
PARTITION = "run_id"
EMPTY_PARTITION = 0
_SURROGATE = re.compile("[\ud800-\udfff]")
VIEWS_SQL = "views.sql"
# SQLite holds a view's whole statement, PostgreSQL its SELECT: what precedes the SELECT.
_CREATE_VIEW = re.compile(r"^\s*CREATE\s+VIEW\s+\S+\s+AS\s+", re.IGNORECASE)


@dataclass
class TablesInfo:
    out_dir: Path
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    replaced: list[str] = field(default_factory=list)  # what --force replaced in out_dir
    views: list[str] = field(default_factory=list)  # the warehouse's views views.sql defines


def export_tables(engine: Engine, out_dir: str | Path, *, force: bool = False) -> TablesInfo:
    """Write every table under `out_dir` (missing or empty unless `force`; with it, each table's
    folder and README.md are replaced and anything else is kept)."""
    out = Path(out_dir)
    info = TablesInfo(out_dir=out)
    with engine.connect() as conn, staged_output(out, force, info.replaced) as staging:
        run_ids = conn.execute(select(TABLES["runs"].c.id).order_by(TABLES["runs"].c.id)).scalars().all()
        for name in TABLES:
            folder = staging / name
            folder.mkdir()
            if name in RUN_SCOPED:
                for run_id in run_ids:
                    _write(conn, run_query(name, run_id), folder / f"{PARTITION}={run_id}", info, name)
                if name not in info.files:  # no rows in any run, or no runs at all
                    _write(conn, run_query(name, EMPTY_PARTITION), folder / f"{PARTITION}={EMPTY_PARTITION}",
                           info, name, keep_empty=True)
            else:  # runs, tasks, sources, loads, conflicts, messages, and any table added later
                _write(conn, shared_query(name), folder, info, name, keep_empty=True)
        views = view_definitions(conn)
        info.views = list(views)
        (staging / VIEWS_SQL).write_text(views_sql(views), encoding="utf-8")
        _write_readme(staging / "README.md", info)
    return info


# --- the views -----------------------------------------------------------------------------


def view_definitions(conn: Connection) -> dict[str, str]:
    """Each view of the warehouse, its SELECT as the database holds it (so any view a later
    revision adds or changes is written as it is), a view after the views it reads."""
    inspector = inspect(conn)
    selects = {name: _CREATE_VIEW.sub("", inspector.get_view_definition(name)).strip().rstrip(";").strip()
               for name in sorted(inspector.get_view_names())}
    ordered: dict[str, str] = {}
    while len(ordered) < len(selects):
        pending = [name for name in selects if name not in ordered]
        ready = [name for name in pending if not any(
            other != name and re.search(rf"\b{re.escape(other)}\b", selects[name]) for other in pending)]
        for name in ready or pending:  # no view is ready only if a name merely looks like a reference
            ordered[name] = selects[name]
    return ordered


def _table_source(name: str, files: list[str] | None = None) -> str:
    """DuckDB's reading of a table's files, relative to OUT: its folder's, or those listed."""
    where = f"'{name}/*/*.parquet'" if name in RUN_SCOPED else f"'{name}/*.parquet'"
    if files is not None:
        where = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"
    return f"read_parquet({where}, hive_partitioning = true)" if name in RUN_SCOPED else f"read_parquet({where})"


def views_sql(views: dict[str, str], files: dict[str, list[str]] | None = None,
              by: str = "warehouse export tables") -> str:
    """views.sql: every table as a view over its files (its folder's, or those `files` lists for
    it: a lake's manifest), then the warehouse's views over those."""
    tables = "\n".join(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM "
                       f"{_table_source(name, None if files is None else files[name])};" for name in TABLES)
    defined = "\n\n".join(f"CREATE OR REPLACE VIEW {name} AS\n{select};" for name, select in views.items())
    return f"""-- The warehouse's tables and views over this export, for DuckDB (written by `{by}`).
-- Its paths are relative to this folder: run it here (`duckdb wh.duckdb < views.sql`; in Python
-- `duckdb.connect().execute(open("views.sql").read())`), or first `SET file_search_path = 'OUT'`.
-- A DuckDB database keeps the views, which read the files again at each query.

-- Each table, a view over its files (a run-scoped table takes run_id from its folders' names).
{tables}

-- The warehouse's views, as the warehouse defines them.
{defined}
"""


def shared_query(name: str) -> Select:
    table = TABLES[name]
    return select(table).order_by(*table.primary_key.columns)


def run_query(name: str, run_id: int) -> Select:
    table = TABLES[name]
    joins, order = RUN_SCOPED[name]
    columns = [c for c in table.c if not (table is TRIALS and c.name == PARTITION)]
    stmt = select(*columns).select_from(table)
    for target, on in joins:
        stmt = stmt.join(target, on)
    return stmt.where(TRIALS.c.run_id == run_id).order_by(*(table.c[c] for c in order))


# --- writing (shared with `lake sync`, warehouse.lake.sync) -----------------------------------


@dataclass(frozen=True)
class Part:
    """One Parquet file written: its path on the file system it was written to, its rows, its
    size and the SHA-256 of its bytes (hashed as they were written, not read back)."""

    path: str
    rows: int
    bytes: int
    sha256: str


def write_parts(conn: Connection, stmt: Select, fs: pafs.FileSystem, folder: str, *, stem: str = "part",
                keep_empty: bool = False) -> list[Part]:
    """Stream the statement's rows into folder/<stem>-00000.parquet, <stem>-00001.parquet, …,
    each file one whole put (an object store needs no rename). No rows: no file, unless
    `keep_empty` (one file holding the schema)."""
    schema = pa.schema([pa.field(c.name, _arrow_type(c)) for c in stmt.selected_columns])
    writer = _PartWriter(fs, folder, schema, stem)
    result = conn.execution_options(yield_per=FETCH_ROWS).execute(stmt)
    for rows in result.partitions():
        writer.add(_batch(rows, stmt.selected_columns, schema))
    return writer.close() if writer.n_rows or keep_empty else []


def _write(conn: Connection, stmt: Select, folder: Path, info: TablesInfo, name: str,
           keep_empty: bool = False) -> None:
    """export_tables' use of write_parts: a local folder, rows and files counted in `info`."""
    parts = write_parts(conn, stmt, _LOCAL, str(folder), keep_empty=keep_empty)
    if parts:
        info.files[name] = info.files.get(name, 0) + len(parts)
    info.rows[name] = info.rows.get(name, 0) + sum(p.rows for p in parts)


_LOCAL = pafs.LocalFileSystem()


class _HashingStream:
    """A file-like object over an output stream that hashes and counts what goes through it."""

    def __init__(self, stream):
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.n_bytes = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.n_bytes += view.nbytes
        self._stream.write(data)
        return view.nbytes

    def tell(self) -> int:
        return self.n_bytes

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            self.closed = True


class _PartWriter:
    """Record batches into <stem>-00000.parquet, <stem>-00001.parquet, … in row groups of up to
    ROW_GROUP_ROWS rows or ROW_GROUP_BYTES, files of about PART_BYTES. Nothing is created
    until close() or the first full row group."""

    def __init__(self, fs: pafs.FileSystem, folder: str, schema: pa.Schema, stem: str):
        self.fs = fs
        self.folder = folder
        self.schema = schema
        self.stem = stem
        self.n_rows = 0
        self.parts: list[Part] = []
        self._writer: pq.ParquetWriter | None = None
        self._stream: _HashingStream | None = None
        self._path = ""
        self._file_rows = 0
        self._file_bytes = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        self._buffered_bytes += batch.nbytes
        self.n_rows += batch.num_rows
        if self._buffered_rows >= ROW_GROUP_ROWS or self._buffered_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._writer is None or self._file_bytes >= PART_BYTES:
            self._open()
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self._file_rows += table.num_rows
        self._file_bytes += self._buffered_bytes
        self._buffer, self._buffered_rows, self._buffered_bytes = [], 0, 0

    def _open(self) -> None:
        self._finish()
        if not self.parts:
            self.fs.create_dir(self.folder, recursive=True)
        self._path = f"{self.folder}/{self.stem}-{len(self.parts):05d}.parquet"
        self._stream = _HashingStream(self.fs.open_output_stream(self._path))
        self._writer = pq.ParquetWriter(self._stream, self.schema, compression=COMPRESSION)
        self.parts.append(Part(self._path, 0, 0, ""))  # completed by _finish
        self._file_rows = self._file_bytes = 0

    def _finish(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._stream.close()
        self.parts[-1] = Part(self._path, self._file_rows, self._stream.n_bytes, self._stream.sha256.hexdigest())
        self._writer = self._stream = None

    def close(self) -> list[Part]:
        """Write what is buffered (an empty table still gets a file holding its schema);
        returns the files written."""
        if self._buffer or self._writer is None:
            self._flush()
        self._finish()
        return self.parts


def _arrow_type(column: Column) -> pa.DataType:
    t = column.type
    if isinstance(t, Json):
        return pa.string()
    if isinstance(t, UtcDateTime):
        return pa.timestamp("us", tz="UTC")
    if isinstance(t, LargeBinary):
        return pa.binary()
    if isinstance(t, Integer):
        return pa.int64()
    if isinstance(t, Float):
        return pa.float64()
    if isinstance(t, (String, Text)):
        return pa.string()
    raise WarehouseError(f"column {column.table.name}.{column.name}: no Parquet type for {t!r}")


def _batch(rows, columns, schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for i, (column, f) in enumerate(zip(columns, schema)):
        values = [row[i] for row in rows]
        if isinstance(column.type, Json):
            values = [_json_text(v) for v in values]
        elif pa.types.is_binary(f.type):
            values = [bytes(v) if v is not None else None for v in values]
        arrays.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _json_text(value: Any) -> str | None:
    """JSON text, readable where it can be; lone surrogates (which UTF-8 cannot hold) are
    written as \\u escapes, so the text still decodes to the exact value."""
    if value is None:
        return None
    text = json.dumps(value, ensure_ascii=False)
    return text if _SURROGATE.search(text) is None else json.dumps(value)


def _write_readme(path: Path, info: TablesInfo) -> None:
    counts = "\n".join(f"| `{name}` | {'`run_id=<runs.id>/`' if name in RUN_SCOPED else ''} | {info.rows[name]} |"
                       for name in TABLES)
    path.write_text(f"""# Trajectory warehouse tables

Written by `warehouse export tables`: one folder per table, Parquet files inside. Run-scoped
tables are partitioned Hive style on the integer `runs.id` (`run_id=<id>/`); the partition column
is not stored inside the files. JSON columns hold JSON text; datetimes are UTC.

| table | partitioned by | rows |
|---|---|---|
{counts}

Reading it:

```sql
-- DuckDB
SELECT r.run_key, count(*) FROM read_parquet('trials/*/*.parquet', hive_partitioning = true) t
JOIN read_parquet('runs/*.parquet') r ON r.id = t.run_id GROUP BY 1;
```

```python
import pyarrow.dataset as ds
trials = ds.dataset("trials", partitioning="hive").to_table()
```

Spark: `spark.read.parquet("trials")` discovers `run_id` from the folder names.

`views.sql` makes each table a DuckDB view over its files and then defines the warehouse's views
over them ({', '.join(f'`{v}`' for v in info.views) or 'none'}), as the warehouse defines them: their
SQL, not their rows (`turns` repeats a conversation's turns for every episode of it). Run it in this
folder, and query them as in the warehouse:

```sql
-- duckdb wh.duckdb < views.sql, then:
SELECT ts.run_key, count(*), sum(t.cost_usd) FROM trial_summary ts JOIN trials t ON t.id = ts.trial_id GROUP BY 1;
```

A conversation's turns are stored once; an episode is its first `n_turns` turns (the view `turns`):

```sql
SELECT e.id AS episode_id, ct.idx, ct.role, ct.message_id, ct.extra
FROM read_parquet('episodes/*/*.parquet', hive_partitioning = true) e
JOIN read_parquet('conversation_turns/*/*.parquet', hive_partitioning = true) ct
  ON ct.conversation_id = e.conversation_id AND ct.idx < e.n_turns;
```
""", encoding="utf-8")
