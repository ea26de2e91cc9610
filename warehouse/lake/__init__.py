"""The lake: the warehouse's tables as Parquet files that DuckDB, Spark and other engines read
where they lie (`warehouse lake sync`, `warehouse export tables`), and the canned queries
answered there (`warehouse query NAME --lake OUT [--engine duckdb|spark]`).

This module stays cheap to import: the engines (duckdb, pyspark) and the SQL renderer (sqlglot)
are imported by a lake's session alone (warehouse.lake.engines)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warehouse.errors import ArgumentValueError
from warehouse.readonly import DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from warehouse.api import Result

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

    def query(self, name: str, /, *, run: str | Iterable[str] | None = None,
              task: str | Iterable[str] | None = None, model: str | Iterable[str] | None = None,
              agent: str | Iterable[str] | None = None,
              label: str | Iterable[str] | Mapping[str, str] | None = None,
              since: str | date | None = None, until: str | date | None = None,
              timeout: float = DEFAULT_TIMEOUT, **params: Any) -> Result:
        """A canned query answered on the lake, as warehouse.api.Warehouse.query answers it on a
        database: the same parameters, filters and Result (the queries' definitions over the
        lake's tables). `timeout` counts from the engine's start (Spark's JVM start excluded)."""
        from warehouse.api import _canned, _filters

        filters = _filters(run=run, task=task, model=model, agent=agent, label=label, since=since, until=until)
        return _canned(self, name, filters, timeout, params)
