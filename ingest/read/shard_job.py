"""A shard as the reader process reads it (ingest.process.worker): first what the shard is (its
rows and its Arrow schema, as the ledger keeps it), then its prepared batches.

The writer process names this job without importing Arrow: only the reader reads Parquet, so
the writer's start-up never pays for pyarrow, and a first ingest can start the reader on its
first shard before the writer has imported the rest of itself or made the schema
(warehouse.api.Warehouse.ingest)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ShardError(Exception):
    """The shard cannot be read as a whole: str() is a one-line message naming file and field."""


@dataclass(frozen=True)
class ShardStart:
    """A shard's first item: how many rows it has, its Arrow schema as JSON (as the ledger keeps
    it) and its column names."""

    n_rows: int
    schema_json: str
    columns: frozenset[str]


@dataclass
class Started:
    """A shard the reader was started on ahead of the writer: its items, not yet taken."""

    shard: Path
    items: Iterator[Any]


def prepared_batches(shard: Path, run_name: str, run_override: str | None) -> Iterator[Any]:
    """The job: the shard's ShardStart, then its batches (ingest.shape.prepare.Batch)."""
    from ingest.read import hub
    from warehouse.arrow_json import schema_to_json

    hub.use_system_allocator()
    pf, info = hub.open_shard(shard)
    yield ShardStart(info.n_rows, schema_to_json(info.schema), frozenset(info.schema.names))
    yield from hub.read_batches(pf, shard, run_name, run_override)
