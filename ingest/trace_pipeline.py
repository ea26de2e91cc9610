"""Harbor trace directories into the warehouse: one unit (and one transaction) per trial
directory, keyed in the ledger by the hash of the files the reader uses."""

from __future__ import annotations

from pathlib import Path

from ingest import traces, writer
from ingest.report import Progress, Summary, fail, one_unit, relative_unit
from ingest.sources import Source


# What a folder that is neither a Parquet dataset nor a trace directory was searched for.
NOTHING_TO_LOAD = ("nothing to load: no Parquet files (*.parquet, or a Hub snapshot's data/*.parquet) and no "
                   "Harbor trial directories (a result.json, config.json, agent/ or steps/) under it")


def ingest_traces(engine, source: Source, units: list[traces.TraceUnit], run: str | None, summary: Summary,
                  progress: Progress, warn) -> int | None:
    """Load the trial directories `traces.discover` found under the source (`units`); the source's
    id (None if it recorded none)."""
    if not units:  # a mistyped folder is an error, and leaves no trace in the warehouse
        fail(summary, f"{source.root}: {NOTHING_TO_LOAD}", warn)
        return None
    trials = [u for u in units if u.kind == "trial"]
    for unit in units:
        if unit.kind != "trial":
            fail(summary, f"{unit.path}: {unit.reason}", warn)
    if not trials:
        return None
    source_id = writer.ensure_source(engine, source.kind, source.uri, source.name)
    jobs_seen: set[Path] = set()
    for unit in trials:
        name = relative_unit(unit.path, source.root)
        progress.unit(source.name, "" if name == "." else name, 0)  # (a source that is one trial)
        _ingest_trial(engine, source, source_id, unit, run, summary, warn, jobs_seen)
    return source_id


def _ingest_trial(engine, source: Source, source_id: int, unit: traces.TraceUnit, run, summary: Summary,
                  warn, jobs_seen: set[Path]) -> None:
    with one_unit(summary, warn, unit.path, lambda exc: _trial_error(unit, exc)):
        content_hash = traces.hash_trial_dir(unit.path)
        unit_name = relative_unit(unit.path, source.root)
        if writer.is_loaded(engine, source_id, unit_name, content_hash):
            summary.units_skipped += 1
            return
        run_key = traces.run_key_for(unit, run)
        with traces.one_trial():  # what is read from here on is held until the trial is written
            trial = traces.read_trial(unit, run_key)
            job = None
            if unit.job_dir is not None and unit.job_dir not in jobs_seen:
                job = traces.read_job(unit.job_dir, run)
        with writer.unit(engine, source_id, unit_name, content_hash) as w:
            if job is not None:
                w.add_runs([job])
            w.add_trials([trial], {run_key: traces.run_name_for(unit, run)})
        if unit.job_dir is not None:
            jobs_seen.add(unit.job_dir)
        summary.add(w.counts)
        summary.trials_incomplete += trial.status == "incomplete"


def _trial_error(unit: traces.TraceUnit, exc: Exception) -> str | None:
    if isinstance(exc, traces.TraceError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{unit.path}: {exc.strerror or exc}"
    return None
