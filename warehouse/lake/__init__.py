"""The lake: the warehouse's tables as Parquet files that DuckDB, Spark and other engines read
where they lie (`warehouse lake sync`, `warehouse export tables`), and the canned queries
answered there (`warehouse query NAME --lake OUT [--engine duckdb|spark]`).

This module stays cheap to import: the engines (duckdb, pyspark) and the SQL renderer (sqlglot)
are imported by a lake's session alone (warehouse.lake.engines)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from warehouse.errors import ArgumentValueError

ENGINES = ("duckdb", "spark")


@dataclass(frozen=True)
class Lake:
    """A lake folder (what `export tables` or `lake sync` wrote) and the engine that reads it."""

    path: Path
    engine: str = "duckdb"

    def __init__(self, path: str | os.PathLike[str], engine: str = "duckdb"):
        engine = str(getattr(engine, "value", engine))
        if engine not in ENGINES:
            raise ArgumentValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        object.__setattr__(self, "path", Path(path))
        object.__setattr__(self, "engine", engine)
