"""The whole-process floor of `warehouse ingest DATASET` into PostgreSQL:

    python -m bench.floor_postgres DATASET CONNINFO

As bench.floor_sqlite, with the rows written by psycopg COPY into a database that already holds
the warehouse's schema."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import floors


def main() -> None:
    dataset, conninfo = Path(sys.argv[1]), sys.argv[2]
    rows = floors.normalize(sorted((dataset / "data").glob("*.parquet")), dataset.name)
    floors.postgres_floor(rows, conninfo)


if __name__ == "__main__":
    main()
