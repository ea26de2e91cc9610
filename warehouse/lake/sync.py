"""`warehouse lake sync OUT`: keep a lake (warehouse.lake.layout) current, writing only what
changed since its last sync.

What each table gets:

- The run-scoped tables (trials, trial_loads, episodes, episode_loads, conversations,
  conversation_turns; `OUT/<table>/run_id=<id>/`) and the summaries kept per run (trial_lengths,
  run_task_breakdown, run_task_outcomes; one file per run in their plain folder,
  `part-s<sync>-r<run>-*.parquet`) are written run by run: a new or changed run's files are
  written anew under names no earlier sync used, a deleted run's are dropped, and an unchanged
  run's files stay as they are (same path, bytes and mtime).
- `messages` (the largest table, content-addressed, only ever inserted or deleted) is appended
  to: the rows above the last sync's largest id, as new files. A delete that removed texts leaves
  them in the lake as orphans: rewriting the whole table after every delete (or every finished
  incomplete trial, which may drop its snapshot's texts) would make those syncs cost the
  warehouse, not the change, and every reader reaches messages through conversation_turns or
  trials.instruction_id, so an orphan changes no answer. `--full` rewrites everything, orphans
  gone. The one case an append cannot take is SQLite handing a deleted largest id to a new text
  (it reuses ids from the top): the row at the last sync's largest id is checked by its hash,
  and when it is gone or another text, the table is rewritten whole.
- `loads` (a row per unit: per trial, for trace directories) is appended to as well: a unit's
  row is written once, in its own transaction, and never changed, so while the ledger below the
  last sync's last unit stands (step 4 below) the units above it are all that is new; after a
  delete took units away it is written whole.
- The other shared tables (runs, run_labels, run_sources, tasks, sources, conflicts) are small
  (they grow with runs, tasks and disagreements, not trials), and change without a unit (`runs
  rename`, `runs label`), so each sync writes them whole; a table whose files come out byte for
  byte as before (same SHA-256) keeps its old files and the new ones are removed unlisted.

A lake written under another schema revision is written anew (its columns are the old ones), as
with `--full`.

Which runs changed. The cost must follow the change, not the warehouse (a one-run ingest into a
313,020-trial warehouse), so the sync asks the ledger, through indexed columns:

1. Runs touched by new units: `trial_loads` and `episode_loads` with load_id above the last
   sync's largest (each has an index leading with load_id), joined to trials by primary key.
   Every unit that changes a trial's rows (a new trial, new episodes, a finished incomplete
   trial replacing its snapshot, Hub rows placed again) mentions that trial there.
2. Trials per run, from the summary run_task_outcomes (one row per run and task, kept in the
   same transaction as every change to trials): a trial taken away by a unit that mentions
   none (an unfinished trial the job deleted, whose own unit leaves the ledger too: step 4).
3. The runs table itself: a run gone is dropped; a run id that now names another run_key
   (SQLite reuses the largest ids) is rewritten.
4. Whether the ledger below the last sync's largest load id is still what it was: its count and
   sum of ids, and the unit, hash and finish time of the load at that id, through the primary
   key. It is not after `sources delete` or `runs delete` took units away, which can change
   runs no new unit mentions (another source's rows made again). Only then does the sync pay
   a pass over the warehouse: each run's fingerprint (its trial_loads: count, sum and largest
   load id), compared with the one the manifest keeps for it, plus the runs of units that
   finished after the last synced one (ids SQLite handed out again).

Measured on bench/out/work/serve.db (math×5: 78,256 trials, 6 runs, SQLite, read immutable):
steps 1-4 take 3.4 ms together, with a new unit or without; the fallback's pass over
trial_loads 38 ms warm, 81 ms cold (at ×20, about four times that, and only after a delete).
Writing the small shared tables whole takes about 30 ms there. Load ids follow commit order
(every writer holds the warehouse's one write lock for its unit's transaction: BEGIN IMMEDIATE,
a PostgreSQL advisory lock), so no unit commits later under an id below one already synced.
The one change this cannot see: a source loaded and taken back whole between two syncs, over
runs it shares with sources synced before (their rows may be made again under new ids while
their ledger ends as it was); `--full` rewrites everything.

The manifest lists, for each file of a run, the units its trials came from (the contract's
`loads`); a shared table's files have `loads: null` (they cover the whole ledger up to the
manifest's bookkeeping.ledger.last_id). A warehouse of trace directories has a unit per trial,
so its manifest grows with the trials (a few bytes per trial and run-scoped table).

Atomic: the new files are written first (whole-file puts, never renamed, under names no sync
used before, a killed sync's included), then manifest.json (locally a temporary file, fsynced,
os.replace'd; on an object store one PUT, which is atomic), then views.sql the same way, then
(with --iceberg) each Iceberg table is brought to the manifest's files (warehouse.lake.iceberg),
and only then are the files removed that none of them names any more (and a killed sync's
leftovers). A reader takes the manifest's files only (warehouse.lake.layout.table_files), so it
sees the old sync or the new one; each file views.sql names is there too, whenever the sync
stops. A killed sync leaves the last manifest and every file it names; the next sync removes
what it left (listing the table folders, which only the writer does). A write that fails (a full
disk) is one line, and the sync's own files are removed. Two syncs on one local folder: the
second fails at once (an flock on OUT/.lake-sync.lock, released by the kernel however the first
ends).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from sqlalchemy import Connection, Engine, func, select

from warehouse.db.copy import snapshot
from warehouse.db.schema import HEAD_REVISION
from warehouse.errors import WarehouseError, first_line
from warehouse.export_tables import (
    EMPTY_PARTITION, PARTITION, RUN_SCOPED, TABLES, VIEWS_SQL, Part, run_query, shared_query, view_definitions, views_sql,
    write_parts,
)
from warehouse.lake.iceberg import Catalog, check_location, publish
from warehouse.lake.layout import FORMAT, MANIFEST, parse_manifest, read_manifest
from warehouse.outdir import check_parent

VERSION = 1
LOCK = ".lake-sync.lock"
TMP = ".tmp"  # a file being replaced locally: NAME.tmp, then os.replace
# What a sync writes at OUT's top, beside the table folders.
_TOP = {LOCK, MANIFEST + TMP, VIEWS_SQL, VIEWS_SQL + TMP}
# Summaries with a run_id column, kept per run: written with their run, one file per run.
PER_RUN = {"trial_lengths", "run_task_breakdown", "run_task_outcomes"}
INCREMENTAL = "messages"
LEDGER = "loads"  # appended to while no unit is taken away (a unit's row never changes once loaded)
WHOLE = [name for name in TABLES if name not in RUN_SCOPED and name not in PER_RUN and name not in (INCREMENTAL, LEDGER)]
_OURS = re.compile(r"part-s(\d+)(-r\d+)?-\d{5,}\.parquet")

_TRIALS, _LOADS, _RUNS = TABLES["trials"], TABLES["loads"], TABLES["runs"]
_TRIAL_LOADS, _EPISODE_LOADS, _EPISODES = TABLES["trial_loads"], TABLES["episode_loads"], TABLES["episodes"]
_OUTCOMES, _MESSAGES = TABLES["run_task_outcomes"], TABLES["messages"]


@dataclass
class SyncInfo:
    out: str
    sync: int  # the manifest's sync number after this one (unchanged when nothing changed)
    changed: bool = False  # whether a new manifest was written
    runs_new: list[int] = field(default_factory=list)
    runs_changed: list[int] = field(default_factory=list)
    runs_removed: list[int] = field(default_factory=list)
    runs_unchanged: int = 0
    files_written: int = 0
    bytes_written: int = 0
    files_removed: int = 0
    messages_rewritten: bool = False
    full_pass: bool = False  # the ledger had units taken away: every run's fingerprint was read
    iceberg: str | None = None  # the Iceberg catalog the lake's tables are published to
    iceberg_tables: int = 0  # tables committed there by this sync

    def line(self) -> str:
        iceberg = "" if self.iceberg is None else \
            f"; Iceberg: {self.iceberg_tables} table{_s(self.iceberg_tables)} committed to {self.iceberg}"
        if not self.changed:
            return f"Synced {self.out}: nothing changed ({self.runs_unchanged} runs, sync {self.sync}){iceberg}"
        written = len(self.runs_new) + len(self.runs_changed)
        return (f"Synced {self.out}: {written} run{_s(written)} written ({len(self.runs_changed)} changed, "
                f"{len(self.runs_new)} new), {len(self.runs_removed)} removed, {self.runs_unchanged} unchanged; "
                f"{self.files_written} file{_s(self.files_written)}, {_size(self.bytes_written)} (sync {self.sync})"
                f"{iceberg}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


# --- where the lake is -------------------------------------------------------------------------


@dataclass
class Destination:
    """Where a sync writes: OUT on its file system (what reads it is warehouse.lake.Lake): `root` is the path the file system takes ('/'-separated)."""

    shown: str
    fs: pafs.FileSystem
    root: str

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def relative(self, path: str) -> str:
        return path[len(self.root) + 1:]


def destination(out: str | os.PathLike[str]) -> Destination:
    """A plain path or a file:// URL is a local folder (its parent must exist, as for `export`);
    another URL (s3://, gs://, hdfs://) goes to the file system pyarrow has for it."""
    text = os.fspath(out)
    if "://" not in text:
        path = Path(text)
        check_parent(path)
        return Destination(text, pafs.LocalFileSystem(), str(path.absolute()).rstrip("/") or "/")
    try:
        fs, root = pafs.FileSystem.from_uri(text)
    except (ValueError, OSError, pa.ArrowException) as exc:
        raise WarehouseError(f"{text}: not a lake location pyarrow can write: {first_line(exc)}") from None
    if isinstance(fs, pafs.LocalFileSystem):
        check_parent(Path(root))
    return Destination(text, fs, root.rstrip("/"))


# --- the sync ----------------------------------------------------------------------------------


def sync_lake(engine: Engine, out: str | os.PathLike[str], *, full: bool = False,
              filesystem: pafs.FileSystem | None = None, iceberg: Catalog | None = None) -> SyncInfo:
    """Bring the lake at `out` up to the warehouse's current state (see the module docstring).
    `filesystem`: write there (any pyarrow file system: S3, GCS, or an fsspec one through
    pyarrow.fs.FSSpecHandler), `out` being the lake's path in it. `iceberg`: publish the
    lake's tables to that Iceberg catalog too (warehouse.lake.iceberg)."""
    lake = destination(out) if filesystem is None else Destination(os.fspath(out), filesystem, os.fspath(out).rstrip("/"))
    if iceberg is not None:
        if filesystem is not None and not lake.local:
            raise WarehouseError("Iceberg names files by URL: give the lake as a URL (s3://…), not a file system")
        check_location(lake.shown, lake.root)
    created = _prepare(lake)
    try:
        return _sync_locked(engine, lake, full, iceberg)
    except BaseException:
        # As a failed export: an OUT this sync made goes again, unless a manifest got in.
        if created and lake.local and not os.path.exists(lake.path(MANIFEST)):
            shutil.rmtree(lake.root, ignore_errors=True)
        raise


def _sync_locked(engine: Engine, lake: Destination, full: bool, iceberg: Catalog | None) -> SyncInfo:
    _read(lake)  # refused before the lock file is made in a folder that is not a lake
    with _locked(lake):
        old = _read(lake)
        if old is not None and old.get("iceberg") and iceberg is None:
            # Without it, this sync would remove files the catalog's tables still name.
            published = old["iceberg"]
            raise WarehouseError(f"{lake.shown}: its tables are published to the Iceberg catalog "
                                 f"{published['catalog']} (namespace {published['namespace']}): give "
                                 f"--iceberg CATALOG to keep them current")
        leftovers = _leftovers(lake, old)
        # Past every number a killed sync used: no file is ever written over, not even a leftover
        # (a killed sync's views.sql may name its files until this one replaces it).
        number = max([old["sync"] if old else 0, *(_sync_of(path) for path in leftovers)]) + 1
        # A lake written under another schema revision is written anew: its files' columns
        # would differ from the new ones' (the read engine has checked the warehouse is at head).
        full = full or (old is not None and old["bookkeeping"].get("schema_revision") != HEAD_REVISION)
        try:
            with snapshot(engine) as conn:
                return _sync(conn, lake, old, None if full else old, number, leftovers, iceberg)
        except OSError as exc:  # a full disk, a file-size limit, a store that refuses a put
            try:  # this sync's files, unless its manifest got in
                named = _read(lake)
                _delete(lake, [path for path in _leftovers(lake, named) if _sync_of(path) == number])
            except (OSError, WarehouseError):
                pass  # the next sync cleans up
            raise WarehouseError(f"{lake.shown}: cannot write: {exc.strerror or first_line(exc)}") from None


def _prepare(lake: Destination) -> bool:
    """OUT: a folder, made if missing (then True), or refused in one line."""
    try:
        info = lake.fs.get_file_info(lake.root)
        if info.type == pafs.FileType.File:
            raise WarehouseError(f"{lake.shown}: exists and is not a directory")
        if info.type != pafs.FileType.NotFound:
            if lake.local and not os.access(lake.root, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            return False
        if lake.local:
            os.mkdir(lake.root)
        else:
            lake.fs.create_dir(lake.root, recursive=True)
        return True
    except OSError as exc:
        raise WarehouseError(f"{lake.shown}: cannot write: {exc.strerror or first_line(exc)}") from None


@contextmanager
def _locked(lake: Destination) -> Iterator[None]:
    """One sync at a time on a local folder. An object store has no lock: run one sync per lake."""
    if not lake.local:
        yield
        return
    try:
        fd = os.open(lake.path(LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WarehouseError(f"{lake.shown}: cannot write: {exc.strerror or first_line(exc)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WarehouseError(f"{lake.shown}: another `warehouse lake sync` is writing this lake; "
                                 "wait for it to finish") from None
        yield
    finally:
        os.close(fd)


def _read(lake: Destination) -> dict | None:
    """The lake's manifest; None for a new lake (OUT empty, or holding only a killed first
    sync's files). Anything else is refused: the sync removes files, so it writes only into a
    folder that is its own."""
    if lake.local:
        manifest = read_manifest(Path(lake.root))
    else:
        manifest = _read_remote_manifest(lake)
    if manifest is not None:
        if manifest.get("version") != VERSION or "bookkeeping" not in manifest:
            raise WarehouseError(f"{lake.shown}/{MANIFEST}: a lake manifest this version cannot keep "
                                 f"(version {manifest.get('version')!r}); sync into a new folder")
        return manifest
    strangers = [info.path for info in _listing(lake, lake.root, recursive=False)
                 if lake.relative(info.path) not in _TOP and not _leftover_folder(lake, info)]
    if strangers:
        raise WarehouseError(f"{lake.shown}: not empty and not a lake (no {MANIFEST}; it holds "
                             f"{lake.relative(strangers[0])}): sync into a new or empty folder")
    return None


def _read_remote_manifest(lake: Destination) -> dict | None:
    try:
        with lake.fs.open_input_stream(lake.path(MANIFEST)) as stream:
            text = stream.read().decode("utf-8")
    except FileNotFoundError:
        return None
    return parse_manifest(text, f"{lake.shown}/{MANIFEST}")


def _listing(lake: Destination, path: str, recursive: bool) -> list[pafs.FileInfo]:
    return lake.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive))


def _leftover_folder(lake: Destination, info: pafs.FileInfo) -> bool:
    """A table folder holding only files a sync names as it writes them (a killed first sync)."""
    if info.type != pafs.FileType.Directory or info.base_name not in TABLES:
        return False
    return all(f.type == pafs.FileType.Directory or _OURS.fullmatch(f.base_name)
               for f in _listing(lake, info.path, recursive=True))


def _leftovers(lake: Destination, manifest: dict | None) -> list[str]:
    """The files a sync names as it writes them that the manifest does not name (a killed or
    failed sync's, relative to OUT). Only the writer lists folders."""
    named = {entry["path"] for entry in manifest["files"]} if manifest else set()
    found = []
    for name in TABLES:
        for info in _listing(lake, lake.path(name), recursive=True):
            if info.type == pafs.FileType.File and _OURS.fullmatch(info.base_name) \
                    and lake.relative(info.path) not in named:
                found.append(lake.relative(info.path))
    return found


def _sync_of(path: str) -> int:
    return int(_OURS.fullmatch(path.rsplit("/", 1)[-1]).group(1))


def _delete(lake: Destination, paths: list[str]) -> None:
    for path in paths:
        lake.fs.delete_file(lake.path(path))


@dataclass
class _Plan:
    write: list[int]  # runs to write, new or changed
    new: list[int]
    changed: list[int]
    removed: list[int]
    unchanged: list[int]
    fingerprints: dict[int, list[int]]  # of the runs to write, and of every run after a full pass
    full_pass: bool
    trials: dict[int, int]  # each run's trials


class _Files:
    """The new manifest's files as a sync builds them: entries of the old manifest kept, and the
    files it writes (under `stem`: part-s<sync>)."""

    def __init__(self, conn: Connection, lake: Destination, old: dict | None, stem: str):
        self.conn, self.lake, self.stem = conn, lake, stem
        self.old = old["files"] if old else []
        self.keep: list[dict] = []
        self.written: list[dict] = []

    def write(self, name: str, stmt, folder: str, *, run_id: int | None = None, loads: list[int] | None = None,
              of_run: int | None = None, stem: str | None = None, keep_empty: bool = False) -> list[dict]:
        parts = write_parts(self.conn, stmt, self.lake.fs, self.lake.path(folder), stem=stem or self.stem,
                            keep_empty=keep_empty)
        entries = [_entry(self.lake, part, name, run_id, loads, of_run) for part in parts]
        self.written += entries
        return entries

    def old_of(self, name: str) -> list[dict]:
        return [e for e in self.old if e["table"] == name]

    def has(self, name: str) -> bool:
        return any(e["table"] == name for e in self.keep + self.written)

    def all(self) -> list[dict]:
        return sorted(self.keep + self.written, key=lambda e: e["path"])


def _sync(conn: Connection, lake: Destination, old: dict | None, old_for_plan: dict | None, number: int,
          leftovers: list[str], iceberg: Catalog | None) -> SyncInfo:
    runs = dict(conn.execute(select(_RUNS.c.id, _RUNS.c.run_key)).all())
    plan = _plan(conn, runs, old_for_plan)
    files = _Files(conn, lake, old, f"part-s{number}")
    incremental = old_for_plan is not None  # else every table is written anew (a new lake, --full)
    _write_runs(files, plan, incremental)
    old_messages = old_for_plan["bookkeeping"]["messages"] if incremental else None
    messages_rewritten = not _messages_still(conn, old_messages)
    _write_messages(files, None if messages_rewritten else old_messages["max_id"])
    _write_ledger(files, old_for_plan["bookkeeping"]["ledger"]["last_id"] if incremental and not plan.full_pass else None)
    _write_whole(files, incremental)

    bookkeeping = _bookkeeping(conn, runs, plan, old_for_plan)
    written = files.written
    info = SyncInfo(out=lake.shown, sync=number, runs_new=plan.new, runs_changed=plan.changed,
                    runs_removed=plan.removed, runs_unchanged=len(plan.unchanged),
                    files_written=len(written), bytes_written=sum(e["bytes"] for e in written),
                    messages_rewritten=messages_rewritten and old is not None, full_pass=plan.full_pass,
                    iceberg=iceberg.shown if iceberg else None)
    entries = files.all()
    views = views_sql(view_definitions(conn), _by_table(entries), by="warehouse lake sync").encode("utf-8")
    published = iceberg.record() if iceberg else None
    if old is not None and not written and len(entries) == len(files.old) and bookkeeping == old["bookkeeping"] \
            and old.get("iceberg") == published:
        info.sync = old["sync"]  # nothing changed: no file written, the manifest as it was
        if _get(lake, VIEWS_SQL) != views:  # a killed sync's views.sql
            _put(lake, VIEWS_SQL, views)
        info.iceberg_tables = _publish(lake, iceberg, old)  # a catalog a failed publish left behind
        _delete(lake, leftovers)
        _remove_temporary(lake)
        return info
    manifest = {"format": FORMAT, "version": VERSION, "sync": number,
                "synced_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "files": entries, "bookkeeping": bookkeeping}
    if published:
        manifest["iceberg"] = published
    info.files_removed, info.iceberg_tables = _commit(lake, manifest, views, written, files.old, leftovers, iceberg)
    info.changed = True
    return info


def _publish(lake: Destination, iceberg: Catalog | None, manifest: dict) -> int:
    """The manifest's files published to the Iceberg catalog, if the lake has one; a failure
    says the Hive lake is synced and keeps every file the catalog may still name."""
    if iceberg is None:
        return 0
    try:
        return publish(iceberg, lake, manifest)
    except WarehouseError as exc:
        raise WarehouseError(f"{lake.shown}: synced (sync {manifest['sync']}), but its Iceberg tables were not "
                             f"published: {exc}; the next sync publishes them") from None


def _write_runs(files: _Files, plan: _Plan, incremental: bool) -> None:
    """The run-scoped tables and the per-run summaries: an unchanged run keeps its files, a new
    or changed one is written; a table no run has rows in gets an empty file (its columns)."""
    rewritten = set(plan.write) | set(plan.removed)
    for entry in files.old:
        run = entry["run_id"] if entry["run_id"] is not None else entry.get("of_run")
        by_run = entry["table"] in RUN_SCOPED or entry["table"] in PER_RUN
        if incremental and by_run and run not in (None, EMPTY_PARTITION) and run not in rewritten:
            files.keep.append(entry)
    for run in plan.write:
        loads = _run_loads(files.conn, run)
        for name in RUN_SCOPED:
            files.write(name, run_query(name, run), f"{name}/{PARTITION}={run}", run_id=run, loads=loads)
        for name in PER_RUN:
            files.write(name, _per_run_query(name, run), name, loads=loads, of_run=run, stem=f"{files.stem}-r{run}")
    for name in [*RUN_SCOPED, *PER_RUN]:
        if files.has(name):
            continue
        placeholder = [e for e in files.old_of(name) if e["rows"] == 0] if incremental else []
        if placeholder:
            files.keep += placeholder
        elif name in RUN_SCOPED:
            files.write(name, run_query(name, EMPTY_PARTITION), f"{name}/{PARTITION}={EMPTY_PARTITION}",
                        run_id=EMPTY_PARTITION, loads=[], keep_empty=True)
        else:
            files.write(name, _per_run_query(name, EMPTY_PARTITION), name, keep_empty=True)


def _write_messages(files: _Files, above: int | None) -> None:
    """messages: the texts above id `above` as new files beside the old ones, or (None) whole."""
    _append_above(files, INCREMENTAL, _MESSAGES, above)


def _write_ledger(files: _Files, above: int | None) -> None:
    """loads: the units above id `above` (the ledger below it as it was), or (None) whole."""
    _append_above(files, LEDGER, _LOADS, above)


def _append_above(files: _Files, name: str, table, above: int | None) -> None:
    """A table appended to: its rows above id `above` as new files beside its old ones, or
    (None) the whole table anew."""
    if above is None:
        files.write(name, shared_query(name), name, keep_empty=True)
        return
    files.keep += files.old_of(name)
    files.write(name, shared_query(name).where(table.c.id > above), name)


def _write_whole(files: _Files, incremental: bool) -> None:
    """The other shared tables, whole; one that comes out as before keeps its old files (the new
    ones, named nowhere, are removed at once)."""
    for name in WHOLE:
        written_before = len(files.written)
        new = files.write(name, shared_query(name), name, keep_empty=True)
        before = files.old_of(name) if incremental else []
        if sorted(e["sha256"] for e in before) == sorted(e["sha256"] for e in new):
            del files.written[written_before:]
            files.keep += before
            _delete(files.lake, [e["path"] for e in new])


def _commit(lake: Destination, manifest: dict, views: bytes, written: list[dict], old: list[dict],
            leftovers: list[str], iceberg: Catalog | None) -> tuple[int, int]:
    """The new files made durable, the manifest put, then views.sql, then the Iceberg tables,
    then the files none of them names removed; returns how many of the old manifest's went, and
    how many Iceberg tables were committed."""
    if lake.local:  # the files on disk before the manifest that names them
        for entry in written:
            _fsync(lake.path(entry["path"]))
    _put(lake, MANIFEST, json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    # views.sql names the manifest's files one by one (a glob would see a later sync's files),
    # after the manifest: until it is replaced it names the last sync's files, still there.
    _put(lake, VIEWS_SQL, views)
    committed = _publish(lake, iceberg, manifest)
    named = {e["path"] for e in manifest["files"]}
    gone = [e["path"] for e in old if e["path"] not in named]
    _delete(lake, gone + leftovers)  # only now: each file either manifest, views.sql or a catalog names stayed till here
    _remove_temporary(lake)
    return len(gone), committed


def _by_table(files: list[dict]) -> dict[str, list[str]]:
    by_table: dict[str, list[str]] = {}
    for entry in files:
        by_table.setdefault(entry["table"], []).append(entry["path"])
    return by_table


def _remove_temporary(lake: Destination) -> None:
    """A temporary file a killed sync left (locally: an object store has none)."""
    for name in (MANIFEST + TMP, VIEWS_SQL + TMP):
        if lake.local and os.path.exists(lake.path(name)):
            os.unlink(lake.path(name))


def _get(lake: Destination, name: str) -> bytes | None:
    try:
        with lake.fs.open_input_stream(lake.path(name)) as stream:
            return stream.read()
    except FileNotFoundError:
        return None


def _entry(lake: Destination, part: Part, table: str, run_id: int | None, loads: list[int] | None,
           of_run: int | None = None) -> dict:
    entry = {"path": lake.relative(part.path), "table": table, "run_id": run_id, "rows": part.rows,
             "bytes": part.bytes, "sha256": part.sha256, "loads": loads}
    if of_run is not None:
        entry["of_run"] = of_run  # a per-run summary's file: its run (the table is not partitioned)
    return entry


def _put(lake: Destination, name: str, data: bytes) -> None:
    """Replace OUT/name whole: locally a temporary file, fsynced, then os.replace'd (and the
    folder fsynced); on an object store one PUT, which replaces an object atomically."""
    if not lake.local:
        with lake.fs.open_output_stream(lake.path(name)) as stream:
            stream.write(data)
        return
    tmp = lake.path(name + TMP)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, lake.path(name))
    _fsync(lake.root)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- what changed ------------------------------------------------------------------------------


def _plan(conn: Connection, runs: dict[int, str], old: dict | None) -> _Plan:
    if old is None:
        ids = sorted(runs)
        return _Plan(ids, ids, [], [], [], _fingerprints(conn, ids), False, _trials_per_run(conn))
    book = old["bookkeeping"]
    known = {int(run): entry for run, entry in book["runs"].items()}
    removed = sorted(run for run in known if run not in runs)
    new = sorted(run for run in runs if run not in known)
    changed = {run for run in runs if run in known and known[run]["run_key"] != runs[run]}
    last = book["ledger"]["last_id"]
    changed |= _runs_of_loads(conn, last=last)
    trials = _trials_per_run(conn)
    changed |= {run for run in runs if run in known and trials.get(run, 0) != known[run]["trials"]}
    full_pass = _ledger(conn, last) != book["ledger"]
    fingerprints: dict[int, list[int]] = {}
    if full_pass:
        fingerprints = _fingerprints(conn, None)
        changed |= {run for run in runs if run in known and fingerprints.get(run) != known[run]["fingerprint"]}
        finished = book["ledger"]["last"][3] if book["ledger"]["last"] else None
        if finished is not None:
            changed |= _runs_of_loads(conn, finished_after=datetime.fromisoformat(finished))
    changed = sorted(run for run in changed if run in known and run in runs)
    write = sorted([*new, *changed])
    if not full_pass:
        fingerprints = _fingerprints(conn, write)
    unchanged = sorted(run for run in runs if run in known and run not in changed)
    return _Plan(write, new, changed, removed, unchanged, fingerprints, full_pass, trials)


def _runs_of_loads(conn: Connection, *, last: int | None = None, finished_after: datetime | None = None) -> set[int]:
    """The runs whose trials some units mention (trial_loads, episode_loads, through their
    load_id indexes): the units above id `last`, or those finished after `finished_after`."""
    if last is not None:
        by_trial_load, by_episode_load = _TRIAL_LOADS.c.load_id > last, _EPISODE_LOADS.c.load_id > last
    else:
        loads = select(_LOADS.c.id).where(_LOADS.c.finished_at > finished_after)
        by_trial_load, by_episode_load = _TRIAL_LOADS.c.load_id.in_(loads), _EPISODE_LOADS.c.load_id.in_(loads)
    by_trial = (select(_TRIALS.c.run_id).join(_TRIAL_LOADS, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id)
                .where(by_trial_load))
    by_episode = (select(_TRIALS.c.run_id).join(_EPISODES, _EPISODES.c.trial_id == _TRIALS.c.id)
                  .join(_EPISODE_LOADS, _EPISODE_LOADS.c.episode_id == _EPISODES.c.id)
                  .where(by_episode_load))
    return set(conn.execute(by_trial.union(by_episode)).scalars())


def _trials_per_run(conn: Connection) -> dict[int, int]:
    stmt = select(_OUTCOMES.c.run_id, func.sum(_OUTCOMES.c.n_trials)).group_by(_OUTCOMES.c.run_id)
    return {run: int(n) for run, n in conn.execute(stmt).all()}


def _fingerprints(conn: Connection, runs: list[int] | None) -> dict[int, list[int]]:
    """Each run's trial_loads: count, sum and largest load id (None: every run's, in one pass)."""
    stmt = (select(_TRIALS.c.run_id, func.count(), func.sum(_TRIAL_LOADS.c.load_id), func.max(_TRIAL_LOADS.c.load_id))
            .join(_TRIAL_LOADS, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id).group_by(_TRIALS.c.run_id))
    if runs is not None:
        if not runs:
            return {}
        stmt = stmt.where(_TRIALS.c.run_id.in_(runs))
    found = {run: [int(n), int(total), int(top)] for run, n, total, top in conn.execute(stmt).all()}
    return {run: found.get(run, [0, 0, 0]) for run in (runs if runs is not None else found)}


def _ledger(conn: Connection, last: int) -> dict:
    """The ledger up to load `last`: count, sum of ids, and the load at `last` (unit, hash, finish)."""
    n, total = conn.execute(select(func.count(), func.coalesce(func.sum(_LOADS.c.id), 0))
                            .where(_LOADS.c.id <= last)).one()
    row = conn.execute(select(_LOADS.c.id, _LOADS.c.unit, _LOADS.c.content_hash, _LOADS.c.finished_at)
                       .where(_LOADS.c.id == last)).first()
    top = [row[0], row[1], row[2], _iso(row[3])] if row else None
    return {"last_id": last, "count": int(n), "sum": int(total), "last": top}


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat()


def _run_loads(conn: Connection, run: int) -> list[int]:
    stmt = (select(_TRIAL_LOADS.c.load_id).join(_TRIALS, _TRIALS.c.id == _TRIAL_LOADS.c.trial_id)
            .where(_TRIALS.c.run_id == run).distinct().order_by(_TRIAL_LOADS.c.load_id))
    return [int(i) for i in conn.execute(stmt).scalars()]


def _per_run_query(name: str, run: int):
    table = TABLES[name]
    stmt = select(table)
    if "trial_id" in table.c:  # trial_lengths: its run_id has no index of its own; trials' has
        stmt = stmt.join(_TRIALS, _TRIALS.c.id == table.c.trial_id).where(_TRIALS.c.run_id == run)
    else:
        stmt = stmt.where(table.c.run_id == run)
    return stmt.order_by(*table.primary_key.columns)


def _messages_still(conn: Connection, kept: dict | None) -> bool:
    """Whether the lake's messages can be appended to: the last sync's largest one is still there."""
    if kept is None:
        return False
    if kept["max_id"] == 0:
        return True
    found = conn.execute(select(_MESSAGES.c.content_hash).where(_MESSAGES.c.id == kept["max_id"])).scalar()
    return found is not None and bytes(found).hex() == kept["hash"]


def _bookkeeping(conn: Connection, runs: dict[int, str], plan: _Plan, old: dict | None) -> dict:
    last = conn.execute(select(func.coalesce(func.max(_LOADS.c.id), 0))).scalar_one()
    trials = plan.trials
    known = {int(run): entry for run, entry in old["bookkeeping"]["runs"].items()} if old else {}
    book_runs = {}
    for run in sorted(runs):
        fingerprint = plan.fingerprints.get(run, known.get(run, {}).get("fingerprint"))
        book_runs[str(run)] = {"run_key": runs[run], "trials": trials.get(run, 0), "fingerprint": fingerprint}
    top = conn.execute(select(_MESSAGES.c.id, _MESSAGES.c.content_hash).order_by(_MESSAGES.c.id.desc()).limit(1)).first()
    messages = {"max_id": int(top[0]), "hash": bytes(top[1]).hex()} if top else {"max_id": 0, "hash": None}
    return {"schema_revision": HEAD_REVISION, "ledger": _ledger(conn, int(last)), "runs": book_runs,
            "messages": messages}
