"""`export_tables`: every warehouse table as Parquet, for the engines that read Parquet where
it lies (DuckDB, Spark, Trino, pyarrow.dataset) once one database is not enough.

    OUT/<table>/run_id=<runs.id>/part-00000.parquet   trials, episodes, conversations,
                                                      conversation_turns, episode_loads, trial_loads
    OUT/<table>/part-00000.parquet                    runs, tasks, sources, loads, conflicts, messages
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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Column, Connection, Engine, Float, Integer, LargeBinary, Select, String, Text, select

from warehouse.db import models
from warehouse.db.types import Json, UtcDateTime
from warehouse.errors import WarehouseError
from warehouse.outdir import staged_output

FETCH_ROWS = 1000
ROW_GROUP_ROWS = 128 * 1024
ROW_GROUP_BYTES = 64 << 20
PART_BYTES = 256 << 20  # a file rolls over past this much (uncompressed Arrow) data
COMPRESSION = "zstd"

TABLES = {t.name: t for t in models.Base.metadata.sorted_tables}
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


@dataclass
class TablesInfo:
    out_dir: Path
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    replaced: list[str] = field(default_factory=list)  # what --force replaced in out_dir


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
                    _write(conn, _run_query(name, run_id), folder / f"{PARTITION}={run_id}", info, name)
                if name not in info.files:  # no rows in any run, or no runs at all
                    _write(conn, _run_query(name, EMPTY_PARTITION), folder / f"{PARTITION}={EMPTY_PARTITION}",
                           info, name, keep_empty=True)
            else:  # runs, tasks, sources, loads, conflicts, messages, and any table added later
                _write(conn, _shared_query(name), folder, info, name, keep_empty=True)
        _write_readme(staging / "README.md", info)
    return info


def _shared_query(name: str) -> Select:
    table = TABLES[name]
    return select(table).order_by(*table.primary_key.columns)


def _run_query(name: str, run_id: int) -> Select:
    table = TABLES[name]
    joins, order = RUN_SCOPED[name]
    columns = [c for c in table.c if not (table is TRIALS and c.name == PARTITION)]
    stmt = select(*columns).select_from(table)
    for target, on in joins:
        stmt = stmt.join(target, on)
    return stmt.where(TRIALS.c.run_id == run_id).order_by(*(table.c[c] for c in order))


# --- writing -------------------------------------------------------------------------------


def _write(conn: Connection, stmt: Select, folder: Path, info: TablesInfo, name: str,
           keep_empty: bool = False) -> None:
    """Stream the statement's rows into folder/part-*.parquet."""
    schema = pa.schema([pa.field(c.name, _arrow_type(c)) for c in stmt.selected_columns])
    writer = _PartWriter(folder, schema)
    result = conn.execution_options(yield_per=FETCH_ROWS).execute(stmt)
    for rows in result.partitions():
        writer.add(_batch(rows, stmt.selected_columns, schema))
    if writer.n_rows or keep_empty:
        info.files[name] = info.files.get(name, 0) + writer.close()
    info.rows[name] = info.rows.get(name, 0) + writer.n_rows


class _PartWriter:
    """Record batches into part-00000.parquet, part-00001.parquet, … in row groups of up to
    ROW_GROUP_ROWS rows or ROW_GROUP_BYTES, files of about PART_BYTES. Nothing is created
    until close() or the first full row group."""

    def __init__(self, folder: Path, schema: pa.Schema):
        self.folder = folder
        self.schema = schema
        self.n_rows = 0
        self._n_files = 0
        self._writer: pq.ParquetWriter | None = None
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
        self._file_bytes += self._buffered_bytes
        self._buffer, self._buffered_rows, self._buffered_bytes = [], 0, 0

    def _open(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.folder / f"part-{self._n_files:05d}.parquet", self.schema,
                                        compression=COMPRESSION)
        self._n_files += 1
        self._file_bytes = 0

    def close(self) -> int:
        """Write what is buffered (an empty table still gets a file holding its schema);
        returns the number of files."""
        if self._buffer or self._writer is None:
            self._flush()
        self._writer.close()
        return self._n_files


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

A conversation's turns are stored once; an episode is its first `n_turns` turns:

```sql
SELECT e.id AS episode_id, ct.idx, ct.role, ct.message_id, ct.extra
FROM read_parquet('episodes/*/*.parquet', hive_partitioning = true) e
JOIN read_parquet('conversation_turns/*/*.parquet', hive_partitioning = true) ct
  ON ct.conversation_id = e.conversation_id AND ct.idx < e.n_turns;
```
""", encoding="utf-8")
