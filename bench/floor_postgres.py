"""The whole-process floor of `warehouse ingest DATASET` into PostgreSQL:

    python -m bench.floor_postgres DATASET CONNINFO

As bench.floor_sqlite, with the rows written by psycopg COPY into a database that already holds
the warehouse's schema."""

from __future__ import annotations

import sys

from bench import floors

if __name__ == "__main__":
    floors.whole_process(floors.postgres_floor, sys.argv[2])
