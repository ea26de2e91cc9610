"""`ingest(engine, sources)`: resolve each source, skip units the ledger already has, and
write the rest one transaction per unit. The CLI is a thin layer over this function."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from ingest import hub, writer
from ingest.sources import Source, resolve
from warehouse.errors import WarehouseError

HASH_CHUNK = 1 << 20


@dataclass
class Summary:
    units_loaded: int = 0
    units_skipped: int = 0
    units_failed: int = 0
    rows: int = 0
    trials: int = 0
    trials_incomplete: int = 0
    episodes_new: int = 0
    episodes_duplicate: int = 0
    conflicts: int = 0
    rows_rejected: int = 0
    turns: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, counts: writer.UnitCounts) -> None:
        self.units_loaded += 1
        self.rows += counts.n_rows + counts.n_rejected
        self.trials += counts.n_trials
        self.episodes_new += counts.n_episodes_new
        self.episodes_duplicate += counts.n_episodes_duplicate
        self.conflicts += counts.n_conflicts
        self.rows_rejected += counts.n_rejected
        self.turns += counts.n_turns
        self.notes += counts.conflicts
        self.notes += [f"{r.where}: rejected: {r.reason}" for r in counts.rejected]

    def lines(self) -> list[str]:
        out = [
            f"units: {self.units_loaded} loaded, {self.units_skipped} skipped (already loaded), "
            f"{self.units_failed} failed",
            f"episodes: {self.episodes_new} new, {self.episodes_duplicate} duplicate, "
            f"{self.conflicts} conflicting; rows rejected: {self.rows_rejected}",
            f"trials: {self.trials} in loaded units ({self.trials_incomplete} incomplete); "
            f"turns written: {self.turns}; {self.seconds:.1f}s",
        ]
        return out


class Progress:
    """What the pipeline reports as it goes; the CLI draws it, tests ignore it."""

    def start(self, label: str, total_rows: int) -> None: ...
    def advance(self, rows: int, nbytes: int) -> None: ...
    def finish(self) -> None: ...


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def ingest(
    engine: Engine,
    specs: list[str],
    *,
    run: str | None = None,
    keep_going: bool = False,
    progress: Progress | None = None,
    warn: Callable[[str], None] = lambda _msg: None,
) -> Summary:
    """Load every unit of every source. Without `keep_going` the first bad unit stops the run
    (units already committed stay); with it, bad rows are rejected and counted, bad units are
    skipped, and the rest loads. Errors are collected in the summary, one line each."""
    progress = progress or Progress()
    summary = Summary()
    started = time.perf_counter()
    try:
        for spec in specs:
            source = resolve(spec)
            if source.kind == "traces":
                from ingest import trace_pipeline

                trace_pipeline.ingest_traces(engine, source, run, keep_going, summary, progress, warn)
            else:
                _ingest_parquet(engine, source, run, keep_going, summary, progress, warn)
    except _Stop:
        pass
    summary.seconds = time.perf_counter() - started
    return summary


class _Stop(Exception):
    """The first failure ends the run when not keeping going."""


def fail(summary: Summary, message: str, keep_going: bool, warn: Callable[[str], None]) -> None:
    summary.units_failed += 1
    summary.errors.append(message)
    warn(message)
    if not keep_going:
        raise _Stop


def _ingest_parquet(engine, source: Source, run, keep_going, summary, progress, warn) -> None:
    source_id = writer.ensure_source(engine, source.kind, source.uri, source.name, source.revision, source.card)
    run_key = run or source.name
    for shard in source.shards:
        content_hash = file_hash(shard)
        if writer.is_loaded(engine, source_id, content_hash):
            summary.units_skipped += 1
            continue
        try:
            pf, info = hub.open_shard(shard)
            progress.start(shard.name, info.n_rows)
            with writer.unit(engine, source_id, _relative(shard, source.root), content_hash,
                             hub.schema_json(info.schema)) as unit:
                for trials, rejected, nbytes in hub.read_rows(pf, shard, source.name, run):
                    if rejected and not keep_going:
                        first = rejected[0]
                        raise hub.ShardError(f"{first.where}: {first.reason}")
                    for r in rejected:
                        unit.reject(r)
                    unit.add_trials(trials, {run_key: run_key})
                    summary.bytes_read += nbytes
                    progress.advance(len(trials) + len(rejected), nbytes)
            summary.add(unit.counts)
        except writer.AlreadyLoaded:
            summary.units_skipped += 1  # another ingest committed it meanwhile
        except hub.ShardError as exc:
            fail(summary, str(exc), keep_going, warn)
        except UnicodeError as exc:
            fail(summary, f"{shard}: text that is not valid UTF-8 ({exc.reason})", keep_going, warn)
        finally:
            progress.finish()


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


__all__ = ["ingest", "Summary", "Progress", "WarehouseError"]
