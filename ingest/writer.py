"""The one writer both ingesters share: normalized records in, rows out.

A unit (a Parquet shard, a trial directory) is written in one transaction together with its
ledger row, so the ledger never claims more than the tables hold. Natural keys decide
identity: a trial is (run, trial_name), an episode is (trial, trace_source, episode_index),
a message is the hash of its text. A key seen again with the same content adds only
provenance; with different content the first version is kept and a conflict is recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Engine, select, update

from ingest import bulk
from ingest.records import Episode, Rejected, Run, Trial
from warehouse import __version__, summaries
from warehouse.db import models
from warehouse.db.session import write_transaction
from warehouse.texts import RAW_TEXT, safe_columns, split_text, to_bytes

T = {name: model.__table__ for name, model in {
    "sources": models.Source, "loads": models.Load, "runs": models.Run, "tasks": models.Task,
    "trials": models.Trial, "episodes": models.Episode, "turns": models.Turn,
    "messages": models.Message, "episode_loads": models.EpisodeLoad,
    "trial_loads": models.TrialLoad, "conflicts": models.Conflict,
}.items()}

# Trial columns that a second source may fill in when the first left them empty, and that
# are recorded as a conflict when both sources say something different.
TRIAL_FIELDS = (
    "agent", "agent_version", "model", "model_provider", "result", "reward", "rewards",
    "exception_type", "exception_message", "started_at", "finished_at", "date_raw",
    "n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd", "verifier_output",
    "task_checksum", "source_run_id", "instruction_id",
)


# Bounds of the per-unit caches (entries); see UnitWriter._forget_if_large.
MESSAGE_CACHE = 200_000
TRIAL_CACHE = 20_000
EPISODE_CACHE = 100_000

# Every stored trial column besides the key, in the order the bulk writer sends them.
TRIAL_COLUMNS = ("task_id", "status", *TRIAL_FIELDS, "detail")


def message_hash(text: str) -> bytes:
    return hashlib.sha256(to_bytes(text)).digest()


def conversation_hash(episode: Episode, hash_text=message_hash) -> str:
    h = hashlib.sha256()
    for turn in episode.turns:
        h.update(to_bytes(turn.role))
        h.update(b"\x00")
        h.update(hash_text(turn.content) if turn.content is not None else b"-")
    return h.hexdigest()


@dataclass
class UnitCounts:
    n_rows: int = 0
    n_trials: int = 0
    n_episodes_new: int = 0
    n_episodes_duplicate: int = 0
    n_conflicts: int = 0
    n_rejected: int = 0
    n_turns: int = 0
    n_bytes: int = 0
    conflicts: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


def ensure_source(engine: Engine, kind: str, uri: str, name: str, revision: str | None = None,
                  card: dict | None = None) -> int:
    with write_transaction(engine) as conn:
        bulk.insert_one_or_skip(conn, T["sources"], dict(kind=kind, uri=uri, name=name, revision=revision,
                                                         card=card), ["kind", "uri"])
        row = conn.execute(select(T["sources"].c.id, T["sources"].c.revision).where(
            T["sources"].c.kind == kind, T["sources"].c.uri == uri)).one()
        if revision is not None and row.revision != revision:
            conn.execute(update(T["sources"]).where(T["sources"].c.id == row.id).values(revision=revision))
        return row.id


def is_loaded(engine: Engine, source_id: int, content_hash: str) -> bool:
    with engine.connect() as conn:
        loads = T["loads"]
        return conn.execute(select(loads.c.id).where(
            loads.c.source_id == source_id, loads.c.content_hash == content_hash)).first() is not None


class AlreadyLoaded(Exception):
    """Another ingest committed this unit first."""


@contextmanager
def unit(engine: Engine, source_id: int, unit_name: str, content_hash: str,
         arrow_schema: str | None = None) -> Iterator["UnitWriter"]:
    """Write one unit in one transaction. Raises AlreadyLoaded when the ledger has it."""
    started = datetime.now(timezone.utc)
    with write_transaction(engine) as conn:
        bulk.lock_for_writing(conn)
        load_id = bulk.insert_one_or_skip(conn, T["loads"], dict(
            source_id=source_id, unit=unit_name, content_hash=content_hash, status="loading",
            started_at=started, finished_at=started, tool_version=__version__, arrow_schema=arrow_schema,
            n_rows=0, n_trials=0, n_episodes_new=0, n_episodes_duplicate=0, n_conflicts=0,
            n_rejected=0, n_turns=0, n_bytes=0,
        ), ["source_id", "content_hash"])
        if load_id is None:
            raise AlreadyLoaded(unit_name)
        writer = UnitWriter(conn, load_id)
        yield writer
        summaries.refresh(conn, writer.load_id, writer.touched_trials)
        c = writer.counts
        c.n_trials = len(writer._linked)
        conn.execute(update(T["loads"]).where(T["loads"].c.id == writer.load_id).values(
            status="loaded", finished_at=datetime.now(timezone.utc), n_rows=c.n_rows,
            n_trials=c.n_trials, n_episodes_new=c.n_episodes_new,
            n_episodes_duplicate=c.n_episodes_duplicate, n_conflicts=c.n_conflicts,
            n_rejected=c.n_rejected, n_turns=c.n_turns, n_bytes=c.n_bytes,
            detail={"rejected": [f"{r.where}: {r.reason}" for r in c.rejected[:100]]} if c.rejected else None,
        ))


class UnitWriter:
    """Writes batches of trials inside one unit's transaction. Ids looked up here are cached
    for the unit only: a rolled-back unit must not leave ids behind for the next one."""

    def __init__(self, conn: Connection, load_id: int):
        self.conn = conn
        self.bulk = bulk.Bulk(conn)
        self.load_id = load_id
        self.counts = UnitCounts()
        self._run_ids: dict[str, int] = {}
        self._task_ids: dict[str, int] = {}
        self._message_ids: dict[bytes, int] = {}
        self._trial_ids: dict[tuple[int, str], int] = {}
        self._trial_values: dict[int, dict[str, Any]] = {}
        self._episodes: dict[tuple[int, str, int], tuple[int, str]] = {}
        self._linked: set[int] = set()  # trials given a trial_loads row by this unit
        self.touched_trials: set[int] = set()  # inserted, filled in or given episodes: to summarize
        self._next_row = 0
        self._hashes: dict[str, bytes] = {}

    # -- public ------------------------------------------------------------------------------

    def reject(self, rejected: Rejected) -> None:
        self.counts.n_rejected += 1
        self.counts.rejected.append(rejected)

    def add_runs(self, runs: list[Run]) -> None:
        """Run-level facts (a job's config and result): fill what is not known yet."""
        self._ensure_runs([r.run_key for r in runs], {r.run_key: r.name for r in runs if r.name})
        runs_t = T["runs"]
        for run in runs:
            values = {k: v for k, v in dict(name=run.name, job_id=run.job_id, started_at=run.started_at,
                                            finished_at=run.finished_at, detail=run.detail).items()
                      if v is not None}
            if values:
                existing = self.conn.execute(select(runs_t).where(runs_t.c.id == self._run_ids[run.run_key])).one()
                fill = {k: v for k, v in values.items() if getattr(existing, k) is None}
                if fill:
                    self.conn.execute(update(runs_t).where(runs_t.c.id == existing.id).values(**fill))

    def add_trials(self, trials: list[Trial], run_names: dict[str, str] | None = None) -> None:
        """Write a batch of trials and their episodes."""
        if not trials:
            return
        # Each text is hashed once per batch, however many turns and prefixes repeat it.
        self._hashes = {}
        self._forget_if_large()
        self._ensure_runs([t.run_key for t in trials], run_names or {})
        self._ensure_tasks([t.task_name for t in trials if t.task_name is not None])
        texts = [turn.content for t in trials for e in t.episodes for turn in e.turns if turn.content is not None]
        texts += [t.instruction for t in trials if t.instruction is not None]
        self._ensure_messages(texts)
        trial_ids = self._ensure_trials(trials)
        self._write_episodes(trials, trial_ids)

    def _forget_if_large(self) -> None:
        """The caches hold what this unit has seen; past a bound they are dropped so memory
        stays flat however large the unit. The database (same transaction) still has it all:
        a miss costs a lookup, never correctness."""
        if len(self._message_ids) > MESSAGE_CACHE:
            self._message_ids.clear()
        if len(self._trial_ids) > TRIAL_CACHE:
            self._trial_ids.clear()
            self._trial_values.clear()
        if len(self._episodes) > EPISODE_CACHE:
            self._episodes.clear()

    def _hash(self, text: str) -> bytes:
        h = self._hashes.get(text)
        if h is None:
            h = self._hashes[text] = message_hash(text)
        return h

    # -- keyed rows ---------------------------------------------------------------------------

    def _insert_new(self, table, key_cols: list[str], rows: dict[tuple, tuple], other_cols: list[str]
                    ) -> dict[tuple, int]:
        """Insert rows for keys the caller found missing; their new ids by key."""
        ids = self.bulk.allocate_ids(table, len(rows))
        self.bulk.insert(table, ["id", *key_cols, *other_cols],
                         [(row_id, *key, *values) for row_id, (key, values) in zip(ids, rows.items())])
        return dict(zip(rows, ids))

    def _ensure(self, table, key_col: str, cache: dict, rows: dict[Any, tuple], other_cols: list[str]
                ) -> dict[tuple, tuple]:
        """Ids for single-column keys (runs, tasks, messages), creating the missing ones; the
        rows it created."""
        missing = [k for k in rows if k not in cache]
        if not missing:
            return {}
        found = self.bulk.lookup(table, [key_col], [(k,) for k in missing], ["id"])
        cache.update({key[0]: values[0] for key, values in found.items()})
        new = {(k,): rows[k] for k in missing if k not in cache}
        if new:
            ids = self._insert_new(table, [key_col], new, other_cols)
            cache.update({key[0]: row_id for key, row_id in ids.items()})
        return new

    def _ensure_runs(self, keys: list[str], names: dict[str, str]) -> None:
        self._ensure(T["runs"], "run_key", self._run_ids, {k: (names.get(k),) for k in keys}, ["name"])

    def _ensure_tasks(self, names: list[str]) -> None:
        self._ensure(T["tasks"], "name", self._task_ids, {n: () for n in names}, [])

    def _ensure_messages(self, texts: list[str]) -> None:
        rows: dict[bytes, tuple] = {}
        for text in texts:
            h = self._hash(text)
            if h not in self._message_ids and h not in rows:
                safe, raw = split_text(text)
                rows[h] = (safe, raw, len(text))
        new = self._ensure(T["messages"], "content_hash", self._message_ids, rows,
                           ["content", "content_raw", "n_chars"])
        # Bytes of text this unit added: only the messages it created, not those it found.
        self.counts.n_bytes += sum(len(raw) if raw is not None else len(safe.encode())
                                   for safe, raw, _ in new.values())

    # -- trials -------------------------------------------------------------------------------

    def _trial_row(self, t: Trial) -> dict[str, Any]:
        texts, exact = safe_columns(
            dict(verifier_output=t.verifier_output, exception_message=t.exception_message))
        detail = dict(t.detail or {})
        if exact:
            detail[RAW_TEXT] = exact
        return dict(
            task_id=self._task_ids.get(t.task_name) if t.task_name is not None else None,
            status=t.status, agent=t.agent, agent_version=t.agent_version,
            model=t.model, model_provider=t.model_provider, result=t.result, reward=t.reward,
            rewards=t.rewards, exception_type=t.exception_type, exception_message=texts["exception_message"],
            started_at=t.started_at, finished_at=t.finished_at, date_raw=t.date_raw,
            n_input_tokens=t.n_input_tokens, n_cache_tokens=t.n_cache_tokens,
            n_output_tokens=t.n_output_tokens, cost_usd=t.cost_usd, verifier_output=texts["verifier_output"],
            instruction_id=self._message_ids[self._hash(t.instruction)] if t.instruction is not None else None,
            task_checksum=t.task_checksum, source_run_id=t.source_run_id, detail=detail or None,
        )

    def _ensure_trials(self, trials: list[Trial]) -> list[int]:
        keys = [(self._run_ids[t.run_key], t.trial_name) for t in trials]
        incoming = [self._trial_row(t) for t in trials]
        unknown = [k for k in dict.fromkeys(keys) if k not in self._trial_ids]
        if unknown:
            trials_t = T["trials"]
            found = self.bulk.lookup(trials_t, ["run_id", "trial_name"], unknown, ["id", *TRIAL_COLUMNS])
            for key, values in found.items():
                stored = dict(zip(["id", *TRIAL_COLUMNS], values))
                self._trial_ids[key] = stored["id"]
                self._trial_values[stored["id"]] = stored
            new: dict[tuple, dict[str, Any]] = {}
            for key, values in zip(keys, incoming):
                if key not in self._trial_ids:
                    new.setdefault(key, values)
            if new:
                ids = self._insert_new(trials_t, ["run_id", "trial_name"],
                                       {k: tuple(v[c] for c in TRIAL_COLUMNS) for k, v in new.items()},
                                       list(TRIAL_COLUMNS))
                for key, trial_id in ids.items():
                    self._trial_ids[key] = trial_id
                    self._trial_values[trial_id] = dict(new[key], id=trial_id)
                self.touched_trials.update(ids.values())
            link = [self._trial_ids[k] for k in unknown if self._trial_ids[k] not in self._linked]
            self.bulk.insert(T["trial_loads"], ["trial_id", "load_id"], [(i, self.load_id) for i in link])
            self._linked.update(link)
        ids = []
        for key, values in zip(keys, incoming):
            trial_id = self._trial_ids[key]
            self._merge_trial(trial_id, values)
            ids.append(trial_id)
        return ids

    def _merge_trial(self, trial_id: int, incoming: dict[str, Any]) -> None:
        """Fill what the stored trial lacks; record where the two disagree."""
        kept = self._trial_values[trial_id]
        fill: dict[str, Any] = {}
        for name in TRIAL_FIELDS:
            new, old = incoming[name], kept.get(name)
            if new is None or new == old:
                continue
            if old is None:
                fill[name] = new
            elif not _same_instant(old, new):
                self._conflict("trial", trial_id, name, {name: _jsonable(old)}, {name: _jsonable(new)}, None)
        if kept.get("task_id") is None and incoming["task_id"] is not None:
            fill["task_id"] = incoming["task_id"]
        if kept.get("status") == "incomplete" and incoming["status"] == "complete":
            fill["status"] = "complete"
        if incoming.get("detail") and incoming["detail"] != kept.get("detail"):
            fill["detail"] = {**(incoming["detail"] or {}), **(kept.get("detail") or {})}
        if fill:
            self.conn.execute(update(T["trials"]).where(T["trials"].c.id == trial_id).values(**fill))
            kept.update(fill)
            self.touched_trials.add(trial_id)

    # -- episodes -----------------------------------------------------------------------------

    def _write_episodes(self, trials: list[Trial], trial_ids: list[int]) -> None:
        batch: list[tuple[tuple[int, str, int], Episode, str, int]] = []
        for trial, trial_id in zip(trials, trial_ids):
            for ep in trial.episodes:
                row_number = ep.row_number if ep.row_number is not None else self._next_row
                self._next_row = max(self._next_row, row_number) + 1
                batch.append(((trial_id, ep.trace_source, ep.episode_index), ep, conversation_hash(ep, self._hash), row_number))
        if not batch:
            return
        self.counts.n_rows += len(batch)
        episodes_t = T["episodes"]
        key_cols = ["trial_id", "trace_source", "episode_index"]
        unknown = [k for k, *_ in batch if k not in self._episodes]
        if unknown:
            found = self.bulk.lookup(episodes_t, key_cols, unknown, ["id", "conversation_hash"])
            self._episodes.update({k: (v[0], v[1]) for k, v in found.items()})
        new: dict[tuple, tuple] = {}
        for key, ep, chash, _ in batch:
            if key not in self._episodes and key not in new:
                n_chars = sum(len(t.content) for t in ep.turns if t.content is not None)
                new[key] = (len(ep.turns), n_chars, chash, ep.extra)
        inserted: set[tuple] = set()
        if new:
            ids = self._insert_new(episodes_t, key_cols, new, ["n_turns", "n_chars", "conversation_hash", "extra"])
            for key, ep_id in ids.items():
                self._episodes[key] = (ep_id, new[key][2])
            inserted = set(ids)
            self.touched_trials.update(trial_id for trial_id, _, _ in ids)
        turn_rows = []
        provenance = []
        message_ids = self._message_ids
        for key, ep, chash, row_number in batch:
            ep_id, kept_hash = self._episodes[key]
            if key in inserted:
                inserted.discard(key)  # a second copy of the key in this unit is a duplicate
                self.counts.n_episodes_new += 1
                self.counts.n_turns += len(ep.turns)
                for idx, turn in enumerate(ep.turns):
                    turn_rows.append((ep_id, idx, turn.role,
                                      message_ids[self._hash(turn.content)] if turn.content is not None else None,
                                      turn.extra))
                provenance.append((self.load_id, row_number, ep_id))
            elif kept_hash == chash:
                self.counts.n_episodes_duplicate += 1
                provenance.append((self.load_id, row_number, ep_id))
            else:
                self._conflict("episode", ep_id, "conversation", {"conversation_hash": kept_hash},
                               {"conversation_hash": chash, "n_turns": len(ep.turns)}, row_number)
        self.bulk.insert(T["turns"], ["episode_id", "idx", "role", "message_id", "extra"], turn_rows)
        self.bulk.insert(T["episode_loads"], ["load_id", "row_number", "episode_id"], provenance)

    def _conflict(self, entity: str, entity_id: int, field_name: str | None, kept: dict, incoming: dict,
                  row_number: int | None) -> None:
        self.counts.n_conflicts += 1
        if len(self.counts.conflicts) < 20:
            where = f"row {row_number}" if row_number is not None else f"{entity} {entity_id}"
            self.counts.conflicts.append(f"{where}: {entity} {field_name} differs from the stored one")
        self.bulk.insert(T["conflicts"], ["load_id", "entity", "entity_id", "field", "kept", "incoming", "row_number"],
                         [(self.load_id, entity, entity_id, field_name, kept, incoming, row_number)])


def _same_instant(a: Any, b: Any) -> bool:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a.replace(tzinfo=a.tzinfo or timezone.utc) == b.replace(tzinfo=b.tzinfo or timezone.utc)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-12 * max(1.0, abs(a))
    return False


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
