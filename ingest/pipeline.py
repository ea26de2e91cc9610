"""`ingest(engine, sources)`: resolve each source, skip units the ledger already has, and
write the rest one transaction per unit. The CLI is a thin layer over this function."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from sqlalchemy import Engine

from ingest import trace_pipeline
from ingest.process.worker import Reader, WorkerDied
from ingest.read import limits, traces
from ingest.read.shard_job import ShardError, ShardStart, Started, prepared_batches
from ingest.read.sources import Source, resolve
from ingest.report import (IngestStopped, Progress, Summary, fail, is_database_error, is_fatal, one_unit,
                           relative_unit)
from ingest.write import writer
from warehouse.db import statistics
from warehouse.errors import WarehouseError, first_line, interruption

HASH_CHUNK = 1 << 20


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
    labels: dict[str, str] | None = None,
    keep_going: bool = False,
    progress: Progress | None = None,
    warn: Callable[[str], None] = lambda _msg: None,
    reader: Reader | None = None,
    ahead: Started | None = None,
) -> Summary:
    """Load every unit of every source. A bad unit is reported (one line, in `summary.errors`
    and through `warn`) and written not at all; every other unit still loads. A bad row fails
    its unit, unless `keep_going`, which rejects and counts the row and loads the rest.

    Runs: rows without a run id belong to the run `run` (else the dataset's name); every run a
    source's rows belong to is then named `run` (replacing its name), else, where it has none,
    the dataset's name; and given `labels`, replacing their keys' values, and the labels its
    dataset card declares, where it has none for the key (writer.name_source_runs).

    `reader`: the reader process to use (else one of its own); `ahead`: a shard it was
    started on already (warehouse.api.Warehouse.ingest starts the first before the schema)."""
    limits.check()  # a mistyped limit fails the ingest before anything is read
    return load(engine, [_plan(spec) for spec in specs], run=run, labels=labels, keep_going=keep_going,
                progress=progress, warn=warn, reader=reader, ahead=ahead)


Plan = tuple[Source | WarehouseError, list[traces.TraceUnit]]


def load(engine: Engine, plans: list[Plan], *, run: str | None = None, labels: dict[str, str] | None = None,
         keep_going: bool = False, progress: Progress | None = None,
         warn: Callable[[str], None] = lambda _msg: None, reader: Reader | None = None,
         statistics: bool = True, ahead: Started | None = None) -> Summary:
    """`ingest`, of sources already resolved (`_plan`): what `ingest --watch` calls with the
    units that are ready each time it looks (ingest.watch), keeping its `reader` process between
    calls and refreshing the planner's `statistics` itself."""
    progress = progress or Progress()
    summary = Summary()
    started = time.perf_counter()
    # The totals the progress counts against, known before the first unit: every shard (bytes:
    # its file's size) and every trial directory (no bytes: its files are listed as it is read).
    shards = [shard for source, _ in plans if isinstance(source, Source) for shard in source.shards]
    trials = sum(unit.kind == "trial" for source, units in plans
                 if isinstance(source, Source) and source.kind == "traces" for unit in units)
    progress.plan(len(shards) + trials, sum(map(_file_size, shards)))
    try:
        with nullcontext(reader) if reader is not None else Reader() as reader:
            for source, units in plans:
                if isinstance(source, WarehouseError):
                    fail(summary, str(source), warn)
                    continue
                try:
                    if source.kind == "traces":
                        source_id = trace_pipeline.ingest_traces(engine, source, units, run, summary, progress, warn)
                        default_name = None  # a trace run is named for its job folder (or trial's folder)
                    else:
                        source_id = _ingest_parquet(engine, reader, source, run, keep_going, summary, progress, warn,
                                                    ahead)
                        default_name = source.name
                    ahead = None  # the first source's first shard, or none
                    if source_id is not None:
                        writer.name_source_runs(engine, source_id, run or default_name, rename=run is not None,
                                                labels=labels, source_labels=source.labels)
                except IngestStopped:  # a full disk, a lost connection: reported by one_unit
                    break
                except Exception as exc:  # the same between units (the ledger asked, a source recorded)
                    if (stop := interruption(exc)) is not None:
                        raise stop from None
                    if is_fatal(summary, warn, source.root, exc):
                        break
                    raise
    finally:
        progress.close()
    if summary.units_loaded and statistics:
        refresh_statistics(engine, summary)
    summary.seconds = time.perf_counter() - started
    return summary


def _plan(spec: str) -> Plan:
    """A source and, for trace directories, what was found under it; or why the spec names no
    source, reported when its turn comes (in the order the specs were given)."""
    try:
        source = resolve(spec)
    except WarehouseError as exc:
        return exc, []
    return source, list(traces.discover(source.root)) if source.kind == "traces" else []


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reported when the shard is hashed
        return 0


def refresh_statistics(engine: Engine, summary: Summary) -> None:
    """Once per ingest, after its last unit: the planner's statistics of the tables it changed
    (warehouse.db.statistics), so the first query after it is planned from what is there. The
    units are committed by then: a failure here is a warning, not a failed ingest."""
    try:
        summary.statistics_seconds = statistics.refresh(engine).seconds
    except Exception as exc:
        if (stop := interruption(exc)) is not None:
            raise stop from None
        if not is_database_error(exc):
            raise
        summary.notes.append(f"planner statistics not refreshed: {first_line(getattr(exc, 'orig', None) or exc)}")


def _ingest_parquet(engine, reader: Reader, source: Source, run, keep_going, summary: Summary, progress,
                    warn, ahead: Started | None = None) -> int | None:
    # A source new to the warehouse is recorded by its first unit that loads (writer.NewSource);
    # one it holds gets its revision as the Hub reports it now.
    source_id = writer.find_source(engine, source.kind, source.uri)
    if source_id is not None:
        source_id = writer.ensure_source(engine, source.kind, source.uri, source.name, source.revision, source.card)
    new = writer.NewSource(source.kind, source.uri, source.name, source.revision, source.card)
    run_key = run or source.name
    # A source never loaded before is new shard after shard: the reader starts on each while this
    # process hashes it and opens its unit, instead of after (the first batch comes that much
    # sooner). For any other source the hash decides first, so a re-ingest starts no reader (a
    # reader started ahead on its first shard is stopped by the next job, or at the end).
    new_source = source_id is None or not writer.has_loads(engine, source_id)
    for shard in source.shards:
        progress.unit(source.name, shard.name, _file_size(shard))
        if new_source and ahead is not None and ahead.shard == shard:
            items = ahead.items
        else:
            items = reader.run(_prepared_batches, shard, source.name, run) if new_source else None
        ahead = None
        try:
            content_hash = file_hash(shard)
        except OSError as exc:  # unreadable, or gone since the folder was listed
            fail(summary, f"{shard}: cannot read: {exc.strerror or exc}", warn)
            continue
        unit_name = relative_unit(shard, source.root)
        if source_id is not None and writer.is_loaded(engine, source_id, unit_name, content_hash):
            # (its started batches are dropped)
            summary.units_skipped += 1
            continue
        with one_unit(summary, warn, shard, lambda exc: _shard_error(shard, exc)):
            items = iter(items or reader.run(_prepared_batches, shard, source.name, run))
            start: ShardStart = next(items)  # the reader opened the shard and checked its schema
            done = 0
            with writer.unit(engine, new if source_id is None else source_id, unit_name, content_hash,
                             start.schema_json, start.columns) as unit:
                for batch in items:
                    if batch.rejected and not keep_going:
                        first = batch.rejected[0]
                        raise ShardError(f"{first.where}: {first.reason}")
                    unit.add_batch(batch, {run_key: run_key})
                    summary.bytes_read += batch.n_bytes
                    done += len(batch.trials) + len(batch.rejected)
                    progress.rows(done, start.n_rows)
            summary.add(unit.counts)
            source_id = unit.source_id
    return source_id


# The reader's job for a shard, looked up here when a job is sent (tests put another in its place).
_prepared_batches = prepared_batches


def _shard_error(shard: Path, exc: Exception) -> str | None:
    if isinstance(exc, ShardError):
        return str(exc)
    if isinstance(exc, UnicodeError):
        return f"{shard}: text that is not valid UTF-8 ({exc.reason})"
    if isinstance(exc, WorkerDied):  # killed, out of memory: this shard fails, the next gets a new reader
        return f"{shard}: {exc}"
    return None


__all__ = ["ingest", "Summary", "Progress"]
