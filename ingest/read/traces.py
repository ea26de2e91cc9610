"""Read Harbor trace directories (jobs, trials, RL `trace_jobs/`) into `ingest.shape.records`.

The reader knows the on-disk formats described in harbor-formats.md (§1 layout, §2 result.json
and config.json, §3 ATIF, §4.3-4.5 the exporter's column rules, §6 edge cases); it never touches
the database. Public API:

- `discover(root)`: the trial directories (and the things that could not be used) under a path;
- `hash_trial_dir(path)`: a content hash of the files the reader uses, for idempotent re-ingest;
- `run_key_for(unit, run_override)`, `read_job(job_dir)`: run identity and job-level facts;
- `read_trial(unit, run_key)`: one `records.Trial` with its episodes (`ingest.read.atif` renders them);
- `TraceError`: a file that cannot be read, with a one-line message naming the file and field
  (reading the files themselves, safely and in bounded memory, is `ingest.read.trace_files`).

Everything is read leniently (`.get()` everywhere, unknown keys ignored, wrong types skipped and
noted in `detail["field_warnings"]`), except JSON that does not parse, JSON files that are not
UTF-8, and files whose top-level shape is not the one expected: those raise `TraceError`. A
trajectory is checked against its ATIF version (`ingest.read.atif_check`) and what fails is
listed in `detail["validation"]`; the trial keeps everything that could be read.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from ingest.read import atif, atif_check, limits
from ingest.read.atif import RenderContext, TrajectoryFile
from ingest.read.sources import TRAJECTORY as LONE_TRAJECTORY  # given on its own: a trial (TraceUnit.lone)
from ingest.read.trace_files import (
    CHUNK,
    TraceError,
    inside,
    is_present,
    load_json,
    load_json_cached,
    load_result_json,
    one_trial,
    open_file,
    open_result,
    read_text,
    top_level_error,
)
from ingest.shape.records import Episode, Run, Trial

__all__ = [
    "TraceError",
    "TraceUnit",
    "discover",
    "hash_trial_dir",
    "run_key_for",
    "read_job",
    "trials_counted",
    "read_trial",
    "load_result_json",
    "one_trial",
    "primary_reward",
    "reader_files",
]

# result.json files up to this size are parsed outright when discovering (to check their
# shape); bigger ones are only peeked at.
SMALL_JSON_BYTES = 1024 * 1024
_HEAD_BYTES = 64 * 1024
TRIAL_FOLDER = "the trial folder"  # what a trial's files must not lead out of
LONE_FOLDER = "the trajectory's folder"

_REDACTED = "<redacted>"


# --------------------------------------------------------------------------------------------
# Errors and units
# --------------------------------------------------------------------------------------------


@dataclass
class TraceUnit:
    """One thing `discover` found: a trial directory, or a path it could not use (and why)."""

    path: Path
    kind: str  # "trial" | "unsupported"
    job_dir: Path | None = None
    reason: str | None = None
    # A lone ATIF trajectory.json (path is the file): its folder is read as a trial's agent/ folder.
    lone: bool = False


# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------

_TRIAL_RESULT_KEYS = ("trial_name", "task_name", "config")
_JOB_RESULT_KEYS = ("stats", "n_total_trials")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_trial_result(data: Any) -> bool:
    return (
        isinstance(data, dict) and any(k in data for k in _TRIAL_RESULT_KEYS) and not _is_job_result(data)
    )


def _is_job_result(data: Any) -> bool:
    return (
        isinstance(data, dict) and any(k in data for k in _JOB_RESULT_KEYS) and "trial_name" not in data
    )


def _is_trial_config(data: Any) -> bool:
    return isinstance(data, dict) and "trial_name" in data and "agent" in data


def _is_job_config(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and "trial_name" not in data
        and any(k in data for k in ("job_name", "jobs_dir", "n_attempts", "agents"))
    )


_HEAD_TRIAL_RE = re.compile(rb'"(?:trial_name|task_name)"\s*:')
_HEAD_JOB_RE = re.compile(rb'"(?:n_total_trials|stats)"\s*:')


def _result_shape(path: Path) -> tuple[str, str | None]:
    """("trial" | "job" | "unknown" | "error", error message) of a result.json, cheaply."""
    try:
        fd, size = open_result(path)
    except TraceError as exc:
        return "error", exc.message
    if size <= SMALL_JSON_BYTES:
        os.close(fd)
        try:
            data = load_json(path)
        except TraceError as exc:
            return "error", exc.message
        if _is_job_result(data):
            return "job", None
        if _is_trial_result(data):
            return "trial", None
        return "unknown", None
    # Too big to parse just to classify (RL result.json): Harbor writes the identifying keys
    # first (TrialResult: id, task_name, trial_name, ...; JobResult: id, started_at, ...,
    # n_total_trials, stats), so the head of the file settles it.
    try:
        with os.fdopen(fd, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError as exc:
        return "error", f"cannot read result.json: {exc.strerror or exc}"
    t = _HEAD_TRIAL_RE.search(head)
    j = _HEAD_JOB_RE.search(head)
    if t and (not j or t.start() < j.start()):
        return "trial", None
    if j:
        return "job", None
    return "unknown", None


def _small_json_or_none(path: Path) -> Any:
    return _small_json(path)[0]


def _small_json(path: Path) -> tuple[Any, str | None]:
    """A small JSON file's value, or None and why it cannot be read (None for a large file)."""
    try:
        if path.stat().st_size > SMALL_JSON_BYTES:
            return None, None
        return load_json(path), None
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except TraceError as exc:
        return None, exc.message


# --------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------

_TB1_REASON = (
    "legacy Terminal-Bench 1 (tb) run output (results.json with panes/): not a Harbor format, "
    "not supported"
)


class _Shape(NamedTuple):
    """What a folder is: "trial" | "job" | "tb1" | "bad" | "unreadable" | None (nothing of
    ours), why it cannot be used, and for "bad" (a result.json, or the config.json of a folder
    with nothing below it, that cannot be read, in a folder that does not otherwise look like a
    trial) that file's name, which the error names."""

    kind: str | None
    reason: str | None = None
    file: str | None = None


def _classify(path: Path, dirs: set[str], files: set[str]) -> _Shape:
    if "results.json" in files and "panes" in dirs:
        return _Shape("tb1", _TB1_REASON)
    if "results.json" in files and "run_metadata.json" in files and "result.json" not in files:
        # INFERENCE: a tb run directory (run_metadata.json + results.json) holding such trials.
        return _Shape("tb1", _TB1_REASON)
    bad: _Shape | None = None
    if "result.json" in files:
        shape, err = _result_shape(path / "result.json")
        if shape == "trial":
            return _Shape("trial")
        if shape == "job":
            return _Shape("job")
        if shape == "error":
            bad = _Shape("bad", err, "result.json")
    if "config.json" in files:
        cfg, err = _small_json(path / "config.json")
        if _is_trial_config(cfg):
            return _Shape("trial")
        if _is_job_config(cfg):
            return _Shape("job")
        # A folder above trials is searched on, and its trials' units report a job's broken
        # config.json as they read it; one with nothing below would say only "nothing to load".
        if err is not None and bad is None and not dirs:
            bad = _Shape("bad", err, "config.json")
    if "agent" in dirs or "steps" in dirs:
        return _Shape("trial")
    return bad or _Shape(None)


def _listing(path: Path) -> tuple[set[str], set[str]]:
    dirs: set[str] = set()
    files: set[str] = set()
    with os.scandir(path) as it:
        for entry in it:
            try:
                (dirs if entry.is_dir() else files).add(entry.name)
            except OSError:
                files.add(entry.name)
    return dirs, files


def _classify_path(path: Path) -> _Shape:
    try:
        dirs, files = _listing(path)
    except OSError as exc:
        return _Shape("unreadable", f"unreadable directory: {exc.strerror or exc}")
    return _classify(path, dirs, files)


def _unusable(path: Path, shape: _Shape) -> TraceUnit:
    return TraceUnit(path=path / shape.file if shape.file else path, kind="unsupported", reason=shape.reason)


def is_trial_dir(path: Path) -> bool:
    """Whether `discover` takes the folder for a trial directory."""
    return path.is_dir() and _classify_path(path).kind == "trial"


def _is_job_dir(path: Path, cache: dict[Path, bool]) -> bool:
    if path not in cache:
        cache[path] = path.is_dir() and _classify_path(path).kind == "job"
    return cache[path]


def discover(root: os.PathLike[str] | str) -> Iterator[TraceUnit]:
    """Yield every trial directory under `root` (which may itself be a trial, a job, an RL
    `trace_jobs/` folder or any tree of those), and an "unsupported" unit for each path that
    cannot be used: legacy Terminal-Bench 1 output, unreadable directories, symlinked
    directories (never followed, so loops cannot hang the walk), symlink loops, and directories
    whose result.json cannot be read. A trial directory's own subfolders are not searched."""
    root = Path(root)
    job_cache: dict[Path, bool] = {}

    def unit_for_trial(path: Path) -> TraceUnit:
        parent = path.parent
        job_dir = parent if _is_job_dir(parent, job_cache) else None
        return TraceUnit(path=path, kind="trial", job_dir=job_dir)

    if not root.exists():
        reason = "symbolic link loop or dangling link" if root.is_symlink() else "does not exist"
        yield TraceUnit(path=root, kind="unsupported", reason=reason)
        return
    if root.is_file() and root.name == LONE_TRAJECTORY:
        yield TraceUnit(path=root, kind="trial", lone=True)
        return
    if not root.is_dir():
        yield TraceUnit(path=root, kind="unsupported", reason="not a directory")
        return

    # A step folder of a multi-step trial (steps/<name>/, or steps/ itself) stands for its trial.
    candidates = (
        root.parent.parent if root.parent.name == "steps" else None,
        root.parent if root.name == "steps" else None,
    )
    for candidate in candidates:
        if candidate is not None and _classify_path(candidate).kind == "trial":
            yield unit_for_trial(candidate)
            return

    shape = _classify_path(root)
    if shape.kind == "trial":
        yield unit_for_trial(root)
        return
    if shape.kind in ("tb1", "bad", "unreadable"):
        yield _unusable(root, shape)
        if shape.kind != "bad":
            return

    errors: list[OSError] = []

    def drain() -> Iterator[TraceUnit]:
        while errors:
            err = errors.pop(0)
            where = Path(err.filename) if err.filename else root
            reason = f"unreadable directory: {err.strerror or err}"
            yield TraceUnit(path=where, kind="unsupported", reason=reason)

    walk = os.walk(root, topdown=True, onerror=errors.append, followlinks=False)
    for dirpath, dirnames, filenames in walk:
        yield from drain()
        here = Path(dirpath)
        dirnames.sort()
        if here != root:
            shape = _classify(here, set(dirnames), set(filenames))
            if shape.kind == "trial":
                dirnames[:] = []
                yield unit_for_trial(here)
                continue
            if shape.kind == "tb1":
                dirnames[:] = []
                yield _unusable(here, shape)
                continue
            if shape.kind == "bad":
                # An unreadable result.json that is not a trial's (a job's, mid-write): report
                # it and keep searching below, so its trials are not lost.
                yield _unusable(here, shape)
        kept = []
        for name in dirnames:
            full = here / name
            if full.is_symlink():
                reason = "symbolic link to a directory: not followed"
                yield TraceUnit(path=full, kind="unsupported", reason=reason)
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = here / name
            if full.is_symlink():
                try:
                    os.stat(full)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        yield TraceUnit(path=full, kind="unsupported", reason="symbolic link loop")
    yield from drain()


# --------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------

_VERIFIER_FILES = ("reward.json", "reward.txt", "test-stdout.txt", "test-stderr.txt")


def _trajectory_files(agent: Path, prefix: str) -> list[str]:
    """Relative paths of the trajectory files in an agent/ folder (or a lone trajectory's)."""
    if not agent.is_dir():
        return []
    return [f"{prefix}{p.name}" for p in agent.glob("trajectory*.json") if p.is_file()]


def _unit_files(base: Path, prefix: str) -> list[str]:
    """Relative paths of the files the reader uses under one agent/verifier/artifacts base."""
    out = _trajectory_files(base / "agent", f"{prefix}agent/")
    for name in _VERIFIER_FILES:
        if (base / "verifier" / name).is_file():
            out.append(f"{prefix}verifier/{name}")
    if (base / "artifacts" / "manifest.json").is_file():
        out.append(f"{prefix}artifacts/manifest.json")
    return out


def reader_files(path: os.PathLike[str] | str) -> list[str]:
    """Sorted relative paths (POSIX) of every file `read_trial` may read in a trial directory."""
    path = Path(path)
    files = [n for n in ("result.json", "config.json", "exception.txt") if (path / n).is_file()]
    files += _unit_files(path, "")
    steps = path / "steps"
    if steps.is_dir():
        for step in steps.iterdir():
            if step.is_dir() and not step.is_symlink():
                files += _unit_files(step, f"steps/{step.name}/")
    return sorted(set(files))


def _hash_files(path: Path, files: list[str] | None = None) -> Any:
    """A sha256 object over the files the reader uses (see hash_trial_dir), or `files`."""
    h = hashlib.sha256()
    for rel in reader_files(path) if files is None else files:
        full = path / rel
        # Opened as the reader will (inside the trial folder, within its size limit), so a file
        # it would refuse is refused before a byte of it is hashed.
        fd, size = open_result(full) if rel == "result.json" else open_file(full)
        try:
            with os.fdopen(fd, "rb") as fh:
                h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
                h.update(str(size).encode() + b"\0")
                while chunk := fh.read(CHUNK):
                    h.update(chunk)
        except OSError as exc:
            raise TraceError(full, f"cannot read: {exc.strerror or exc}") from None
        h.update(b"\0")
    return h


def hash_trial_dir(path: os.PathLike[str] | str) -> str:
    """sha256 (hex) over the sorted relative paths, sizes and contents of the files the reader
    uses, read in chunks, plus the job-level `result` lookup for this trial (a job result.json
    outside the directory decides the exported `result` string, harbor-formats.md §4.5). For a
    lone trajectory.json (a file), its folder's trajectory files."""
    path = Path(path)
    if path.is_file():
        with inside(path.parent, LONE_FOLDER):
            return _hash_files(path.parent, sorted(_trajectory_files(path.parent, ""))).hexdigest()
    with inside(path, TRIAL_FOLDER):
        h = _hash_files(path)
    h.update(b"\x01job-result\0" + json.dumps(job_result_of(path)).encode())
    return h.hexdigest()


def job_result_of(path: os.PathLike[str] | str) -> str | None:
    """What the job's result.json says this trial's `result` is (§4.5 step 1), if it lists it."""
    path = Path(path)
    with inside(path, TRIAL_FOLDER):
        cfg = _small_json_or_none(path / "config.json")
    trial_name = path.name
    if isinstance(cfg, dict) and isinstance(cfg.get("trial_name"), str):
        trial_name = cfg["trial_name"]
    job_value = _job_level_result(path, trial_name)
    return job_value[0] if job_value else None


# --------------------------------------------------------------------------------------------
# Run identity and jobs
# --------------------------------------------------------------------------------------------


def _job_id_of_trial(path: Path) -> str | None:
    cfg = _small_json_or_none(path / "config.json")
    if isinstance(cfg, dict) and cfg.get("job_id"):
        return str(cfg["job_id"])
    result_path = path / "result.json"
    if result_path.is_file():
        try:
            data, _ = load_result_json(result_path)
        except TraceError:
            return None  # read_trial reports it
        job_id = _d(_d(data).get("config")).get("job_id")
        if job_id:
            return str(job_id)
    return None


def run_key_for(unit: TraceUnit, run_override: str | None = None) -> str:
    """The run a trial belongs to: its job UUID (`config.job_id`, equal to the job result.json
    `id`), else `run_override`, else the job directory's name, else the name of the folder
    holding the trial (for an RL `trace_jobs/` folder, the folder above it)."""
    if unit.kind == "trial":
        with inside(unit.path, TRIAL_FOLDER):
            job_id = _job_id_of_trial(Path(unit.path))
        if job_id:
            return job_id
    if run_override:
        return run_override
    if unit.job_dir is not None:
        return Path(os.path.abspath(unit.job_dir)).name
    return _folder_name(unit)


def run_name_for(unit: TraceUnit, run_override: str | None = None) -> str:
    """The run's readable name (runs.name), whatever its key: the job directory's name, else
    `run_override`, else the name of the folder holding the trial. A trial whose config names a
    job UUID but whose folder has no job files is named for that folder, not its UUID."""
    if unit.job_dir is not None:
        return Path(os.path.abspath(unit.job_dir)).name
    return run_override or _folder_name(unit)


def _folder_name(unit: TraceUnit) -> str:
    """The folder holding the trial, or for an RL `trace_jobs/` folder the folder above it."""
    parent = Path(os.path.abspath(unit.path)).parent
    if parent.name == "trace_jobs" and parent.parent.name:
        return parent.parent.name
    return parent.name or str(parent)


def _flatten_evals(evals: Any) -> tuple[dict[str, Any], bool]:
    """stats.evals as {"<agent>__[<model>__]<dataset>": AgentDatasetStats}; the pre-2025-10-28
    nested form {agent: {dataset: stats}} is flattened to "<agent>__<dataset>"."""
    markers = ("n_trials", "n_errors", "metrics", "reward_stats", "exception_stats", "pass_at_k")
    flat: dict[str, Any] = {}
    nested = False
    for key, value in _d(evals).items():
        if isinstance(value, dict) and value and not any(m in value for m in markers) and all(
            isinstance(v, dict) for v in value.values()
        ):
            nested = True
            for dataset, stats in value.items():
                flat[f"{key}__{dataset}"] = stats
        else:
            flat[key] = value
    return flat, nested


def read_job(job_dir: os.PathLike[str] | str, run_override: str | None = None) -> Run | None:
    """Job-level facts from `<job>/config.json` and `<job>/result.json`; None when neither is
    there. The run key matches `run_key_for`: the job UUID, else run_override, else the
    directory name."""
    job_dir = Path(job_dir)
    with inside(job_dir, "the job folder"):
        return _read_job(job_dir, run_override)


def _read_job(job_dir: Path, run_override: str | None) -> Run | None:
    config_path, result_path = job_dir / "config.json", job_dir / "result.json"
    config = load_json(config_path) if config_path.is_file() else None
    result = load_json(result_path) if result_path.is_file() else None
    if config is None and result is None:
        return None
    if config is not None and not isinstance(config, dict):
        raise TraceError(config_path, top_level_error(config))
    if result is not None and not isinstance(result, dict):
        raise TraceError(result_path, top_level_error(result))
    if result is not None and not _is_job_result(result):
        raise TraceError(result_path, "not a job result (no 'stats' or 'n_total_trials')")
    config = config or {}
    result = result or {}
    detail: dict[str, Any] = {}

    started, naive_start = _parse_ts(result.get("started_at"))
    finished, naive_finish = _parse_ts(result.get("finished_at"))
    for key in ("started_at", "updated_at", "finished_at"):
        if key in result:
            detail[f"{key}_raw"] = result.get(key)
    if naive_start or naive_finish:
        # JobResult times are naive local time (datetime.now()); stored as if UTC.
        detail["naive_timestamps"] = True
    detail["finished"] = result.get("finished_at") is not None if result else None

    stats = _d(result.get("stats"))
    if result:
        detail["n_total_trials"] = result.get("n_total_trials")
        detail["stats"] = stats
        # Before 2026-04-29 (harbor@3552a5f7): n_trials / n_errors.
        detail["n_completed_trials"] = stats.get("n_completed_trials", stats.get("n_trials"))
        detail["n_errored_trials"] = stats.get("n_errored_trials", stats.get("n_errors"))
        flat, nested = _flatten_evals(stats.get("evals"))
        if flat:
            detail["evals"] = flat
        if nested:
            detail["evals_nested"] = True
        if "metrics" in result:  # oldest JobResult (2025-09)
            detail["metrics"] = result.get("metrics")
        trial_results = result.get("trial_results")
        if isinstance(trial_results, list) and trial_results:
            # Not kept: the trials are read from their own directories.
            detail["n_embedded_trial_results"] = len(trial_results)
    if config:
        detail["config"] = _redact(config)
    lock_path = job_dir / "lock.json"
    if lock_path.is_file():
        try:
            detail["lock"] = _redact(load_json(lock_path))
        except TraceError as exc:
            detail["lock_error"] = exc.message

    job_id = str(result["id"]) if result.get("id") else None
    run_key = job_id or run_override or Path(os.path.abspath(job_dir)).name
    name = config.get("job_name") if isinstance(config.get("job_name"), str) else None
    return Run(
        run_key=run_key,
        name=name or Path(os.path.abspath(job_dir)).name,
        job_id=job_id,
        started_at=started,
        finished_at=finished,
        detail=detail,
        labels=job_labels(config),
    )


def trials_counted(job: Run | None) -> set[str]:
    """The names of the trials a job's result.json counts as done: every name in an eval's
    `reward_stats` or `exception_stats` (and the oldest JobStats' own `exception_stats`). Harbor
    adds a trial there when it finishes, so an unfinished trial is in none of them."""
    detail = _d(job.detail if job is not None else None)
    stats = _d(detail.get("stats"))
    listings: list[Any] = [stats.get("exception_stats")]
    for eval_data in _d(detail.get("evals")).values():
        eval_data = _d(eval_data)
        listings.append(eval_data.get("exception_stats"))
        listings += _d(eval_data.get("reward_stats")).values()
    return {str(name) for listing in listings for names in _d(listing).values() if isinstance(names, list)
            for name in names if isinstance(name, str)}


def job_labels(config: dict[str, Any]) -> dict[str, str]:
    """The run labels a job config gives: what tells a job's runs apart and no trial column
    holds. `dataset` (each of `datasets`' name, else its path's last part, with `@version`),
    `n_attempts`. (Agent and model are trial columns already.)"""
    labels: dict[str, str] = {}
    names = []
    for dataset in config.get("datasets") or ():
        if not isinstance(dataset, dict):
            continue
        name = dataset.get("name") or (Path(str(dataset["path"])).name if dataset.get("path") else None)
        if name:
            version = dataset.get("version") or dataset.get("ref")
            names.append(f"{name}@{version}" if version else str(name))
    if names:
        labels["dataset"] = ", ".join(names)
    attempts = config.get("n_attempts")
    if isinstance(attempts, int) and not isinstance(attempts, bool):
        labels["n_attempts"] = str(attempts)
    return labels


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


def _parse_ts(raw: Any) -> tuple[datetime | None, bool]:
    """(aware UTC datetime or None, was naive). Naive values are taken as UTC."""
    if not isinstance(raw, str) or not raw.strip():
        return None, False
    try:
        dt = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None, False
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc), True
    try:
        return dt.astimezone(timezone.utc), False
    except OverflowError:  # e.g. year 1 with a positive offset: before datetime.min in UTC
        return None, False


def _to_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def primary_reward(rewards: dict[str, Any] | None) -> float | None:
    """Harbor Hub's primary reward: rewards["reward"] if present, else the single value when
    there is exactly one key, else None (`upload/uploader.py` `_extract_primary_reward`)."""
    if not rewards:
        return None
    if "reward" in rewards:
        return _to_float(rewards["reward"])
    if len(rewards) == 1:
        return _to_float(next(iter(rewards.values())))
    return None


def _coerce_reward_str(value: Any) -> str:
    """Harbor's `_coerce_reward_value`, then str()."""
    try:
        return str(float(value))
    except (TypeError, ValueError):
        return str(value)


def _job_level_result(trial_dir: Path, trial_name: str) -> tuple[str, str] | None:
    """§4.5 step 1: (value, job result.json path) from the first result.json with a "stats" key
    found walking up from the trial's parent (6 levels), when it lists this trial."""
    cur = Path(os.path.abspath(trial_dir)).parent
    for _ in range(6):
        candidate = cur / "result.json"
        if candidate.is_file():
            try:
                with inside(cur, "its folder"):
                    data = load_json_cached(candidate)
            except TraceError:
                # Harbor treats unreadable JSON as absent; so is one too big, or a link leading
                # out of its folder (this may be far above the source, in no job the user named).
                data = None
            if isinstance(data, dict) and "stats" in data:
                evals = _d(_d(data.get("stats")).get("evals"))
                # Harbor iterates the evals as stored: the nested pre-2025-10-28 form never
                # matches, exactly as in the exporter.
                for eval_data in evals.values():
                    if not isinstance(eval_data, dict):
                        continue
                    for exc_name, entries in _d(eval_data.get("exception_stats")).items():
                        if isinstance(entries, list) and trial_name in entries:
                            return str(exc_name), str(candidate)
                    reward_map = _d(_d(eval_data.get("reward_stats")).get("reward"))
                    for value, entries in reward_map.items():
                        if isinstance(entries, list) and trial_name in entries:
                            return _coerce_reward_str(value), str(candidate)
                return None
        if cur.parent == cur:
            break
        cur = cur.parent
    return None


def _trial_level_result(result: dict[str, Any]) -> str | None:
    """§4.5 step 2: the top-level exception type, else
    str(float(verifier_result.rewards["reward"])); None otherwise."""
    exc_type = _d(result.get("exception_info")).get("exception_type")
    if exc_type:
        return str(exc_type)
    rewards = _d(result.get("verifier_result")).get("rewards")
    if isinstance(rewards, dict):
        reward = rewards.get("reward")
        if reward is not None:
            return _coerce_reward_str(reward)
    return None


_ENV_TEMPLATE_RE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::-)?\}$")
_SECRET_KEY_RE = re.compile(
    r"(api[_-]?key|secret|passw(or)?d|access[_-]?token|auth[_-]?token|refresh[_-]?token|bearer|"
    r"authorization|credential|private[_-]?key)",
    re.I,
)


def _is_env_template(value: Any) -> bool:
    return value is None or (isinstance(value, str) and _ENV_TEMPLATE_RE.match(value) is not None)


def _redact(value: Any) -> Any:
    """A copy with secrets removed: every value of an `env` mapping except a bare "${VAR}"
    template (Harbor's own serialisation), and string values of secret-looking keys."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, dict):
                out[key] = {k: v if _is_env_template(v) else _REDACTED for k, v in item.items()}
            elif isinstance(key, str) and _SECRET_KEY_RE.search(key) and isinstance(item, str):
                out[key] = item if _is_env_template(item) else _REDACTED
            else:
                out[key] = _redact(item)
        return out
    if isinstance(value, list):
        return list(map(_redact, value))  # one frame per level (see warehouse.texts)
    return value


def _task_name_from_config(config: dict[str, Any]) -> str | None:
    task = _d(config.get("task"))
    if isinstance(task.get("name"), str) and task["name"]:
        return task["name"]
    if isinstance(task.get("path"), str) and task["path"]:
        return Path(task["path"]).name
    return None


def _timing(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {"started_at": value.get("started_at"), "finished_at": value.get("finished_at")}


def _exception_summary(value: Any) -> dict[str, Any] | None:
    """An exception_info as trial detail keeps it: `occurred_at` raw and, parsed, as UTC
    (`occurred_at_utc`); `naive_occurred_at` when it had no zone and was taken as UTC."""
    if not isinstance(value, dict):
        return None
    summary = {
        "type": value.get("exception_type"),
        "message": value.get("exception_message"),
        "occurred_at": value.get("occurred_at"),  # naive local time in every Harbor version
        "traceback": value.get("exception_traceback"),
    }
    occurred, naive = _parse_ts(value.get("occurred_at"))
    if occurred is not None:
        summary["occurred_at_utc"] = occurred.isoformat()
    if naive:
        summary["naive_occurred_at"] = True
    return summary


_TOKEN_KEYS = ("n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd")


def _tokens(agent_result: Any) -> dict[str, Any]:
    ar = _d(agent_result)
    return {k: ar.get(k) for k in _TOKEN_KEYS}


def _num(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _sum_tokens(agent_results: list[Any]) -> dict[str, Any]:
    """Harbor's compute_token_cost_totals: per key, the sum over the values present (None when
    no step has one)."""
    totals: dict[str, Any] = {}
    for key in _TOKEN_KEYS:
        values = [_num(_d(ar).get(key)) for ar in agent_results]
        values = [v for v in values if v is not None]
        totals[key] = sum(values) if values else None
    return totals


def _clean_metadata(metadata: Any) -> Any:
    if not isinstance(metadata, dict):
        return metadata
    return {k: v for k, v in metadata.items() if not (k == "all_messages" and v is None)}


# --------------------------------------------------------------------------------------------
# Verifier files
# --------------------------------------------------------------------------------------------


def _read_reward_files(vdir: Path) -> tuple[dict[str, Any] | None, str | None, dict[str, Any]]:
    """(rewards, source file, what the files hold) from verifier/reward.json and reward.txt.

    Precedence: reward.json wins when both exist (Harbor >= 2026-05-09, harbor@13ab67a5 "rich
    verifier rewards"). Before that (e.g. harbor@39c77109) reward.txt won instead. Trials of that
    era recorded the winning value in result.json, and rewards from result.json always take
    precedence over these files, so the rule only decides for trials without usable rewards in
    result.json (incomplete trials, or a verifier that failed after writing both files). Unparseable or empty files are reported in the info
    dict, never raised: they are a trial outcome (VerifierOutputParseError,
    RewardFileEmptyError), not a reader failure.
    """
    info: dict[str, Any] = {}
    from_json: dict[str, Any] | None = None
    from_txt: dict[str, Any] | None = None
    rj = vdir / "reward.json"
    if rj.is_file():
        try:
            value = load_json(rj)
            if isinstance(value, dict):
                from_json = value
                info["reward.json"] = value
            else:
                info["reward.json_error"] = f"expected a JSON object, got {type(value).__name__}"
        except TraceError as exc:
            info["reward.json_error"] = exc.message
    rt = vdir / "reward.txt"
    if rt.is_file():
        text = read_text(rt)
        info["reward.txt"] = text
        try:
            from_txt = {"reward": float(text.strip())}
        except ValueError:
            info["reward.txt_error"] = "empty file" if not text.strip() else "not a single number"
    if from_json is not None:
        return from_json, "reward.json", info
    if from_txt is not None:
        return from_txt, "reward.txt", info
    return None, None, info


def _read_verifier_output(vdir: Path) -> str | None:
    """test-stdout.txt + test-stderr.txt (legacy), no separator, errors="replace"; None when
    neither exists (Harbor's `_read_verifier_output`)."""
    names = ("test-stdout.txt", "test-stderr.txt")
    parts = [read_text(vdir / name) for name in names if (vdir / name).is_file()]
    return "".join(parts) if parts else None


# --------------------------------------------------------------------------------------------
# Trajectories
# --------------------------------------------------------------------------------------------


@dataclass
class _Base:
    """One agent/verifier folder of a trial: the trial itself, or one steps/<name>/."""

    name: str | None  # step name; None for a single-step trial
    path: Path
    rel: str  # "" or "steps/<name>/"
    lone: bool = False  # a lone trajectory.json's folder: its trajectories are there, not in agent/

    @property
    def agent_dir(self) -> Path:
        return self.path if self.lone else self.path / "agent"

    @property
    def agent_rel(self) -> str:
        """The agent folder's relative path, as a prefix of its files'."""
        return self.rel if self.lone else f"{self.rel}agent/"

    @property
    def main_source(self) -> str:
        # A single-step trial's main trajectory is "main" and its subagents are
        # "summarization-<n>-<kind>": exactly Harbor's trace_source column. Harbor exports every
        # steps/<name>/ of a multi-step trial as if it were a trial of its own with the same
        # trial_name, so its rows collide on (trial, trace_source, episode). To keep episode keys
        # distinct, a step's trajectory is "step:<name>" and its subagents "step:<name>/<kind>".
        return "main" if self.name is None else f"step:{self.name}"

    def sub_source(self, label: str) -> str:
        return label if self.name is None else f"{self.main_source}/{label}"


def _load_trajectory(path: Path, rel: str) -> TrajectoryFile:
    data = load_json(path)
    if not isinstance(data, dict):
        raise TraceError(path, top_level_error(data) + " (an ATIF trajectory)")
    # `steps` that is not a list is a validation problem (the file has no steps to render), not
    # a reason to refuse the trial.
    file = TrajectoryFile(relpath=rel, data=data)
    steps = data.get("steps")
    try:  # here, before anything walks the steps (rendering checks the embedded trajectories)
        RenderContext(max_steps=limits.STEPS.get()).check_steps(file, steps if isinstance(steps, list) else [])
    except atif.TooLarge as exc:
        raise TraceError(path, exc.message) from None
    return file


def _read_chain(base: _Base, notes: dict[str, list[Any]]) -> list[TrajectoryFile]:
    """agent/trajectory.json and its continued_trajectory_ref chain (relative to agent/)."""
    agent_dir = base.agent_dir
    main = agent_dir / "trajectory.json"
    if not is_present(main):
        return []
    files = [_load_trajectory(main, f"{base.agent_rel}trajectory.json")]
    seen = {"trajectory.json"}
    while True:
        ref = files[-1].data.get("continued_trajectory_ref")
        if not ref or not isinstance(ref, str):
            break
        if ref in seen:
            notes.setdefault("continuation_loops", []).append(f"{base.agent_rel}{ref}")
            break
        if not (agent_dir / ref).is_file():
            notes.setdefault("missing_continuations", []).append(f"{base.agent_rel}{ref}")
            break
        seen.add(ref)
        files.append(_load_trajectory(agent_dir / ref, f"{base.agent_rel}{ref}"))
    return files


def _subagent_files(base: _Base) -> list[tuple[str, Path]]:
    """Harbor's `collect_subagent_traces`: agent/trajectory.*.json except `.cont-` files, sorted;
    the trace source is the part between "trajectory." and ".json"."""
    agent_dir = base.agent_dir
    if not agent_dir.is_dir():
        return []
    return [
        (p.name[len("trajectory.") : -len(".json")], p)
        for p in sorted(agent_dir.glob("trajectory.*.json"))
        if ".cont-" not in p.name and p.is_file()
    ]


def _instruction(base: _Base, loaded: dict[str, TrajectoryFile]) -> str | None:
    """Harbor's `_extract_instruction`: the lexically first agent/trajectory*.json that is not a
    summarization file (so trajectory.cont-1.json sorts before trajectory.json)."""
    agent_dir = base.agent_dir
    if not agent_dir.is_dir():
        return None
    paths = sorted(
        p for p in agent_dir.glob("trajectory*.json") if ".summarization" not in p.name and p.is_file()
    )
    if not paths:
        return None
    rel = f"{base.agent_rel}{paths[0].name}"
    file = loaded.get(rel)
    if file is None:
        try:
            file = _load_trajectory(paths[0], rel)
        except TraceError:
            return None  # Harbor skips an unreadable file here
    return atif.first_instruction(file.data)


def _legacy_episode_dirs(base: _Base) -> int:
    """terminus-2's pre-ATIF agent/episode-<i>/ folders (not rendered; counted in detail)."""
    agent_dir = base.agent_dir
    if base.lone or not agent_dir.is_dir():
        return 0
    return sum(1 for p in agent_dir.glob("episode-*") if p.is_dir())


# At most this many validation problems are kept on a trial (in reading order); the rest are
# counted per file in detail["validation_omitted"].
MAX_VALIDATION_PROBLEMS = 100


class _Episodes:
    """Collects the episodes of one trial in reading order, with unique trace sources, and each
    trajectory file's summary and validation problems."""

    def __init__(self, ctx: RenderContext, notes: dict[str, list[Any]]) -> None:
        self.ctx = ctx
        self.notes = notes
        self.episodes: list[Episode] = []
        self.summaries: list[dict[str, Any]] = []
        self.validation: list[dict[str, Any]] = []
        self.validation_omitted: dict[str, int] = {}
        self.sources: set[str] = set()
        self.trajectory_model: str | None = None
        self.trajectory_agent: str | None = None

    def _unique(self, source: str) -> str:
        candidate, n = source, 2
        while candidate in self.sources:
            candidate, n = f"{source}#{n}", n + 1
        self.sources.add(candidate)
        return candidate

    def _summarize(self, file: TrajectoryFile) -> None:
        """The file's summary and its validation problems (an embedded subagent's relpath has a
        `#`: it must name its trajectory_id)."""
        summary = atif.trajectory_summary(file)
        checked = atif_check.check(file.data, embedded="#" in file.relpath)
        if checked.later_version is not None:
            summary["later_version"] = {"checked_as": f"ATIF-v1.{atif_check.LATEST}",
                                        "unknown_fields": checked.unknown_fields}
        self.summaries.append(summary)
        room = max(0, MAX_VALIDATION_PROBLEMS - len(self.validation))
        self.validation += [{"file": file.relpath, **p} for p in checked.problems[:room]]
        if len(checked.problems) > room:
            self.validation_omitted[file.relpath] = len(checked.problems) - room

    def _subagent(self, file: TrajectoryFile, source: str) -> None:
        self._summarize(file)
        episode = atif.render_subagent_episode(file, self.ctx, self._unique(source))
        if episode is not None:
            self.episodes.append(episode)
        self._embedded(file, source)

    def _embedded(self, file: TrajectoryFile, parent: str | None) -> None:
        """ATIF v1.7 `subagent_trajectories`: one complete-conversation episode each."""
        for pos, sub in enumerate(atif.embedded_subagents(file.data)):
            label = atif.embedded_label(sub, pos)
            sub_file = TrajectoryFile(relpath=f"{file.relpath}#subagent_trajectories[{pos}]", data=sub)
            self._subagent(sub_file, label if parent is None else f"{parent}/{label}")

    def read_base(self, base: _Base) -> dict[str, Any]:
        """Episodes of one agent/ folder (main chain, then embedded and file subagents), plus
        what its verifier/ and artifacts/ hold."""
        info: dict[str, Any] = {}
        files = _read_chain(base, self.notes)
        loaded = {f.relpath: f for f in files}
        info["has_trajectory"] = bool(files)
        if files:
            for f in files:
                self._summarize(f)
                agent = _d(f.data.get("agent"))
                model_name, agent_name = agent.get("model_name"), agent.get("name")
                if self.trajectory_model is None and isinstance(model_name, str) and model_name:
                    self.trajectory_model = model_name
                if self.trajectory_agent is None and isinstance(agent_name, str) and agent_name:
                    self.trajectory_agent = agent_name
            self.episodes.extend(atif.render_main_episodes(files, self.ctx, self._unique(base.main_source)))
            for f in files:
                self._embedded(f, None if base.name is None else base.main_source)
        elif legacy := _legacy_episode_dirs(base):
            info["legacy_episode_dirs"] = legacy
        for kind, path in _subagent_files(base):
            rel = f"{base.agent_rel}{path.name}"
            loaded[rel] = _load_trajectory(path, rel)
            self._subagent(loaded[rel], base.sub_source(kind))
        info["instruction"] = _instruction(base, loaded)
        if base.lone:  # nothing but trajectories: a verifier/ beside it is not its trial's
            info.update(verifier_output=None, file_rewards=None, file_rewards_from=None, reward_files={})
            return info

        vdir = base.path / "verifier"
        info["verifier_output"] = _read_verifier_output(vdir)
        info["file_rewards"], info["file_rewards_from"], info["reward_files"] = _read_reward_files(vdir)
        manifest = base.path / "artifacts" / "manifest.json"
        if manifest.is_file():
            try:
                info["artifacts_manifest"] = load_json(manifest)
            except TraceError as exc:
                info["artifacts_manifest_error"] = exc.message
        return info


# --------------------------------------------------------------------------------------------
# read_trial
# --------------------------------------------------------------------------------------------


def _check_trial_result(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TraceError(path, top_level_error(data))
    if _is_job_result(data):
        raise TraceError(path, "a job-level result (has 'stats'/'n_total_trials'), not a trial result")
    known = _TRIAL_RESULT_KEYS + ("agent_info", "verifier_result", "agent_result", "exception_info", "id")
    if not any(k in data for k in known):
        raise TraceError(path, f"unknown shape: none of the trial result keys {', '.join(known)}")
    return data


def _type_warning(field_name: str, expected: str, value: Any) -> str:
    return f"result.json field '{field_name}': expected {expected}, got {type(value).__name__}"


# The trials table's token columns are 64-bit integers (BIGINT on PostgreSQL).
_INT_MAX = 2**63 - 1


def _text_field(field_name: str, value: Any, warnings: list[str]) -> str | None:
    """A value bound for a text column: a string or None. Any other JSON type is noted and left
    out; stored as is, it would make the database refuse the whole trial."""
    if value is None or isinstance(value, str):
        return value
    warnings.append(_type_warning(field_name, "a string", value))
    return None


def _float_field(field_name: str, value: Any, warnings: list[str]) -> float | None:
    """A value bound for a float column (cost): an integer too big for a float is noted."""
    try:
        return None if value is None else float(value)
    except OverflowError:
        warnings.append(f"result.json field '{field_name}': a number too large: {value!r}")
        return None


def _int_field(field_name: str, value: Any, warnings: list[str]) -> int | None:
    """A value bound for an integer column (token counts): whole numbers only, within range."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value is None or (isinstance(value, int) and -_INT_MAX - 1 <= value <= _INT_MAX):
        return value
    warnings.append(f"result.json field '{field_name}': expected an integer within ±2^31, got {value!r}")
    return None


def _bases(d: Path, step_results: list[dict[str, Any]], detail: dict[str, Any]) -> list[_Base]:
    """[the trial] for a single-step trial; else each step in step_results order, then any other
    steps/<name>/ folder by name."""
    steps_dir = d / "steps"
    try:
        names_on_disk = (
            sorted(p.name for p in steps_dir.iterdir() if p.is_dir() and not p.is_symlink())
            if steps_dir.is_dir()
            else []
        )
    except OSError as exc:
        raise TraceError(steps_dir, f"cannot list: {exc.strerror or exc}") from None
    if not step_results and not names_on_disk:
        return [_Base(None, d, "")]
    names = [str(s["step_name"]) for s in step_results if s.get("step_name") is not None]
    names += [n for n in names_on_disk if n not in names]
    if not step_results:
        detail["step_order"] = "directory names (no step_results)"
    return [_Base(n, steps_dir / n, f"steps/{n}/") for n in names]


def _result_rewards(vr: dict[str, Any], detail: dict[str, Any], warnings: list[str]) -> dict[str, Any] | None:
    """Rewards recorded in result.json's verifier_result, or None."""
    rewards = vr.get("rewards")
    if isinstance(rewards, dict):
        detail["rewards_source"] = "result.json"
        return dict(rewards)
    if rewards is not None:
        warnings.append(_type_warning("verifier_result.rewards", "an object", rewards))
        return None
    if vr.get("reward") is not None:
        # Oldest schema (before 2025-10-28): VerifierResult.reward: float, from reward.txt.
        detail["rewards_source"] = "result.json verifier_result.reward"
        return {"reward": vr["reward"]}
    return None


def _step_summary(base: _Base, step_result: dict[str, Any] | None, info: dict[str, Any]) -> dict[str, Any]:
    s = step_result or {}
    entry: dict[str, Any] = {
        "name": base.name,
        "has_dir": base.path.is_dir(),
        "in_result": step_result is not None,
        "rewards": _d(s.get("verifier_result")).get("rewards"),
        "exception": _exception_summary(s.get("exception_info")),
        "agent_execution": _timing(s.get("agent_execution")),
        "verifier": _timing(s.get("verifier")),
        "tokens": _tokens(s.get("agent_result")) if step_result is not None else None,
        "has_trajectory": info.get("has_trajectory", False),
        "instruction": info.get("instruction"),
        "verifier_output": info.get("verifier_output"),
        "reward_files": info.get("reward_files") or None,
    }
    metadata = _d(s.get("agent_result")).get("metadata")
    if metadata is not None:
        entry["agent_metadata"] = _clean_metadata(metadata)
    for key in ("artifacts_manifest", "artifacts_manifest_error", "legacy_episode_dirs"):
        if key in info:
            entry[key] = info[key]
    return entry


def read_trial(unit: TraceUnit, run_key: str) -> Trial:
    """Read one trial directory into a `records.Trial` with all its episodes."""
    if unit.kind != "trial":
        raise TraceError(unit.path, f"not a trial directory ({unit.reason or unit.kind})")
    if unit.lone:
        with inside(Path(unit.path).parent, LONE_FOLDER):
            return _read_trial(Path(unit.path).parent, run_key, lone=True)
    with inside(unit.path, TRIAL_FOLDER):
        return _read_trial(Path(unit.path), run_key)


def _read_trial(d: Path, run_key: str, lone: bool = False) -> Trial:
    """`lone`: `d` holds a lone trajectory.json and its sibling trajectories, and nothing of a
    trial directory is read from it (a result.json there is not the trajectory's): a trial
    finished, named for its folder, its agent and model from the trajectory."""
    warnings: list[str] = []
    notes: dict[str, list[Any]] = {}
    detail: dict[str, Any] = {}

    # ---- result.json / config.json ----
    result_path = d / "result.json"
    complete = lone or is_present(result_path)
    result: dict[str, Any] = {}
    dropped: dict[str, dict[str, int]] = {}
    if complete and not lone:
        raw, dropped = load_result_json(result_path)
        result = _check_trial_result(result_path, raw)
    config_path = d / "config.json"
    config_file: dict[str, Any] | None = None
    if not lone and is_present(config_path):
        config_file = load_json(config_path)
        if not isinstance(config_file, dict):
            raise TraceError(config_path, top_level_error(config_file))
    for key in ("config", "agent_info", "verifier_result", "agent_result", "exception_info"):
        if result.get(key) is not None and not isinstance(result[key], dict):
            warnings.append(_type_warning(key, "an object", result[key]))
    config = _d(result.get("config")) or config_file or {}
    agent_cfg = _d(config.get("agent"))
    agent_info = _d(result.get("agent_info"))
    model_info = _d(agent_info.get("model_info"))

    trial_name = str(result.get("trial_name") or config.get("trial_name") or d.name)
    task_name = result.get("task_name") or _task_name_from_config(config)
    if not result.get("task_name") and task_name:
        detail["task_name_from"] = "config.task"

    raw_steps = result.get("step_results")
    if raw_steps is not None and not isinstance(raw_steps, list):
        warnings.append(_type_warning("step_results", "a list", raw_steps))
    step_results = [s for s in raw_steps if isinstance(s, dict)] if isinstance(raw_steps, list) else []
    step_by_name = {str(s.get("step_name")): s for s in step_results}
    bases = [_Base(None, d, "", lone=True)] if lone else _bases(d, step_results, detail)
    multi_step = bases[0].name is not None

    # ---- trajectories, episodes, verifier folders ----
    # Harbor's run-level names (used on rows whose trajectory lacks them).
    ctx = RenderContext(
        agent=agent_cfg.get("name") or agent_info.get("name"),
        model=model_info.get("name") or agent_cfg.get("model_name"),
        max_steps=limits.STEPS.get(),
        max_turn_rows=limits.TURN_ROWS.get(),
    )
    collector = _Episodes(ctx, notes)
    try:
        per_base = {base.rel: collector.read_base(base) for base in bases}
    except atif.TooLarge as exc:  # refused before its episodes are made: no input runs the reader out of memory
        file, _, embedded = exc.relpath.partition("#")
        raise TraceError(d / file, f"{embedded + ': ' if embedded else ''}{exc.message}") from None
    episodes = collector.episodes
    for row, episode in enumerate(episodes):
        episode.row_number = row
    instruction = next((i["instruction"] for i in per_base.values() if i["instruction"] is not None), None)

    # ---- rewards ----
    vr = _d(result.get("verifier_result"))
    rewards = _result_rewards(vr, detail, warnings)
    if vr.get("statistics") is not None:
        detail["verifier_statistics"] = vr["statistics"]
    if rewards is None:
        # Nothing in result.json (or no result.json): the verifier files, from the last step that
        # has them for a multi-step trial (Harbor's "final" strategy; "mean" needs the task), then
        # the trial's own verifier/.
        for base in reversed(bases):
            info = per_base[base.rel]
            if info["file_rewards"] is not None:
                rewards = info["file_rewards"]
                detail["rewards_source"] = f"{base.rel}verifier/{info['file_rewards_from']}"
                break
        if rewards is None and multi_step:
            rewards, from_file, _ = _read_reward_files(d / "verifier")
            if rewards is not None:
                detail["rewards_source"] = f"verifier/{from_file}"

    # ---- exception: top level, else the first failing step ----
    exception = _exception_summary(result.get("exception_info"))
    if exception:
        exception["source"] = "result.json"
    else:
        for i, s in enumerate(step_results):
            exception = _exception_summary(s.get("exception_info"))
            if exception:
                exception["source"] = f"step_results[{i}] ({s.get('step_name')})"
                break
    if exception:
        detail["exception"] = exception
        if exception.get("naive_occurred_at"):
            detail["naive_timestamps"] = True  # taken as UTC, as started_at below
    if not lone and (d / "exception.txt").is_file():
        detail["exception_txt"] = read_text(d / "exception.txt")

    # ---- the exported `result` string (§4.5) ----
    job_value = None if lone else _job_level_result(d, trial_name)
    result_str: str | None = None
    if job_value is not None:
        result_str = job_value[0]
        detail["result_source"] = f"job result.json {job_value[1]}"
    elif result:
        result_str = _trial_level_result(result)
        if result_str is not None:
            detail["result_source"] = "trial result.json"

    # ---- timestamps ----
    started_raw, finished_raw = result.get("started_at"), result.get("finished_at")
    started_at, naive_start = _parse_ts(started_raw)
    finished_at, naive_finish = _parse_ts(finished_raw)
    if naive_start or naive_finish:
        # Taken as UTC; Harbor wrote naive local time before 2026-01-13.
        detail["naive_timestamps"] = True
    for name, raw_value, parsed in (
        ("started_at", started_raw, started_at),
        ("finished_at", finished_raw, finished_at),
    ):
        if raw_value is not None and parsed is None:
            warnings.append(f"result.json field '{name}': not an ISO 8601 timestamp: {raw_value!r}")
    if isinstance(finished_raw, str):
        detail["finished_at_raw"] = finished_raw
    detail["timings"] = {
        phase: _timing(result.get(phase))
        for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier")
    }

    # ---- tokens and cost ----
    if step_results:
        tokens = _sum_tokens([s.get("agent_result") for s in step_results])
    else:
        tokens = {k: _num(v) for k, v in _tokens(result.get("agent_result")).items()}
        metadata = _d(result.get("agent_result")).get("metadata")
        if metadata is not None:
            detail["agent_metadata"] = _clean_metadata(metadata)

    # ---- verifier output and per-step detail ----
    if multi_step:
        detail["steps"] = [
            _step_summary(base, step_by_name.get(base.name or ""), per_base[base.rel]) for base in bases
        ]
        verifier_output = None
        for base in reversed(bases):
            if per_base[base.rel]["verifier_output"] is not None:
                verifier_output = per_base[base.rel]["verifier_output"]
                detail["verifier_output_from"] = f"{base.rel}verifier/"
                break
        if verifier_output is None:
            verifier_output = _read_verifier_output(d / "verifier")
    else:
        info = per_base[""]
        verifier_output = info["verifier_output"]
        if info["reward_files"]:
            detail["reward_files"] = info["reward_files"]
        for key in ("artifacts_manifest", "artifacts_manifest_error", "legacy_episode_dirs"):
            if key in info:
                detail[key] = info[key]
    detail["multi_step"] = multi_step

    # ---- model naming, as the Hub `model` / `model_provider` columns ----
    model = _text_field("agent_info.model_info.name", collector.trajectory_model or model_info.get("name")
                        or agent_cfg.get("model_name") or None, warnings)
    model_provider = _text_field("agent_info.model_info.provider", model_info.get("provider") or None, warnings)
    fallbacks = {}
    if model is None:
        fallbacks["model"] = "unknown-model"
    if model_provider is None:
        fallbacks["model_provider"] = "unknown-provider"
    if fallbacks:
        detail["hub_fallbacks"] = fallbacks  # what Harbor writes in a Hub row instead of null

    # ---- columns: wrong JSON types are noted in field_warnings, never stored ----
    agent = _text_field("agent_info.name", agent_info.get("name") or agent_cfg.get("name")
                        or (collector.trajectory_agent if lone else None), warnings)
    agent_version = _text_field("agent_info.version", agent_info.get("version"), warnings)
    exception_type = _text_field("exception_info.exception_type", exception.get("type") if exception else None,
                                 warnings)
    exception_message = _text_field("exception_info.exception_message",
                                    exception.get("message") if exception else None, warnings)
    task_checksum = _text_field("task_checksum", result.get("task_checksum"), warnings)
    token_counts = {k: _int_field(f"agent_result.{k}", tokens.get(k), warnings)
                    for k in ("n_input_tokens", "n_cache_tokens", "n_output_tokens")}
    cost_usd = _float_field("agent_result.cost_usd", tokens.get("cost_usd"), warnings)

    # ---- the rest of detail ----
    if result.get("id") is not None:
        detail["trial_id"] = str(result["id"])
    for key in ("trial_uri", "task_id", "source"):
        if key in result:
            detail[key] = result[key]
    if agent_info:
        detail["agent_info"] = agent_info
    if config_file is not None or config:
        detail["config"] = _redact(config_file if config_file is not None else config)
    if collector.summaries:
        detail["trajectories"] = collector.summaries
    if collector.validation:
        detail["validation"] = collector.validation
    if collector.validation_omitted:
        detail["validation_omitted"] = collector.validation_omitted
    if not any(info["has_trajectory"] for info in per_base.values()):
        detail["no_trajectory"] = True
    if dropped:
        detail["large_fields"] = dropped
    detail.update(notes)
    if warnings:
        detail["field_warnings"] = warnings
    if lone:
        detail["lone_trajectory"] = True

    job_id = config.get("job_id")
    return Trial(
        run_key=run_key,
        trial_name=trial_name,
        task_name=str(task_name) if task_name is not None else None,
        status="complete" if complete else "incomplete",
        agent=agent,
        agent_version=agent_version,
        model=model,
        model_provider=model_provider,
        result=result_str,
        reward=primary_reward(rewards),
        rewards=rewards,
        exception_type=exception_type,
        exception_message=exception_message,
        started_at=started_at,
        finished_at=finished_at,
        date_raw=started_raw if isinstance(started_raw, str) else None,
        n_input_tokens=token_counts["n_input_tokens"],
        n_cache_tokens=token_counts["n_cache_tokens"],
        n_output_tokens=token_counts["n_output_tokens"],
        cost_usd=cost_usd,
        verifier_output=verifier_output,
        instruction=instruction,
        task_checksum=task_checksum,
        source_run_id=str(job_id) if job_id else None,
        detail=detail,
        episodes=episodes,
    )
