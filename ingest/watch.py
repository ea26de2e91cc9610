"""`warehouse ingest --watch`: follow trace directories and dataset folders while jobs write them.

Each trial directory is loaded once it has finished (Harbor writes a trial's result.json only at
its end) and its files have stopped changing for `settle` seconds; with `running`, a trial still
running is loaded as an incomplete snapshot as well (at most every SNAPSHOT_SECONDS), replaced
when it finishes, as a one-shot ingest replaces it. A dataset folder's shards are loaded as they
appear, once whole. Everything goes through `pipeline.load`, unit by unit, so the ledger, the
provenance and the result are a one-shot ingest's: when the folders stop changing, the warehouse
holds what `warehouse ingest` of them would give.

What changed is learned from the file system's own notices (inotify, through watchfiles), or by
polling where there are none (network file systems); either way a change only marks the units
under it to be looked at again: a unit is read when a stat walk of its files says it changed.
A lost connection to PostgreSQL (a restart) ends no watch: the units not yet loaded wait, and are
tried again after a back-off, until the server answers."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy import Engine

from ingest import pipeline
from ingest.process.worker import Reader
from ingest.read import traces
from ingest.read.sources import Source, resolve
from ingest.report import CONNECTION_LOST, IngestStopped, Summary
from ingest.write.writer import job_progress
from warehouse.errors import WarehouseError

SETTLE_SECONDS = 0.5  # a unit's files unchanged this long before it is read
SNAPSHOT_SECONDS = 10.0  # `running`: a running trial read again at most this often
STATISTICS_SECONDS = 60.0  # the planner's statistics refreshed at most this often
BACKOFF_SECONDS = (0.5, 1, 2, 4, 8, 15, 30)  # waits between tries while the database is away
TICK_MS = 250  # how often pending units are looked at when no notice comes
JOB_RETRIES = 20  # a unit failing on its job's files, tried again (a look apart) before said


@dataclass
class Totals:
    """What the watch has done so far: units loaded, skipped (already loaded) and failed, and
    each job's (trials done, its total) as its result.json says them."""

    loaded: int = 0
    skipped: int = 0
    failed: int = 0
    trials: int = 0
    incomplete: int = 0
    jobs: dict[Path, tuple[int | None, int | None]] = field(default_factory=dict)


@dataclass
class Event:
    """What the watch tells its caller, one per unit loaded, failed or removed, and per state."""

    kind: str  # "watching" (once, first) | "loaded" | "failed" | "skipped" | "waiting" | "reconnected"
    text: str
    totals: Totals  # as they are after it
    summary: Summary | None = None  # of the unit's load


@dataclass
class _Unit:
    source: Source
    trial: traces.TraceUnit | None  # a trial directory (or what discover could not use)
    shard: Path | None = None  # or a dataset's shard
    done: tuple | None = None  # the signature it was last loaded (or failed) at
    snapshot_at: float = 0.0  # when it was last loaded while running
    job_retries: int = 0  # tries failed on its job's files caught mid-write (_caught_mid_write)

    @property
    def path(self) -> Path:
        return self.trial.path if self.trial is not None else self.shard


class Watch:
    def __init__(self, engine: Engine, specs: list[str], *, run: str | None = None,
                 labels: dict[str, str] | None = None, keep_going: bool = False, running: bool = False,
                 poll: float | None = None, settle: float = SETTLE_SECONDS,
                 on_event: Callable[[Event], None] = lambda _event: None) -> None:
        self.engine = engine
        self.specs = specs
        self.run_name, self.labels, self.keep_going, self.running = run, labels, keep_going, running
        self.poll, self.settle = poll, settle
        self.on_event = on_event
        self.totals = Totals()
        self._units: dict[Path, _Unit] = {}
        self._dirty: set[Path] = set()  # units a notice named since they were last looked at
        self._waiting: set[Path] = set()  # units changed but not settled (or not finished)
        self._rescan = True  # a notice named something no known unit holds
        self._jobs: dict[Path, tuple] = {}  # each job folder: its files' signature when last read
        self._jobs_waiting = False  # a job's files changed, not settled yet (or not readable)
        self._job_retries: dict[Path, int] = {}  # looks at a job whose files did not read
        self._seen: dict[Path, tuple[tuple, float]] = {}  # a unit's (or job's) signature, and since when
        self._said: set[str] = set()  # sources that could not be resolved, said once each
        self._stop = threading.Event()
        self._statistics_at = 0.0
        self._changed = False  # units loaded since the statistics were last refreshed

    # --- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> Totals:
        """Look, load what is ready, and wait for notices, until `stop` is set."""
        import watchfiles

        self._stop = stop
        roots = [Path(spec).expanduser().resolve() for spec in self.specs]
        with Reader() as reader:
            self._reader = reader
            force = self.poll is not None
            notices = watchfiles.watch(*roots, watch_filter=None, debounce=TICK_MS, step=50, stop_event=stop,
                                       rust_timeout=TICK_MS, yield_on_timeout=True,
                                       force_polling=force, poll_delay_ms=int((self.poll or 0.3) * 1000))
            following = False
            for changes in notices:
                if not following:  # the watcher is set up by its first answer: from now on nothing is missed
                    following = True
                    how = f"polling every {self.poll:g} s" if force else "change notices"
                    self._say("watching", f"watching {', '.join(self.specs)} ({how}); Ctrl-C to stop")
                    self._rescan = True
                for _change, name in changes:
                    self._notice(Path(name))
                if stop.is_set():
                    break
                if self._rescan or changes or self._waiting or self._jobs_waiting:
                    self._look()
            self._refresh_statistics(force=True)
        return self.totals

    def _notice(self, path: Path) -> None:
        """A file or folder changed: mark the unit that holds it (or its job) to be looked at."""
        if path.parent in self._jobs and path.name in ("config.json", "result.json"):
            return  # a job's own files: _record_jobs looks at them each time
        for parent in (path, *path.parents):
            if parent in self._units:
                self._dirty.add(parent)
                return
        self._rescan = True  # a new trial folder or shard, or one removed

    def _look(self) -> None:
        """Find what changed, load what is ready: one unit at a time, each its own ingest."""
        if self._rescan:
            self._rescan = False
            self._discover()
        candidates = self._dirty | self._waiting
        self._dirty, self._waiting = set(), set()
        now = time.time()
        ready = []
        for path in sorted(candidates):
            unit = self._units.get(path)
            if unit is None:
                continue
            state = self._state(unit, now)
            if state is not None:
                ready.append((unit, state))
        for unit, signature in ready:
            self._load(unit, signature)
        self._record_jobs()
        self._refresh_statistics()

    def _discover(self) -> None:
        """Every unit under the sources as they are now; units gone are forgotten."""
        seen: set[Path] = set()
        for spec in self.specs:
            try:
                source = resolve(spec)
            except WarehouseError as exc:  # said once, not at every look (a dataset's bad card)
                if str(exc) not in self._said:
                    self._said.add(str(exc))
                    self.totals.failed += 1
                    self._say("failed", str(exc))
                continue
            if source.kind == "traces":
                found = [_Unit(source, unit) for unit in traces.discover(source.root)]
            else:
                found = [_Unit(replace(source, shards=[shard]), None, shard) for shard in source.shards]
            for unit in found:
                seen.add(unit.path)
                known = self._units.get(unit.path)
                # New, or seen otherwise now (a folder that became a trial, a trial in a job).
                if known is None or known.trial != unit.trial:
                    self._units[unit.path] = unit
                    self._waiting.add(unit.path)
                if unit.trial is not None and unit.trial.job_dir is not None:
                    self._jobs.setdefault(unit.trial.job_dir, ())
        for gone in set(self._units) - seen:
            del self._units[gone]
            self._seen.pop(gone, None)

    def _state(self, unit: _Unit, now: float) -> tuple | None:
        """The unit's signature if it is ready to be loaded now, else None (and it waits, if it
        may become ready without another notice: not settled, or a running snapshot not due)."""
        try:
            files = _signature(unit.path)
        except OSError:  # gone between the notice and now: a rescan forgets it
            self._rescan = True
            return None
        is_trial = unit.trial is not None and unit.trial.kind == "trial"
        signature = (files, _job_result(unit.trial) if is_trial else None)
        if signature == unit.done:
            return None
        if not self._settled(unit.path, signature, now):
            self._waiting.add(unit.path)
            return None
        if is_trial and not _finished(unit.trial):
            if not self.running:
                return None  # its result.json, when written, is a notice
            if now - unit.snapshot_at < SNAPSHOT_SECONDS:
                self._waiting.add(unit.path)
                return None
        return signature

    def _settled(self, key: Path, signature: tuple, now: float) -> bool:
        """Whether `signature` is what looks at least `settle` seconds apart have both seen: a
        file still being written (or copied, its old modification time kept) is not read yet."""
        seen, since = self._seen.get(key, (None, now))
        if seen != signature:
            self._seen[key] = (signature, now)
            return False
        return now - since >= self.settle

    def _load(self, unit: _Unit, signature: tuple) -> None:
        if unit.trial is not None and unit.trial.kind == "unsupported":
            if unit.job_retries < JOB_RETRIES:  # a job's result.json mid-write reads as no job
                unit.job_retries += 1
                self._waiting.add(unit.path)
                self._rescan = True  # (discover tells again what the folder is)
                return
            unit.done = signature
            self.totals.failed += 1
            self._say("failed", f"{unit.trial.path}: {unit.trial.reason}")
            return
        plan = (unit.source, [unit.trial] if unit.trial is not None else [])
        for attempt in itertools.count():
            errors: list[str] = []
            summary = pipeline.load(self.engine, [plan], run=self.run_name, labels=self.labels,
                                    keep_going=self.keep_going, warn=errors.append, reader=self._reader,
                                    statistics=False)
            if summary.stopped != CONNECTION_LOST:
                break
            if not self._wait_for_database(unit.path, attempt):
                return  # stopping: the unit stays to be loaded by the next watch or ingest
        if attempt:
            self._say("reconnected", f"{unit.path}: the database answers again")
        unit.done = signature
        finished = unit.trial is None or _finished(unit.trial)
        if not finished:
            unit.snapshot_at = time.time()
        self._count(unit, summary, errors)

    def _wait_for_database(self, where: Path, attempt: int) -> bool:
        """After a lost connection: wait (longer each try), with a fresh pool. False if the
        watch is being stopped meanwhile."""
        wait = BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)]
        self._say("waiting", f"{where}: {CONNECTION_LOST}; trying again in {wait:g} s")
        self.engine.dispose()  # its pooled connections died with the server
        return not self._stop.wait(wait)

    def _count(self, unit: _Unit, summary: Summary, errors: list[str]) -> None:
        totals = self.totals
        totals.trials += summary.trials
        totals.incomplete += summary.trials_incomplete
        if errors and self._caught_mid_write(unit, errors):
            return
        unit.job_retries = 0
        if errors:
            totals.failed += 1
            for message in errors:
                self._say("failed", message, summary)
        elif summary.units_loaded:
            totals.loaded += 1
            self._changed = True
            what = "a running trial's snapshot" if summary.trials_incomplete else (
                f"{summary.trials} trial{'s' if summary.trials != 1 else ''}" if unit.trial is not None
                else f"{summary.rows} rows")
            removed = f", {summary.trials_removed} removed" if summary.trials_removed else ""
            self._say("loaded", f"{unit.path}: {what}, {summary.episodes_new} new episodes{removed}", summary)
        else:
            totals.skipped += 1
            self._say("skipped", f"{unit.path}: already loaded", summary)

    def _caught_mid_write(self, unit: _Unit, errors: list[str]) -> bool:
        """Whether the unit failed only on its job's own files, which Harbor rewrites in place as
        each trial starts and ends (a reader can catch one empty or cut short): then it is tried
        again at the next look, up to JOB_RETRIES times, before the failure is said."""
        if unit.trial is None or unit.job_retries >= JOB_RETRIES:
            return False
        # (a job whose result.json is caught empty is no job to discover: the folder above)
        job_dir = unit.trial.job_dir or Path(unit.trial.path).parent
        files = tuple(str(job_dir / name) for name in ("config.json", "result.json"))
        if not all(message.startswith(files) for message in errors):
            return False
        unit.job_retries += 1
        unit.done = None
        self._waiting.add(unit.path)
        return True

    def _record_jobs(self) -> None:
        """A job folder whose files changed since they were read: its facts (finished, trials
        done) stored again, as a one-shot ingest reading them now would store them; and its
        trials whose result the job's file now gives otherwise (traces.job_result_of) looked at."""
        from ingest import trace_pipeline

        self._jobs_waiting = False
        for job_dir, before in list(self._jobs.items()):
            try:
                now = _signature(job_dir / "result.json", job_dir / "config.json")
            except OSError:
                continue
            if now == before:
                continue
            counts = _job_counts(job_dir)  # shown as it is now: a running job's file never settles
            if counts is not None:
                self.totals.jobs[job_dir] = counts
            if not self._settled(job_dir, now, time.time()):
                self._jobs_waiting = True
                continue
            trials = [u for u in self._units.values() if u.trial is not None and u.trial.job_dir == job_dir]
            if not trials:
                continue
            self._waiting.update(u.path for u in trials if u.done is not None and u.done[1] != _job_result(u.trial))
            errors: list[str] = []
            summary = Summary()
            try:
                trace_pipeline.record_job(self.engine, trials[0].source, job_dir, self.run_name, summary,
                                          errors.append)
            except IngestStopped:  # the database is away: the job is read again at the next look
                self._jobs_waiting = True
                continue
            if errors and self._job_retries.get(job_dir, 0) < JOB_RETRIES:  # caught mid-write, as trials are
                self._job_retries[job_dir] = self._job_retries.get(job_dir, 0) + 1
                self._jobs_waiting = True
                continue
            self._job_retries.pop(job_dir, None)
            self._jobs[job_dir] = now
            self._changed |= bool(summary.units_loaded)
            self.totals.failed += bool(errors)
            for message in errors:
                self._say("failed", message, summary)

    def _refresh_statistics(self, force: bool = False) -> None:
        if self._changed and (force or time.monotonic() - self._statistics_at > STATISTICS_SECONDS):
            self._changed = False
            self._statistics_at = time.monotonic()
            pipeline.refresh_statistics(self.engine, Summary())

    def _say(self, kind: str, text: str, summary: Summary | None = None) -> None:
        self.on_event(Event(kind, text, replace(self.totals, jobs=dict(self.totals.jobs)), summary))


def _signature(*paths: Path) -> tuple:
    """Every file under the paths with its size and modification time: what says a unit changed
    without reading it."""
    files: list[tuple] = []
    for path in paths:
        if not os.path.isdir(path):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                files.append((str(path), None))
                continue
            files.append((str(path), st.st_size, st.st_mtime_ns))
            continue
        for folder, dirs, names in os.walk(path):
            dirs.sort()
            for name in sorted(names):
                try:
                    st = os.stat(os.path.join(folder, name), follow_symlinks=False)
                except FileNotFoundError:
                    continue
                files.append((folder, name, st.st_size, st.st_mtime_ns))
    return tuple(files)


def _finished(unit: traces.TraceUnit) -> bool:
    """Harbor writes a trial's result.json once, when the trial ends."""
    return (Path(unit.path) / "result.json").is_file()


def _job_result(unit: traces.TraceUnit):
    """The job result.json's word on this trial (its `result` when exported): part of what the
    ledger keys the trial by (traces.hash_trial_dir), so a change to it is a change to the trial."""
    try:
        return traces.job_result_of(unit.path)
    except (OSError, traces.TraceError):
        return None


def _job_counts(job_dir: Path) -> tuple[int, int | None] | None:
    """(trials done, the job's total) from its result.json, as far as Harbor writes them."""
    try:
        job = traces.read_job(job_dir)
    except (OSError, traces.TraceError):
        return None
    detail = (job.detail if job is not None else None) or {}
    total = detail.get("n_total_trials")
    return job_progress(detail)[1], total if isinstance(total, int) else None


def sources_of(specs: Iterable[str]) -> list[str]:
    """The folders a watch follows: each must exist (a file is watched through its folder)."""
    out = []
    for spec in specs:
        path = Path(spec).expanduser()
        if not path.exists():
            raise WarehouseError(f"{spec}: no such file or directory (--watch follows local folders)")
        out.append(str(path))
    return out
