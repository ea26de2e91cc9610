"""The whole-process floor of `warehouse ingest DATASET` into SQLite:

    python -m bench.floor_sqlite DATASET DB

Start-up, the dataset's Parquet shards read with pyarrow into the rows the warehouse stores
(bench.floors.normalize, through the ingest's own row reader), and those rows inserted with plain
sqlite3 executemany into DB, which already holds the warehouse's schema: what a hand-written
loader does, with no ledger, dedup lookups, provenance, summaries or conflict checks."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import floors

if __name__ == "__main__":
    floors.whole_process(floors.sqlite_floor, Path(sys.argv[2]))
