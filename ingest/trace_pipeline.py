"""Harbor trace directories into the warehouse: one unit (and one transaction) per trial
directory, keyed in the ledger by the hash of the files the reader uses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ingest.read import traces
from ingest.read.sources import Source
from ingest.report import Progress, Summary, fail, one_unit, relative_unit
from ingest.write import removal, writer


# What a folder that is neither a Parquet dataset nor a trace directory was searched for.
NOTHING_TO_LOAD = ("nothing to load: no rows files (*.parquet, *.jsonl, *.ndjson, a list in *.json, gzipped, or "
                   "a Hub snapshot's data/*) and no "
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
    # Recorded by its first unit that loads, if the warehouse does not hold it (writer.NewSource).
    source_id = writer.find_source(engine, source.kind, source.uri)
    jobs_seen: set[Path] = set()
    for unit in trials:
        name = relative_unit(unit.path, source.root)
        progress.unit(source.name, "" if name == "." else name, 0)  # (a source that is one trial)
        source_id = _ingest_trial(engine, source, source_id, unit, run, summary, warn, jobs_seen)
    for job_dir, job_trials in _whole_jobs(source, trials).items():
        source_id = _remove_deleted_trials(engine, source, source_id, job_dir, job_trials, run, summary, warn)
    return source_id


def _as_given(source: Source, source_id: int | None) -> int | writer.NewSource:
    """What writer.unit takes for the source: its id, or the source to record with the unit."""
    return writer.NewSource(source.kind, source.uri, source.name) if source_id is None else source_id


def _ingest_trial(engine, source: Source, source_id: int | None, unit: traces.TraceUnit, run, summary: Summary,
                  warn, jobs_seen: set[Path]) -> int | None:
    """The trial folder's unit; the source's id once a unit of it is in the warehouse."""
    with one_unit(summary, warn, unit.path, lambda exc: _trial_error(unit, exc)):
        content_hash = traces.hash_trial_dir(unit.path)
        unit_name = relative_unit(unit.path, source.root)
        if source_id is not None and writer.is_loaded(engine, source_id, unit_name, content_hash):
            summary.units_skipped += 1
            return source_id
        run_key = traces.run_key_for(unit, run)
        with traces.one_trial():  # what is read from here on is held until the trial is written
            trial = traces.read_trial(unit, run_key)
            job = None
            if unit.job_dir is not None and unit.job_dir not in jobs_seen:
                job = traces.read_job(unit.job_dir, run)
        with writer.unit(engine, _as_given(source, source_id), unit_name, content_hash) as w:
            if job is not None:
                w.add_runs([job])
            w.add_trials([trial], {run_key: traces.run_name_for(unit, run)})
        if unit.job_dir is not None:
            jobs_seen.add(unit.job_dir)
        summary.add(w.counts)
        summary.trials_incomplete += trial.status == "incomplete"
        summary.trials_atif_problems += "validation" in trial.detail
        return w.source_id
    return source_id


def _whole_jobs(source: Source, trials: list[traces.TraceUnit]) -> dict[Path, list[traces.TraceUnit]]:
    """The trials of each job folder the source holds whole (the source is the job's folder or
    a folder above it): only there does a trial folder missing say the job deleted it."""
    jobs: dict[Path, list[traces.TraceUnit]] = {}
    for unit in trials:
        if unit.job_dir is not None and (unit.job_dir == source.root or source.root in unit.job_dir.parents):
            jobs.setdefault(unit.job_dir, []).append(unit)
    return jobs


def _remove_deleted_trials(engine, source: Source, source_id: int | None, job_dir: Path,
                           trials: list[traces.TraceUnit], run, summary: Summary, warn) -> int | None:
    """After a job's trial folders: the unfinished trials stored from it that the job deleted
    (`harbor jobs resume` does, before it runs them again under new names; see ingest.write.removal),
    removed in a unit of their own named for the job's folder, which carries the job's facts
    as they are now. Nothing to remove writes nothing, so a re-ingest is a no-op."""
    with one_unit(summary, warn, job_dir, lambda exc: _read_error(job_dir, exc)):
        run_keys = set()
        for unit in trials:
            try:
                run_keys.add(traces.run_key_for(unit, run))
            except traces.TraceError:  # reported by its own unit
                continue
        with engine.connect() as conn:
            if not removal.deleted_trials(conn, run_keys, job_dir, ()):
                return source_id  # (the job's files are read only when a trial may be gone)
            job = traces.read_job(job_dir, run)
            counted = traces.trials_counted(job)
            gone = removal.deleted_trials(conn, run_keys, job_dir, counted)
        if not gone:
            return source_id
        identity = json.dumps([[t.trial_name, t.trial_id, t.loads] for t in gone])
        with writer.unit(engine, _as_given(source, source_id), relative_unit(job_dir, source.root),
                         hashlib.sha256(identity.encode()).hexdigest()) as w:
            gone = removal.deleted_trials(w.conn, run_keys, job_dir, counted)  # again, under the write lock
            if not gone:  # another ingest removed them first
                raise writer.AlreadyLoaded(job_dir)
            if job is not None:
                w.add_runs([job])
            w.flush()
            w.left_keys.update(removal.remove_trials(w.conn, gone))
            w.counts.removed += [t.trial_name for t in gone]
        summary.add(w.counts)
        return w.source_id
    return source_id


def record_job(engine, source: Source, job_dir: Path, run, summary: Summary, warn) -> None:
    """A job's facts (its config.json and result.json) stored in a unit of their own, named for its
    folder: what `ingest --watch` does when the job's files change after its trials were loaded
    (Harbor rewrites result.json as trials start and end, and last as the job ends). The writer
    keeps the reading of the job furthest on (writer.add_runs), whichever came first."""
    with one_unit(summary, warn, job_dir, lambda exc: _read_error(job_dir, exc)):
        job = traces.read_job(job_dir, run)
        if job is None:
            return
        digest = hashlib.sha256()
        for name in ("config.json", "result.json"):
            path = job_dir / name
            digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"\1"))
        source_id = writer.find_source(engine, source.kind, source.uri)
        unit_name = relative_unit(job_dir, source.root)
        if source_id is not None and writer.is_loaded(engine, source_id, unit_name, digest.hexdigest()):
            summary.units_skipped += 1
            return
        with writer.unit(engine, _as_given(source, source_id), unit_name, digest.hexdigest()) as w:
            w.add_runs([job])
        summary.add(w.counts)


def _trial_error(unit: traces.TraceUnit, exc: Exception) -> str | None:
    return _read_error(unit.path, exc)


def _read_error(path: Path, exc: Exception) -> str | None:
    if isinstance(exc, traces.TraceError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{path}: {exc.strerror or exc}"
    return None
