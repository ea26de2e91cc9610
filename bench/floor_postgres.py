"""The whole-process floor of `warehouse ingest DATASET` into PostgreSQL:

    python -m bench.floor_postgres DATASET CONNINFO

As bench.floor_sqlite, with the rows written by psycopg COPY into a database that already holds
the warehouse's schema."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bench import floors


def main() -> None:
    dataset, conninfo = Path(sys.argv[1]), sys.argv[2]
    started = time.perf_counter()
    rows = floors.normalize(sorted((dataset / "data").glob("*.parquet")), dataset.name)
    normalized = time.perf_counter()
    floors.postgres_floor(rows, conninfo)
    # Where the time goes, reading against writing (the benchmark times the whole process).
    print(f"read and normalized in {normalized - started:.2f} s, written in "
          f"{time.perf_counter() - normalized:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
