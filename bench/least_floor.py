"""The least work that stores a Hub dataset, and what a user would write with pandas, each a
whole process (issue 31's floors for `warehouse ingest`):

    python -m bench.least_floor least  DATASET TARGET
    python -m bench.least_floor pandas DATASET TARGET

TARGET is a SQLite file or a PostgreSQL URL. Both create their own tables (as a first
`warehouse ingest` creates its schema) and load every shard in one transaction.

least: pyarrow reads each shard's row groups; a row becomes an `episodes` row holding its
scalar columns as they are, each message of its conversation a `turns` row (episode, idx, role,
content) with its text inline. Inserted with sqlite3 executemany or psycopg COPY into plain
tables: no keys, no indexes, no dedup, no ledger, nothing parsed. No loader that keeps every
row can do less.

pandas: read_parquet, explode the conversations, to_sql (SQLAlchemy for PostgreSQL, as
pandas asks), the way a notebook does it.

bench.floors' floors are a different measure: our own row reader's rows, written bare.
"""

from __future__ import annotations

import sys
from pathlib import Path

EPISODE_COLUMNS_SQL = "id INTEGER, {columns}"
TURN_COLUMNS = ("episode_id", "idx", "role", "content")


def _shards(dataset: Path) -> list[Path]:
    return sorted((dataset / "data").glob("*.parquet"))


def _is_postgres(target: str) -> bool:
    return target.startswith(("postgresql:", "postgres:"))


def least(dataset: Path, target: str) -> None:
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    shards = _shards(dataset)
    scalars = [f.name for f in pq.read_schema(shards[0]) if f.name != "conversations"]
    episodes_sql = f"CREATE TABLE episodes (id BIGINT, {', '.join(f'{c} TEXT' for c in scalars)})"
    turns_sql = "CREATE TABLE turns (episode_id BIGINT, idx INTEGER, role TEXT, content TEXT)"

    def batches():
        """(episode rows, turn rows) of each row group, as Python tuples."""
        next_id = 1
        for shard in shards:
            pf = pq.ParquetFile(shard)
            for i in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(i)
                ids = range(next_id, next_id + table.num_rows)
                next_id += table.num_rows
                episodes = list(zip(ids, *(table.column(c).to_pylist() for c in scalars)))
                conversations = table.column("conversations").combine_chunks()
                parents = pc.list_parent_indices(conversations).to_numpy()
                offsets = conversations.offsets.to_numpy()
                flat = pc.list_flatten(conversations)
                # A message's place in its conversation: its position less its list's start.
                idx = np.arange(len(flat)) - (offsets[parents] - offsets[0])
                turns = list(zip((parents + ids.start).tolist(), idx.tolist(),
                                 flat.field("role").to_pylist(), flat.field("content").to_pylist()))
                yield episodes, turns

    if _is_postgres(target):
        import psycopg

        with psycopg.connect(target) as conn, conn.cursor() as cur:
            cur.execute(episodes_sql)
            cur.execute(turns_sql)
            for episodes, turns in batches():
                with cur.copy("COPY episodes FROM STDIN") as copy:
                    for row in episodes:
                        copy.write_row(row)
                with cur.copy(f"COPY turns ({', '.join(TURN_COLUMNS)}) FROM STDIN") as copy:
                    for row in turns:
                        copy.write_row(row)
    else:
        import sqlite3

        # sqlite3's defaults (a rollback journal, which a new file's pages never enter): the
        # warehouse's WAL lets readers in while it writes, at the price of writing each page
        # twice, which the least work need not pay.
        conn = sqlite3.connect(target, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute(episodes_sql)
        conn.execute(turns_sql)
        insert_episode = f"INSERT INTO episodes VALUES ({', '.join('?' * (len(scalars) + 1))})"
        for episodes, turns in batches():
            conn.executemany(insert_episode, episodes)
            conn.executemany("INSERT INTO turns VALUES (?, ?, ?, ?)", turns)
        conn.execute("COMMIT")
        conn.close()


def pandas(dataset: Path, target: str) -> None:
    if _is_postgres(target):
        from sqlalchemy import create_engine

        con = create_engine(target.replace("postgresql:", "postgresql+psycopg:", 1))
    else:
        import sqlite3

        con = sqlite3.connect(target)
    pandas_into(_shards(dataset), con)
    if hasattr(con, "commit"):
        con.commit()
        con.close()
    else:
        con.dispose()


def pandas_into(shards: list[Path], con) -> None:
    """Each shard read by pandas, its conversations exploded into `turns`, its other columns
    into `episodes`, through `to_sql` on `con` (a sqlite3 connection or a SQLAlchemy engine)."""
    import pandas as pd

    for shard in shards:
        df = pd.read_parquet(shard)
        meta = df.drop(columns=["conversations"])
        turns = df[["trial_name", "episode", "conversations"]].explode("conversations", ignore_index=True)
        turns = turns.dropna(subset=["conversations"])
        turns["idx"] = turns.groupby(["trial_name", "episode"]).cumcount()
        turns["role"] = turns["conversations"].map(lambda m: m["role"])
        turns["content"] = turns["conversations"].map(lambda m: m["content"])
        turns.drop(columns=["conversations"]).to_sql("turns", con, if_exists="append", index=False,
                                                     chunksize=10_000)
        meta.to_sql("episodes", con, if_exists="append", index=False, chunksize=10_000)


if __name__ == "__main__":
    method, dataset, target = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    {"least": least, "pandas": pandas}[method](dataset, target)
