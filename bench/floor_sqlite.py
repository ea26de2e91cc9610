"""The whole-process floor of `warehouse ingest DATASET` into SQLite:

    python -m bench.floor_sqlite DATASET DB

Start-up, the dataset's Parquet shards read with pyarrow into the rows the warehouse stores
(bench.floors.normalize, through the ingest's own row reader), and those rows inserted with plain
sqlite3 executemany into DB, which already holds the warehouse's schema: what a hand-written
loader does, with no ledger, dedup lookups, provenance, summaries or conflict checks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bench import floors


def main() -> None:
    dataset, db = Path(sys.argv[1]), Path(sys.argv[2])
    started = time.perf_counter()
    rows = floors.normalize(sorted((dataset / "data").glob("*.parquet")), dataset.name)
    normalized = time.perf_counter()
    floors.sqlite_floor(rows, db)
    # Where the time goes, reading against writing (the benchmark times the whole process).
    print(f"read and normalized in {normalized - started:.2f} s, written in "
          f"{time.perf_counter() - normalized:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
