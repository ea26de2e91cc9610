"""The one writer both ingesters share: prepared batches in (ingest.shape.prepare: records made
ready without the database), rows out.

A unit (a Parquet shard, a trial directory) is written in one transaction together with its
ledger row, so the ledger never claims more than the tables hold. Natural keys decide
identity: a trial is (run, trial_name), an episode is (trial, trace_source, episode_index),
a message is the hash of its text. A key seen again with the same content adds only
provenance; with different content the first version is kept and a conflict is recorded
(unless the conversation finds the row's episode under another key: UnitWriter._place), but
for a trial stored while it ran, which its finished version replaces.
The unit's summary rows (warehouse.summaries) are refreshed in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import filterfalse, repeat
from typing import Any

from sqlalchemy import Connection, Engine, select, text, update

from ingest.process import collector
from ingest.shape.prepare import TRIAL_FIELDS, TRIAL_ROW, Batch, prepare
from ingest.shape.records import Rejected, Run, Trial
from ingest.write import bulk, removal, settle, written_texts
from ingest.write.conversations import Conversations
from warehouse import summaries
from warehouse.db import models
from warehouse.db.schema import HEAD_REVISION
from warehouse.db.session import write_transaction
from warehouse.errors import interruption
from warehouse.hub_columns import FIELD_COLUMNS
from warehouse.runs import dataset_names, labels_of, set_labels, source_run_name
from warehouse.texts import join_text
from warehouse.version import __version__

T = {table.name: table for table in (
    models.sources, models.loads, models.runs, models.tasks, models.trials, models.episodes, models.conversations,
    models.conversation_turns, models.messages, models.episode_loads, models.trial_loads, models.conflicts,
)}

# The tables whose rows a unit finds by their natural keys, and caches.
_KEYED = ("runs", "tasks", "messages", "trials", "episodes")

# Bounds of the per-unit caches (entries); see UnitWriter._forget_if_large.
MESSAGE_CACHE = 200_000
TRIAL_CACHE = 20_000
EPISODE_CACHE = 100_000

# Every stored trial column besides the key, in the order the bulk writer sends them: a batch's
# TRIAL_ROW after its key, with the task's name and the instruction's hash made ids.
TRIAL_COLUMNS = ("task_id", "status", *TRIAL_FIELDS, "detail")
_RUN_KEY, _NAME, _TASK, _INSTRUCTION = (TRIAL_ROW.index(c) for c in ("run_key", "trial_name", "task_name",
                                                                     "instruction_id"))
assert TRIAL_ROW[_TASK + 1:] == TRIAL_COLUMNS[1:]


@dataclass
class UnitCounts:
    n_rows: int = 0
    n_trials: int = 0
    n_episodes_new: int = 0
    n_episodes_duplicate: int = 0
    n_conflicts: int = 0  # episodes whose conversation differs from the stored one's
    n_trial_conflicts: int = 0  # trials with a field that differs from the stored trial's
    n_conflict_rows: int = 0  # rows written to `conflicts`: the episodes', and one per trial field
    n_rejected: int = 0
    n_turns: int = 0  # turns of the episodes the unit added (the rows of the view `turns`)
    n_turns_stored: int = 0  # conversation turns it wrote: each turn of a trajectory once
    n_bytes: int = 0
    conflicts: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # trials the unit deleted (ingest.write.removal), by name


@dataclass(frozen=True)
class NewSource:
    """A source the warehouse does not hold yet, given to `unit` in place of its id: recorded in
    the transaction of its first unit, so that a source none of whose units loads (a mistyped
    file, a corrupt shard) leaves no row in `sources`."""

    kind: str
    uri: str
    name: str
    revision: str | None = None
    card: dict | None = None


def find_source(engine: Engine, kind: str, uri: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(select(T["sources"].c.id).where(
            T["sources"].c.kind == kind, T["sources"].c.uri == uri)).scalar()


def ensure_source(engine: Engine, kind: str, uri: str, name: str, revision: str | None = None,
                  card: dict | None = None) -> int:
    with write_transaction(engine) as conn:
        return _ensure_source(conn, NewSource(kind, uri, name, revision, card))


def _ensure_source(conn: Connection, source: NewSource) -> int:
    """The source's id, its row added if missing; its revision updated where it has a new one."""
    bulk.insert_one_or_skip(conn, T["sources"], dict(kind=source.kind, uri=source.uri, name=source.name,
                                                     revision=source.revision, card=source.card), ["kind", "uri"])
    row = conn.execute(select(T["sources"].c.id, T["sources"].c.revision).where(
        T["sources"].c.kind == source.kind, T["sources"].c.uri == source.uri)).one()
    if source.revision is not None and row.revision != source.revision:
        conn.execute(update(T["sources"]).where(T["sources"].c.id == row.id).values(revision=source.revision))
    return row.id


def name_source_runs(engine: Engine, source_id: int, name: str | None, *, rename: bool = False,
                     labels: dict[str, str] | None = None, source_labels: dict[str, str] | None = None) -> None:
    """After a source's units: every run its rows belong to (run_sources, so runs of units
    loaded by earlier ingests too) gets `name` (warehouse.runs.source_run_name) where it has
    none, or with `rename` (an explicit `ingest --run`) in place of the one it has; `labels`
    (`ingest --label`) replacing the values of their keys, and `source_labels` (a dataset card's)
    where the run has no value for the key. One transaction, and none when nothing changes (a
    re-ingest); a crash before it leaves the runs as they were, and the same ingest run again
    (its units all skipped) does it."""
    def changes(conn: Connection) -> list[tuple[int, str | None, dict[str, str], dict[str, str]]]:
        runs = conn.execute(text(
            "SELECT r.id, r.run_key, r.name FROM run_sources rs JOIN runs r ON r.id = rs.run_id "
            "WHERE rs.source_id = :s ORDER BY r.id"), {"s": source_id}).all()
        have = labels_of(conn, [run_id for run_id, _, _ in runs]) if (labels or source_labels) else {}
        out = []
        for run_id, run_key, current in runs:
            wanted = source_run_name(name, run_key, len(runs)) if name else None
            if rename or not wanted:
                new_name = wanted if wanted and current != wanted else None
            else:
                # Named as if every source were loaded at once: a trace directory's job folder,
                # else the first dataset's name (warehouse.runs.dataset_names); a name given by
                # hand (`ingest --run`, `runs rename`) stays.
                traced, named = dataset_names(conn, run_id, run_key)
                best = named[0] if named else wanted
                new_name = best if current is None or (not traced and current in named and current != best) else None
            own = have.get(run_id, {})
            replace = {k: v for k, v in (labels or {}).items() if own.get(k) != v}
            fill = {k: v for k, v in (source_labels or {}).items() if k not in own and k not in (labels or {})}
            if new_name or replace or fill:
                out.append((run_id, new_name, replace, fill))
        return out

    with engine.connect() as conn:
        if not changes(conn):
            return
    with write_transaction(engine) as conn:
        bulk.lock_for_writing(conn)
        for run_id, new_name, replace, fill in changes(conn):  # again, under the lock
            if new_name:
                conn.execute(update(T["runs"]).where(T["runs"].c.id == run_id).values(name=new_name))
            set_labels(conn, run_id, replace)
            set_labels(conn, run_id, fill, replace=False)


def has_loads(engine: Engine, source_id: int) -> bool:
    """Whether any unit of the source is in the ledger."""
    with engine.connect() as conn:
        loads = T["loads"]
        return conn.execute(select(loads.c.id).where(loads.c.source_id == source_id).limit(1)).first() is not None


def is_loaded(engine: Engine, source_id: int, unit_name: str, content_hash: str) -> bool:
    """Whether the ledger has this unit: its name in the source, with this content. (A copy
    under another name is a unit of its own: its rows are duplicates, and their provenance.)"""
    with engine.connect() as conn:
        loads = T["loads"]
        return conn.execute(select(loads.c.id).where(
            loads.c.source_id == source_id, loads.c.unit == unit_name,
            loads.c.content_hash == content_hash)).first() is not None


class AlreadyLoaded(Exception):
    """Another ingest committed this unit first."""


@contextmanager
def unit(engine: Engine, source: int | NewSource, unit_name: str, content_hash: str,
         arrow_schema: str | None = None, columns: frozenset[str] | None = None) -> Iterator["UnitWriter"]:
    """Write one unit in one transaction. Raises AlreadyLoaded when the ledger has it.
    `source`: its id, or a NewSource recorded with the unit (the writer's `source_id` then).
    `columns`: the shard's column names, when the caller has them (else read from `arrow_schema`,
    which takes pyarrow)."""
    started = datetime.now(timezone.utc)
    with collector.paused(), write_transaction(engine, check_references=False) as conn:
        bulk.lock_for_writing(conn)
        source_id = source if isinstance(source, int) else _ensure_source(conn, source)
        load_id = bulk.insert_one_or_skip(conn, T["loads"], dict(
            source_id=source_id, unit=unit_name, content_hash=content_hash, status="loading",
            started_at=started, finished_at=started, tool_version=__version__, arrow_schema=arrow_schema,
            n_rows=0, n_trials=0, n_episodes_new=0, n_episodes_duplicate=0, n_conflicts=0,
            n_rejected=0, n_turns=0, n_bytes=0,
        ), ["source_id", "unit", "content_hash"])
        if load_id is None:
            raise AlreadyLoaded(unit_name)
        writer = None
        failed = False
        try:
            writer = UnitWriter(conn, load_id, from_hub=arrow_schema is not None,
                                columns=removal.shard_columns(arrow_schema) if columns is None else columns,
                                own_transaction=True)
            writer.source_id = source_id
            yield writer
            writer.settle()
            writer.flush()  # the summaries are computed from the rows written
            summaries.refresh(conn, writer.load_id, writer.touched_trials, writer.linked_runs, writer.left_keys)
            removal.drop_unused_tasks(conn, (task_id for _, task_id in writer.left_keys))
            c = writer.counts
            c.n_trials = len(writer._linked)
            mark = written_texts.mark(conn) if writer.texts is not None else None
            conn.execute(update(T["loads"]).where(T["loads"].c.id == writer.load_id).values(
                status="loaded", finished_at=datetime.now(timezone.utc), n_rows=c.n_rows,
                n_trials=c.n_trials, n_episodes_new=c.n_episodes_new,
                n_episodes_duplicate=c.n_episodes_duplicate, n_conflicts=c.n_conflict_rows,
                n_rejected=c.n_rejected, n_turns=c.n_turns, n_bytes=c.n_bytes,
                detail={"schema_revision": HEAD_REVISION,
                        **({"rejected": [f"{r.where}: {r.reason}" for r in c.rejected[:100]]} if c.rejected else {}),
                        **({"removed_trials": c.removed} if c.removed else {})},
            ))
        except BaseException as exc:
            failed = True
            if interruption(exc) is not None:
                # Ctrl-C or SIGTERM landing in the driver just after it sent a statement on the
                # unit's connection (Bulk's reads go to the driver directly, past SQLAlchemy) can
                # leave the statement's result unread, and the rollback would then fail ("another
                # command is already in progress"; the pool, resetting the connection, logs it as
                # a traceback). The session is closed instead: the server rolls the unit back.
                conn.invalidate()
            raise
        finally:
            if writer is not None:
                # A unit that failed discards its side connection rather than return it to the
                # pool: the failure may be the server's (a cut connection, which the pool's reset
                # would meet with a logged traceback), or a stop may have left a statement of it
                # unread.
                writer.bulk.close(discard=failed)
                # Freed while the collector is still paused (it resumes after the transaction
                # ends): its first pass would otherwise scan every object the caches hold
                # (measured: 18 ms after a unit of the math profile).
                writer.drop_caches()
    written_texts.committed(engine, writer.texts, mark)


class UnitWriter:
    """Writes batches of trials inside one unit's transaction. Ids looked up here are cached
    for the unit only: a rolled-back unit must not leave ids behind for the next one."""

    tables = T

    def __init__(self, conn: Connection, load_id: int, from_hub: bool = True, columns: frozenset[str] = frozenset(),
                 own_transaction: bool = False):
        self.conn = conn
        self.bulk = bulk.Bulk(conn)
        self.load_id = load_id
        self.source_id: int | None = None  # (set by `unit`)
        # A Parquet shard's rows, or a trace directory (richer: its trial wins, see settle).
        self.from_hub = from_hub
        self.columns = columns  # the shard's columns
        self._columns_of: dict[int, frozenset[str]] = {}  # other loads' shard columns, by load id
        self._first_rows: set[int] = set()  # trials whose first row in this shard was merged
        self.counts = UnitCounts()
        self._run_ids: dict[str, int] = {}
        self._task_ids: dict[str, int] = {}
        self._message_ids: dict[bytes, int] = {}
        self._trial_ids: dict[tuple[int, str], int] = {}
        self._trial_values: dict[int, tuple] = {}  # TRIAL_COLUMNS of each cached trial
        # The fields of each trial this unit recorded a conflict for: each once, however many
        # of the trial's rows repeat it.
        self._trial_conflicts: dict[int, set[str]] = {}
        self._episodes: dict[tuple[int, str, int], tuple[int, str, bytes | None]] = {}  # id, hash, settle.extra_key
        self._linked: set[int] = set()  # trials given a trial_loads row by this unit
        self.linked_runs: set[int] = set()  # and their runs
        self.touched_trials: set[int] = set()  # inserted, filled in or given episodes: to summarize
        self.left_keys: set[tuple[int, int]] = set()  # (run, task) keys a trial left for another task
        self._next_row = 0
        self._queued_bytes = 0  # text in rows queued but not yet written
        # Tables whose every row written in this transaction is in this unit's cache (until the
        # cache is dropped, or rows are rewritten behind it): a miss there is a row committed
        # before the unit or none, so it is looked up among the committed rows, which never
        # waits for the flush in flight (Bulk.lookup). Only when the transaction is the unit's
        # own (writer.unit): take_back writes units into a transaction that deleted rows first.
        self._whole = set(_KEYED) if own_transaction else set()
        # Tables that held no row when this unit took the write lock: every row they hold now
        # is in this unit's cache (until the cache is dropped), so a cache miss is a new row
        # and needs no lookup. A first load into an empty warehouse skips every lookup.
        self._fresh = self.bulk.empty_tables([T[name] for name in _KEYED])
        # The texts this process wrote, when it wrote every text the warehouse holds: a text not
        # among them is new without a lookup (ingest.write.written_texts). A unit's own only.
        self.texts = written_texts.for_unit(conn, load_id, "messages" in self._fresh) if own_transaction else None
        # Runs and trials this unit created (while their children's cache is whole): a trial
        # of a new run, or an episode of a new trial, can only come from this unit, so a cache
        # miss under one is a new row too. And its episodes: a key repeated within the unit
        # with another conversation is another episode (see _place).
        self._created: dict[str, set[int]] = {"runs": set(), "trials": set(), "episodes": set()}
        # Order independence (ingest.write.settle): trials whose Hub rows are placed again when the
        # unit ends, the Hub rows a trace directory took up from its trial, and episodes given
        # a row whose columns differ from theirs (placed again if only Hub rows made them).
        self._unsettled: set[int] = set()
        self._taken: dict[int, settle.Taken] = {}
        self._own_columns: set[int] = set()
        self._named: set[int] = set()  # runs whose name this (trace) unit checked
        self.conversations = Conversations(self)

    # -- public ------------------------------------------------------------------------------

    def settle(self) -> None:
        """Place again, all at once, the Hub rows of every trial this unit left in a state that
        could depend on the order rows came in (ingest.write.settle)."""
        if self._own_columns:
            self._unsettled |= settle.hub_made(self, self._own_columns)
        for trial_id in sorted(self._unsettled | set(self._taken)):
            taken = self._taken.pop(trial_id, None) or settle.take_up(self, trial_id)
            settle.place(self, trial_id, taken)
        self._unsettled.clear()

    @property
    def created_episodes(self) -> set[int]:
        return self._created["episodes"]

    @property
    def created_trials(self) -> set[int]:
        return self._created["trials"]

    def forget_episodes(self, trial_id: int) -> None:
        """Drop the cached episodes of a trial whose episodes were rewritten."""
        for key in [k for k in self._episodes if k[0] == trial_id]:
            del self._episodes[key]
        self._forget("episodes")

    def drop_caches(self) -> None:
        """Free what the unit's caches hold, once the unit is written (its counts stay)."""
        for cache in (self._run_ids, self._task_ids, self._message_ids, self._trial_ids, self._trial_values,
                      self._trial_conflicts, self._episodes, self._linked, self.touched_trials, self.linked_runs,
                      self.left_keys, self._first_rows, self._columns_of, self._unsettled, self._taken,
                      self._own_columns, self._named,
                      *self._created.values()):
            cache.clear()
        self.conversations.clear()

    def flush(self, wait: bool = True) -> None:
        """Write every queued row (wait=False: see Bulk.flush)."""
        self.bulk.flush(wait)
        self._queued_bytes = 0

    def execute(self, statement):
        """A statement of its own: queued rows are written first, so it sees them."""
        self.flush()
        return self.conn.execute(statement)

    def reject(self, rejected: Rejected) -> None:
        self.counts.n_rejected += 1
        self.counts.rejected.append(rejected)

    def add_runs(self, runs: list[Run]) -> None:
        """Run-level facts (a job's config and result): fill what is not known yet; facts read
        while the job ran are replaced by a reading of it further on (see job_progress)."""
        self._ensure_runs([r.run_key for r in runs], {r.run_key: r.name for r in runs if r.name})
        runs_t = T["runs"]
        for run in runs:
            values = {k: v for k, v in dict(name=run.name, job_id=run.job_id, started_at=run.started_at,
                                            finished_at=run.finished_at, detail=run.detail).items()
                      if v is not None}
            if values:
                existing = self.execute(select(runs_t).where(runs_t.c.id == self._run_ids[run.run_key])).one()
                fill = {k: v for k, v in values.items() if getattr(existing, k) is None}
                if self._renames_run(existing, run.name):
                    fill["name"] = run.name
                if job_progress(run.detail) > job_progress(existing.detail):  # (its name is the naming's)
                    fill |= {k: v for k, v in values.items() if k != "name" and v != getattr(existing, k)}
                if fill:
                    self.execute(update(runs_t).where(runs_t.c.id == existing.id).values(**fill))
            if run.labels:
                self.flush()
                set_labels(self.conn, self._run_ids[run.run_key], run.labels, replace=False)

    def _renames_run(self, existing, name: str | None) -> bool:
        """Whether a trace directory's name for a stored run replaces the one it has: a
        directory names its run before any dataset does (richer data wins), so the name a
        dataset gave gives way, and a name given by hand stays."""
        if self.from_hub or not name or existing.name in (None, name):
            return False
        return existing.name in dataset_names(self.conn, existing.id, existing.run_key)[1]

    def _name_runs(self, names: dict[str, str]) -> None:
        """The runs of a trace directory's trials, named by it (_renames_run)."""
        runs_t = T["runs"]
        for key, name in names.items():
            run_id = self._run_ids[key]
            if run_id in self._created["runs"] or run_id in self._named:
                continue
            self._named.add(run_id)
            existing = self.execute(select(runs_t).where(runs_t.c.id == run_id)).one()
            if self._renames_run(existing, name):
                self.execute(update(runs_t).where(runs_t.c.id == run_id).values(name=name))

    def add_trials(self, trials: list[Trial], run_names: dict[str, str] | None = None) -> None:
        """Write a batch of trials and their episodes."""
        self.add_batch(prepare(trials), run_names)

    def add_batch(self, batch: Batch, run_names: dict[str, str] | None = None) -> None:
        """Write a prepared batch: its rejected rows, trials, messages and episodes."""
        for r in batch.rejected:
            self.reject(r)
        if not batch.trials:
            return
        self._forget_if_large()
        trials = list(zip(*batch.trials))  # TRIAL_ROW columns
        self._ensure_runs(trials[_RUN_KEY], run_names or {})
        if not self.from_hub and run_names:
            self._name_runs(run_names)
        self._ensure_tasks([name for name in trials[_TASK] if name is not None])
        self._ensure_messages(batch.messages)
        trial_ids = self._ensure_trials(trials)
        if not self.from_hub:
            known = {t for t in trial_ids if t not in self._created["trials"] and t not in self._taken}
            for trial_id in sorted(settle.hub_trials(self, known)) if known else ():
                self._taken[trial_id] = settle.take_up(self, trial_id)
        self._write_episodes(batch, trial_ids)
        if self.bulk.should_flush(self._queued_bytes):
            self.flush(wait=False)

    def _forget_if_large(self) -> None:
        """The caches hold what this unit has seen; past a bound they are dropped so memory
        stays flat however large the unit. The database (same transaction) still has it all:
        a miss costs a lookup, never correctness.

        Queued rows are written before any cache is dropped: every row not written yet is
        then in a cache, and a lookup (which only sees written rows) is only made for keys
        the caches do not hold."""
        if max(len(self._message_ids) - MESSAGE_CACHE, len(self._trial_ids) - TRIAL_CACHE,
               len(self._episodes) - EPISODE_CACHE) > 0:
            self.flush()
        if len(self._message_ids) > MESSAGE_CACHE:
            self._message_ids.clear()
            self._forget("messages")
        if len(self._trial_ids) > TRIAL_CACHE:
            self._trial_ids.clear()
            self._trial_values.clear()
            self._forget("trials")
            self._created["runs"].clear()
        if len(self._episodes) > EPISODE_CACHE:
            self._episodes.clear()
            self._forget("episodes")
            self._created["trials"].clear()
            self._created["episodes"].clear()

    def _forget(self, table: str) -> None:
        """The table's cache no longer holds every row this unit wrote: its misses are looked
        up in the unit's own transaction from now on."""
        self._whole.discard(table)
        self._fresh.discard(table)

    def _lookup(self, table, key_cols: list[str], keys: list[tuple], value_cols: list[str],
                parent: str | None = None) -> dict[tuple, tuple]:
        """Stored rows for keys missing from the cache: none in a fresh table, nor under a
        `parent` (the key's first column) this unit created."""
        if table.name in self._fresh:
            return {}
        if parent is not None:
            created = self._created[parent]
            keys = [key for key in keys if key[0] not in created]
        if not keys:
            return {}
        return self.bulk.lookup(table, key_cols, keys, value_cols, committed=table.name in self._whole)

    # -- keyed rows ---------------------------------------------------------------------------

    def _insert_new(self, table, key_cols: list[str], key_columns: list[Sequence[Any]],
                    value_columns: list[Sequence[Any]], other_cols: list[str]) -> list[int]:
        """Insert rows for keys the caller found missing, given as columns (one per key column,
        one per other column); their new ids, in the rows' order."""
        ids = self.bulk.allocate_ids(table, len(key_columns[0]))
        self.bulk.insert(table, ["id", *key_cols, *other_cols], [ids, *key_columns, *value_columns])
        if table.name in self._created:
            self._created[table.name].update(ids)
        return ids

    def _ensure(self, table, key_col: str, cache: dict, rows: dict[Any, tuple], other_cols: list[str],
                stored: Callable[[list], list] = list) -> dict[Any, tuple]:
        """Ids for single-column keys (runs, tasks, messages), creating the missing ones; the
        rows it created, by key. `stored`: of the keys missing from the cache, those that may be
        stored (the others are new without a lookup)."""
        missing = list(filterfalse(cache.__contains__, rows))
        if not missing:
            return {}
        if table.name not in self._fresh:
            found = self._lookup(table, [key_col], [(k,) for k in stored(missing)], ["id"])
            cache.update({key[0]: values[0] for key, values in found.items()})
            missing = list(filterfalse(cache.__contains__, missing))
        new = rows if len(missing) == len(rows) else {k: rows[k] for k in missing}
        if new:
            cache.update(zip(new, self._insert_new(table, [key_col], [missing], list(zip(*new.values())), other_cols)))
        return new

    def _ensure_runs(self, keys: Sequence[str], names: dict[str, str]) -> None:
        self._ensure(T["runs"], "run_key", self._run_ids, {k: (names.get(k),) for k in keys}, ["name"])

    def _ensure_tasks(self, names: list[str]) -> None:
        self._ensure(T["tasks"], "name", self._task_ids, {n: () for n in names}, [])

    def _ensure_messages(self, messages: dict[bytes, tuple]) -> None:
        texts = self.texts
        new = self._ensure(T["messages"], "content_hash", self._message_ids, messages,
                           ["content", "content_raw", "n_chars"], list if texts is None else texts.may_hold)
        if texts is not None:
            texts.add(new)
        # Bytes of text this unit added: only the messages it created, not those it found. A
        # text's UTF-8 is its content, or its exact bytes where the content is a safe copy.
        added = sum(len(content if raw is None else raw) for content, raw, _ in new.values())
        self.counts.n_bytes += added
        self._queued_bytes += added

    # -- trials -------------------------------------------------------------------------------

    def _ensure_trials(self, trials: list[tuple]) -> list[int]:
        """Ids of a batch's trials, given as TRIAL_ROW columns: new ones inserted, known ones
        merged with what they bring."""
        run_ids, task_ids, message_ids = self._run_ids, self._task_ids, self._message_ids
        keys = list(zip(map(run_ids.__getitem__, trials[_RUN_KEY]), trials[_NAME]))
        columns = list(trials[_TASK:])  # TRIAL_COLUMNS, once names and hashes are ids
        columns[0] = [None if name is None else task_ids[name] for name in columns[0]]
        i = _INSTRUCTION - _TASK
        columns[i] = [None if digest is None else message_ids[digest] for digest in columns[i]]
        incoming = list(zip(*columns))
        unknown = [k for k in dict.fromkeys(keys) if k not in self._trial_ids]
        new: dict[tuple, tuple] = {}
        if unknown:
            trials_t = T["trials"]
            found = self._lookup(trials_t, ["run_id", "trial_name"], unknown, ["id", *TRIAL_COLUMNS], parent="runs")
            for key, (trial_id, *values) in found.items():
                self._trial_ids[key] = trial_id
                self._trial_values[trial_id] = tuple(values)
            for key, values in zip(keys, incoming):
                if key not in self._trial_ids:
                    new.setdefault(key, values)
            if new:
                ids = self._insert_new(trials_t, ["run_id", "trial_name"], list(zip(*new)), list(zip(*new.values())),
                                       list(TRIAL_COLUMNS))
                for key, trial_id in zip(new, ids):
                    self._trial_ids[key] = trial_id
                    self._trial_values[trial_id] = new[key]
                self.touched_trials.update(ids)
                self._first_rows.update(ids)
            link = [self._trial_ids[k] for k in unknown if self._trial_ids[k] not in self._linked]
            self.bulk.insert(T["trial_loads"], ["trial_id", "load_id"], [link, [self.load_id] * len(link)])
            self._linked.update(link)
            self.linked_runs.update(run_id for run_id, _ in unknown)
        ids = []
        for key, values in zip(keys, incoming):
            trial_id = self._trial_ids[key]
            if new.get(key) is not values:  # the row a trial was just created from has nothing to add
                self._merge_trial(key[0], trial_id, values)
            ids.append(trial_id)
        return ids

    def _merge_trial(self, run_id: int, trial_id: int, incoming_row: tuple) -> None:
        """Fill what the stored trial lacks; record where the two disagree. A trial stored while
        it ran (incomplete: no result.json yet) is replaced by its finished version, and a
        snapshot taken while it ran adds nothing to the finished one."""
        if incoming_row == self._trial_values[trial_id]:  # a trial's every row says the same, mostly
            return
        kept = dict(zip(TRIAL_COLUMNS, self._trial_values[trial_id]))
        incoming = dict(zip(TRIAL_COLUMNS, incoming_row))
        if kept["status"] == "complete" and incoming["status"] == "incomplete":
            return
        if kept["status"] == "incomplete" and incoming["status"] == "complete":
            # What was known while it ran is stale, not a disagreement: every column, detail
            # whole, becomes the finished trial's, so the row is what a single ingest of the
            # finished trial leaves. Its task too (a running trial's is guessed from config.json),
            # unless the finished one names none.
            if incoming["task_id"] is None:
                incoming["task_id"] = kept["task_id"]
            elif kept["task_id"] not in (None, incoming["task_id"]):
                self.left_keys.add((run_id, kept["task_id"]))
            self._write_trial(trial_id, kept, {name: value for name, value in incoming.items() if value != kept[name]})
            return
        if self.from_hub and trial_id not in self._first_rows:
            self._first_rows.add(trial_id)
            for name, column in FIELD_COLUMNS.items():
                if column in self.columns and incoming[name] is None and kept[name] is not None:
                    self._absent(trial_id, name, kept[name], self.load_id)
        fill: dict[str, Any] = {}
        # Which value is kept must not depend on which came first: a trace directory's over a
        # dataset's (richer data wins), and between two of a kind the smaller (_order_key).
        winner = None  # by kind: "incoming", "stored", or "" when both are of a kind
        for name in TRIAL_FIELDS:
            new, old = incoming[name], kept[name]
            if new is None or new == old:
                continue
            if old is None:
                fill[name] = new
                if name in FIELD_COLUMNS:
                    self._absent_before(trial_id, name, new)
            elif not _same_instant(old, new) and name not in self._trial_conflicts.get(trial_id, ()):
                if winner is None:
                    winner = self._winner_by_kind(trial_id)
                if winner == "incoming" or (winner == "" and self._order_key(name, new) < self._order_key(name, old)):
                    fill[name] = new
                    self._kept_instead(trial_id, name, new, old, self._step_value(name, old, incoming["detail"]))
                elif self._step_value(name, new, kept["detail"]):
                    self.conflict_row(self.load_id, "trial", trial_id, name, {name: _jsonable(old)},
                                      {name: _jsonable(new)}, None, counted=False)
                else:
                    self._conflict("trial", trial_id, name, {name: _jsonable(old)}, {name: _jsonable(new)}, None)
        if incoming["task_id"] is not None and (kept["task_id"] is None or winner == "incoming"):
            if kept["task_id"] not in (None, incoming["task_id"]):
                self.left_keys.add((run_id, kept["task_id"]))
            fill["task_id"] = incoming["task_id"]
        if kept["status"] == "incomplete" and incoming["status"] == "complete":
            fill["status"] = "complete"
        if incoming["detail"] and incoming["detail"] != kept["detail"]:
            first, second = (kept, incoming) if winner == "incoming" else (incoming, kept)
            fill["detail"] = {**(first["detail"] or {}), **(second["detail"] or {})}
        self._write_trial(trial_id, kept, fill)

    def _absent(self, trial_id: int, name: str, kept: Any, load_id: int) -> None:
        """A unit whose shard has the column of a trial field left it empty where the trial has
        a value: recorded (a conflict whose value is null, neither counted nor reported: one
        source lacking what another has is no disagreement) so that its export writes it empty."""
        self.conflict_row(load_id, "trial", trial_id, name, {name: _jsonable(kept)}, {name: None}, None,
                          counted=False)

    def _absent_before(self, trial_id: int, name: str, new: Any) -> None:
        """This unit fills a trial field: each earlier shard that has its column had it empty."""
        conflicts, trial_loads, loads = T["conflicts"], T["trial_loads"], T["loads"]
        column = FIELD_COLUMNS[name]
        others = self.execute(select(loads.c.id, loads.c.arrow_schema).join(
            trial_loads, trial_loads.c.load_id == loads.c.id).where(
            trial_loads.c.trial_id == trial_id, loads.c.id != self.load_id, loads.c.arrow_schema.is_not(None))).all()
        if not others:
            return
        recorded = set(self.execute(select(conflicts.c.load_id).where(
            conflicts.c.entity == "trial", conflicts.c.entity_id == trial_id, conflicts.c.field == name)).scalars())
        for load_id, schema in others:
            if load_id not in self._columns_of:
                self._columns_of[load_id] = removal.shard_columns(schema)
            if column in self._columns_of[load_id] and load_id not in recorded:
                self._absent(trial_id, name, new, load_id)

    def _step_value(self, name: str, value: Any, detail: dict | None) -> bool:
        """Whether a dataset's value of a trial field is one step's own value of a multi-step
        trial a trace directory gave (its trials.detail["steps"]): Harbor's export of a step
        carries the step's instruction and verifier output, which is no disagreement."""
        column = {"instruction_id": "instruction", "verifier_output": "verifier_output"}.get(name)
        steps = (detail or {}).get("steps") if column else None
        if not steps or not isinstance(steps, list):
            return False
        values = {step.get(column) for step in steps if isinstance(step, dict)} - {None}
        if name == "instruction_id" and values:
            messages = T["messages"]
            value = join_text(*self.execute(select(messages.c.content, messages.c.content_raw)
                                            .where(messages.c.id == value)).one())
        return value in values

    def _kept_instead(self, trial_id: int, name: str, new: Any, old: Any, agreed: bool = False) -> None:
        """This unit's value of a trial field is kept instead of the stored one: each other unit
        of the trial now disagrees with it (a conflict naming that unit and its value, so an
        export of its source gives its value back), unless it carried this unit's value.
        `agreed`: the stored value is no disagreement (_step_value), only recorded."""
        conflicts, trial_loads = T["conflicts"], T["trial_loads"]
        recorded = {row.load_id: row for row in self.execute(
            select(conflicts.c.id, conflicts.c.load_id, conflicts.c.incoming).where(
                conflicts.c.entity == "trial", conflicts.c.entity_id == trial_id, conflicts.c.field == name))}
        for load_id in self.conn.execute(select(trial_loads.c.load_id).where(
                trial_loads.c.trial_id == trial_id, trial_loads.c.load_id != self.load_id)).scalars():
            row = recorded.get(load_id)
            if row is None:
                self.conflict_row(load_id, "trial", trial_id, name, {name: _jsonable(new)}, {name: _jsonable(old)}, None,
                                  counted=not agreed)
            elif (row.incoming or {}).get(name) == _jsonable(new):
                self.conn.execute(conflicts.delete().where(conflicts.c.id == row.id))
            else:
                self.conn.execute(update(conflicts).where(conflicts.c.id == row.id).values(kept={name: _jsonable(new)}))
        if agreed:
            return
        if trial_id not in self._trial_conflicts:  # this unit disagreed with the stored trial
            self.counts.n_trial_conflicts += 1
        self._trial_conflicts.setdefault(trial_id, set()).add(name)

    def _winner_by_kind(self, trial_id: int) -> str:
        """For a trial whose stored value and this unit's differ, which one wins by the kind of
        its source: "incoming" (a trace directory over a trial only datasets gave), "stored" (a
        dataset's row against a trial a trace directory gave), or "" when both are of a kind
        (then the smaller value is kept)."""
        loads, trial_loads = T["loads"], T["trial_loads"]
        traced = self.execute(select(trial_loads.c.load_id).join(loads, loads.c.id == trial_loads.c.load_id).where(
            trial_loads.c.trial_id == trial_id, trial_loads.c.load_id != self.load_id,
            loads.c.arrow_schema.is_(None)).limit(1)).first() is not None
        if self.from_hub:
            return "stored" if traced else ""
        return "" if traced else "incoming"

    def _order_key(self, name: str, value: Any) -> str:
        """A value's place in the order that decides between two of a kind: its JSON text, or
        for the instruction (a message id, which depends on load order) its text's hash."""
        if name == "instruction_id":
            messages = T["messages"]
            digest = self.execute(select(messages.c.content_hash).where(messages.c.id == value)).scalar_one()
            return bytes(digest).hex()
        return json.dumps(_jsonable(value), sort_keys=True, default=str)

    def _write_trial(self, trial_id: int, kept: dict[str, Any], changes: dict[str, Any]) -> None:
        """Store `changes` to the trial whose TRIAL_COLUMNS are `kept`, and summarize it again."""
        if changes:
            self.execute(update(T["trials"]).where(T["trials"].c.id == trial_id).values(**changes))
            kept.update(changes)
            self._trial_values[trial_id] = tuple(kept.values())
            self.touched_trials.add(trial_id)

    # -- episodes -----------------------------------------------------------------------------

    def _write_episodes(self, batch: Batch, trial_ids: list[int]) -> None:
        if not batch.episodes:
            return
        positions, sources, indexes, row_numbers, turn_counts, n_chars, hashes, extras, firsts = zip(*batch.episodes)
        row_numbers = self._row_numbers(row_numbers)
        trial_column = list(map(trial_ids.__getitem__, positions))
        keys = list(zip(trial_column, sources, indexes))
        self.counts.n_rows += len(keys)
        episodes_t = T["episodes"]
        key_cols = ["trial_id", "trace_source", "episode_index"]
        value_cols = ["n_turns", "n_chars", "conversation_hash", "extra", "conversation_id"]
        unknown = list(filterfalse(self._episodes.__contains__, keys))
        found = self._lookup(episodes_t, key_cols, unknown, ["id", "conversation_hash", "extra"], parent="trials")
        self._episodes.update({k: (ep_id, chash, settle.extra_key(extra)) for k, (ep_id, chash, extra) in found.items()})
        # A key an earlier unit's trial lacks may still be one of its episodes: Harbor exports
        # each step of a multi-step trial, and each subagent of a per-subagent dataset, under the
        # keys of a trial's main trajectory (see _place).
        misses = set() if "episodes" in self._fresh else {
            k for k in unknown if k not in found and k[0] not in self._created["trials"]}
        message_ids = self._message_ids
        roles, turn_extras = batch.turns.roles, batch.turns.extras
        try:
            turn_messages = list(map(message_ids.__getitem__, batch.turns.digests))
        except KeyError:  # a turn without content (None) is no key: one at a time, then
            turn_messages = [message_ids[digest] if digest is not None else None for digest in batch.turns.digests]
        def conversations_of(rows: Iterable[int]) -> dict[int, int | None]:
            """The conversation each of the batch's rows is a prefix of (ingest.write.conversations).
            Rows whose turns are one run of the batch (a trajectory's episodes, see
            ingest.shape.prepare) are placed together."""
            runs: dict[tuple[int, int], list[int]] = {}
            for row in rows:
                runs.setdefault((trial_column[row], firsts[row]), []).append(row)
            out: dict[int, int | None] = {}
            for (trial_id, first), members in runs.items():
                lengths = [turn_counts[row] for row in members]
                end = first + max(lengths)
                out.update(zip(members, self.conversations.place_prefixes(
                    trial_id, roles[first:end], turn_messages[first:end], turn_extras[first:end], lengths)))
            return out

        if not found and not misses and len(unknown) == len(keys) == len(set(keys)):
            # Every row is a new episode (a first load): written column by column, each on
            # its conversation.
            placed = conversations_of(range(len(keys)))
            conversation_ids = [placed[row] for row in range(len(keys))]
            ep_ids = self._insert_new(episodes_t, key_cols, [trial_column, sources, indexes],
                                      [turn_counts, n_chars, hashes, extras, conversation_ids], value_cols)
            self._episodes.update(zip(keys, zip(ep_ids, hashes, map(settle.extra_key, extras))))
            self.touched_trials.update(trial_column)
            self.counts.n_episodes_new += len(ep_ids)
            self.counts.n_turns += sum(turn_counts)
            self.bulk.insert(T["episode_loads"], ["load_id", "row_number", "episode_id", "extra"], [
                [self.load_id] * len(keys), row_numbers, ep_ids, [None] * len(keys)])
            return
        new: dict[tuple, tuple] = {}
        places = self._place(keys, list(zip(turn_counts, n_chars, hashes, extras)), misses, new)
        inserted: set[tuple] = set()
        if new:
            founders: dict[tuple, int] = {}  # each new episode's first row, whose turns it has
            for row, place in enumerate(places):
                if place in new:
                    founders.setdefault(place, row)
            key_columns = list(zip(*new))
            placed = conversations_of(founders.values())
            value_columns = [*zip(*new.values()), [placed[founders[key]] for key in new]]
            ep_ids = self._insert_new(episodes_t, key_cols, key_columns, value_columns, value_cols)
            for key, ep_id in zip(new, ep_ids):
                self._episodes[key] = (ep_id, new[key][2], settle.extra_key(new[key][3]))
            inserted = set(new)
            self.touched_trials.update(key_columns[0])
        provenance = []

        def rows_of_turns(ep_id: int, first: int, n_turns: int) -> Iterator[tuple]:
            """(episode_id, idx, role, message_id, extra) of an episode's turns in the batch."""
            end = first + n_turns
            return zip(repeat(ep_id, n_turns), range(n_turns), roles[first:end], turn_messages[first:end],
                       turn_extras[first:end])

        for key, place, row_number, n_turns, chash, extra, first in zip(keys, places, row_numbers, turn_counts,
                                                                        hashes, extras, firsts):
            ep_id, kept_hash, kept_extra = self._episodes[place]  # kept_extra: its settle.extra_key
            if place in inserted:
                inserted.discard(place)  # a second copy of the key in this unit is a duplicate
                self.counts.n_episodes_new += 1
                self.counts.n_turns += n_turns
                provenance.append((self.load_id, row_number, ep_id, None))
                continue
            if self.from_hub and (place != key or kept_hash != chash):
                self._unsettled.add(key[0])
            if kept_hash == chash:
                self.counts.n_episodes_duplicate += 1
            else:
                # The stored conversation is kept; this row's is kept in the conflict (its texts
                # are stored messages), so an export of this row's source can give it back. A Hub
                # row's is counted and reported once its trial is settled (the conflict may not
                # stay: settle places it again).
                conversation = [[role, mid, turn_extra]
                                for _, _, role, mid, turn_extra in rows_of_turns(ep_id, first, n_turns)]
                self.conflict_row(self.load_id, "episode", ep_id, "conversation", {"conversation_hash": kept_hash},
                                  {"conversation_hash": chash, "n_turns": n_turns, "turns": conversation}, row_number,
                                  counted=not self.from_hub)
            if place != key:  # found by its conversation: its own key goes with its provenance
                extra = settle.own_key(extra, key[1:])
            # The row's own extra columns, where they differ from the stored episode's.
            own_extra = None if settle.extra_key(extra) == kept_extra else (extra or {})
            if own_extra is not None and self.from_hub:
                self._own_columns.add(ep_id)
            provenance.append((self.load_id, row_number, ep_id, own_extra))
        self.bulk.insert(T["episode_loads"], ["load_id", "row_number", "episode_id", "extra"], _columns(provenance, 4))

    def _place(self, keys: list[tuple], values: list[tuple], misses: set[tuple], new: dict[tuple, tuple]
               ) -> list[tuple]:
        """The key of the episode each row lands on, filling `new` with the episodes to create
        ({key: (n_turns, n_chars, conversation_hash, extra)}).

        Natural keys cannot tell apart the steps of a multi-step trial, nor a per-subagent
        dataset's rows from the main trajectory's (Harbor exports all of them as main
        episode-N); their conversations can. So a row whose key is stored with another
        conversation, or is missing from a trial an earlier unit stored, first looks for the one
        episode of its trial with its index and conversation (under any trace source) and lands
        there as a duplicate. Failing that, a missing key is a new episode; a key this unit created
        with another conversation is another episode the same export holds (another step), kept
        under the next free "<source>#<n>" (as the trace reader names repeated sources); a key
        an earlier unit stored is a conflict."""
        cache = self._episodes
        suspect = {(k[0], k[2], v[2]) for k, v in zip(keys, values)
                   if k in misses or (k in cache and cache[k][1] != v[2])}
        by_content = self._episodes_by_content(suspect) if suspect else {}
        created = self._created["episodes"]
        places = []
        for key, value in zip(keys, values):
            chash = value[2]
            kept = cache[key][1] if key in cache else new[key][2] if key in new else None
            place = key
            if kept != chash:
                matches = by_content.get((key[0], key[2], chash), ())
                if len(matches) == 1 and (kept is not None or key in misses):
                    place = next(iter(matches))
                elif kept is None:
                    new[key] = value
                elif key in new or cache[key][0] in created:
                    place = self._next_free(key, value, new)
                if place in new and suspect:  # a later row of the batch may have its conversation
                    by_content.setdefault((key[0], key[2], chash), set()).add(place)
            places.append(place)
        return places

    def _next_free(self, key: tuple, value: tuple, new: dict[tuple, tuple]) -> tuple:
        """The first "<source>#<n>" key of the trial and index that is free (then queued in
        `new`, its extra keeping the row's own trace_source) or holds this conversation."""
        trial_id, source, index = key
        n = 2
        while True:
            candidate = (trial_id, f"{source}#{n}", index)
            if candidate not in self._episodes and candidate not in new:
                found = self._lookup(T["episodes"], ["trial_id", "trace_source", "episode_index"], [candidate],
                                     ["id", "conversation_hash", "extra"], parent="trials")
                for k, (ep_id, chash, extra) in found.items():
                    self._episodes[k] = (ep_id, chash, settle.extra_key(extra))
            held = self._episodes.get(candidate) or new.get(candidate)
            if held is None:
                new[candidate] = (*value[:3], settle.own_key(value[3], key[1:]))
                return candidate
            if (held[1] if candidate in self._episodes else held[2]) == value[2]:
                return candidate
            n += 1

    def _episodes_by_content(self, wanted: set[tuple[int, int, str]]) -> dict[tuple[int, int, str], set[tuple]]:
        """{(trial_id, episode_index, conversation_hash): keys of the trial's episodes of that
        index with that conversation}, every trace source; the episodes found are cached. One
        index search per trial (the episodes' key starts with trial_id), and only for rows whose
        key did not decide."""
        episodes_t = T["episodes"]
        hashes = {chash for _, _, chash in wanted}
        stmt = select(episodes_t.c.id, episodes_t.c.trial_id, episodes_t.c.trace_source, episodes_t.c.episode_index,
                      episodes_t.c.conversation_hash, episodes_t.c.extra)
        out: dict[tuple[int, int, str], set[tuple]] = {}
        trial_ids = sorted({trial_id for trial_id, _, _ in wanted})
        for start in range(0, len(trial_ids), 500):
            rows = self.execute(stmt.where(episodes_t.c.trial_id.in_(trial_ids[start:start + 500]),
                                            episodes_t.c.conversation_hash.in_(hashes)))
            for ep_id, trial_id, source, index, chash, extra in rows:
                if (trial_id, index, chash) in wanted:
                    key = (trial_id, source, index)
                    self._episodes.setdefault(key, (ep_id, chash, settle.extra_key(extra)))
                    out.setdefault((trial_id, index, chash), set()).add(key)
        return out

    def _row_numbers(self, given: Sequence[int | None]) -> Sequence[int]:
        """Each row's place in its unit: its own (a shard's row number), or else the next one
        (a trace directory's episodes, numbered in reading order)."""
        if None not in given:
            self._next_row = max(self._next_row, max(given) + 1)
            return given
        numbers = []
        for number in given:
            if number is None:
                number = self._next_row
            self._next_row = max(self._next_row, number) + 1
            numbers.append(number)
        return numbers

    def _conflict(self, entity: str, entity_id: int, field_name: str | None, kept: dict, incoming: dict,
                  row_number: int | None) -> None:
        self.conflict_row(self.load_id, entity, entity_id, field_name, kept, incoming, row_number)

    def conflict_row(self, load_id: int, entity: str, entity_id: int, field_name: str | None, kept: dict,
                     incoming: dict, row_number: int | None, counted: bool = True) -> None:
        """Record that `load_id`'s row disagreed with what is kept (counted when it is this unit's)."""
        row = (load_id, entity, entity_id, field_name, kept, incoming, row_number)
        self.bulk.insert(T["conflicts"], ["load_id", "entity", "entity_id", "field", "kept", "incoming", "row_number"],
                         [[value] for value in row])
        if load_id != self.load_id or not counted:
            return
        self.counts.n_conflict_rows += 1
        if entity == "episode":
            self.counts.n_conflicts += 1
        elif entity_id not in self._trial_conflicts:  # a trial counts once, whatever its fields
            self.counts.n_trial_conflicts += 1
        if entity == "trial":
            self._trial_conflicts.setdefault(entity_id, set()).add(field_name)
        if len(self.counts.conflicts) < 20:
            where = f"row {row_number}" if row_number is not None else f"{entity} {entity_id}"
            self.counts.conflicts.append(f"{where}: {entity} {field_name} differs from the stored one")


def job_progress(detail: dict | None) -> tuple[bool, int, bool]:
    """How far on a job was when its files were read (traces.read_job's detail): finished, then
    trials done, then whether it had a result.json at all. Harbor rewrites the file as the job
    goes, so the further reading is the truer one, whichever is ingested first."""
    detail = detail if isinstance(detail, dict) else {}
    done = [detail.get(k) for k in ("n_completed_trials", "n_errored_trials")]
    return detail.get("finished") is True, sum(n for n in done if isinstance(n, int)), "stats" in detail


def _columns(rows: list[tuple], width: int) -> list[Sequence[Any]]:
    """Rows of `width` values as columns."""
    return list(zip(*rows)) if rows else [()] * width


def _same_instant(a: Any, b: Any) -> bool:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a.replace(tzinfo=a.tzinfo or timezone.utc) == b.replace(tzinfo=b.tzinfo or timezone.utc)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-12 * max(1.0, abs(a))
    return False


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
