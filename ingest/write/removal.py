"""Rows that stop being true: an unfinished trial its job deleted, and a task no trial is of.

`harbor jobs resume` deletes the folder of every trial of the job that has no result.json and
runs the trial again under a new name. A warehouse that ingested the job while such a trial ran
holds it (status `incomplete`); the job no longer does, nor does its count. `deleted_trials`
finds these trials when the job's folder is ingested again, and `remove_trials` deletes each
with everything that hangs on it (episodes, turns, provenance, conflicts, its summary rows by
way of the keys it returns, the messages and ledger rows nothing else needs) inside the
caller's unit, so the removal and its ledger row commit together or not at all.

A trial is deleted only when all of these hold: it is unfinished; its run is the job's; the
job's folder has no entry of its name; no folder it was loaded from exists any more; the job's
result.json does not count it; and every unit that holds it is a trial folder (a Parquet or Hub
dataset still holds what it held, and Harbor exports finished trials only). A finished trial is
never deleted: archives delete a job's folders once they are ingested.

`drop_unused_tasks` removes the tasks that no trial and no summary row refers to any more: the
task a running trial was guessed under (its config.json) once it finishes under another, and
the task of a removed trial.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, delete, exists, func, select, update

from ingest.write import bulk
from warehouse.db import models
from warehouse.hub_columns import FIELD_COLUMNS
from warehouse.runs import dataset_names
from warehouse.search import forget_messages

_TRIALS, _RUNS, _TASKS = models.Trial.__table__, models.Run.__table__, models.Task.__table__
_EPISODES, _MESSAGES = models.Episode.__table__, models.Message.__table__
_CONVERSATIONS, _TURNS = models.Conversation.__table__, models.ConversationTurn.__table__
_LOADS, _SOURCES = models.Load.__table__, models.Source.__table__
_TRIAL_LOADS, _EPISODE_LOADS = models.TrialLoad.__table__, models.EpisodeLoad.__table__
_CONFLICTS, _LENGTHS = models.Conflict.__table__, models.TrialLength.__table__
_OUTCOMES, _RUN_SOURCES = models.RunTaskOutcome.__table__, models.RunSource.__table__

_CHUNK = 500  # ids per IN list


@dataclass(frozen=True)
class Deleted:
    """A stored trial its job deleted, and the units (trial folders) that held it."""

    trial_id: int
    run_id: int
    trial_name: str
    loads: tuple[tuple[int, str, str, str], ...]  # (load id, source uri, unit, content hash)


def deleted_trials(conn: Connection, run_keys: Collection[str], job_dir: Path, counted: Collection[str]
                   ) -> list[Deleted]:
    """The unfinished trials of the job's runs (`run_keys`) that the job deleted (see the module
    docstring); `counted`: the trial names the job's result.json lists (traces.trials_counted)."""
    if not run_keys:
        return []
    unfinished = conn.execute(
        select(_TRIALS.c.id, _TRIALS.c.run_id, _TRIALS.c.trial_name)
        .join(_RUNS, _RUNS.c.id == _TRIALS.c.run_id)
        .where(_RUNS.c.run_key.in_(sorted(run_keys)), _TRIALS.c.status == "incomplete")
        .order_by(_TRIALS.c.id)).all()
    if not unfinished:
        return []
    try:
        present = set(os.listdir(job_dir))
    except OSError:  # the job's folder cannot be listed (gone since): nothing can be said to be gone
        return []
    candidates = {row.id: row for row in unfinished if row.trial_name not in present and row.trial_name not in counted}
    units: dict[int, list[tuple[str, int, str, str, str]]] = {}
    for ids in _chunks(candidates):
        for trial_id, *unit in conn.execute(
                select(_TRIAL_LOADS.c.trial_id, _SOURCES.c.kind, _LOADS.c.id, _SOURCES.c.uri, _LOADS.c.unit,
                       _LOADS.c.content_hash)
                .join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id)
                .join(_SOURCES, _SOURCES.c.id == _LOADS.c.source_id)
                .where(_TRIAL_LOADS.c.trial_id.in_(ids))):
            units.setdefault(trial_id, []).append(tuple(unit))
    out = []
    for trial_id, row in candidates.items():
        held = sorted(units.get(trial_id, ()))
        if held and all(kind == "traces" and not os.path.lexists(Path(uri) / unit) for kind, _, uri, unit, _ in held):
            out.append(Deleted(trial_id, row.run_id, row.trial_name, tuple(load for _, *load in held)))
    return out


def remove_trials(conn: Connection, trials: list[Deleted]) -> set[tuple[int, int | None]]:
    """Delete the trials, inside the caller's unit (its queued rows written first), with their
    episodes, turns, provenance and conflicts, their trial folders' ledger rows (such a unit
    holds its one trial), their lengths, the run's sources they alone stood for, and the
    messages nothing else refers to. The (run, task) keys they were under, for the caller to
    have summarized again (summaries.refresh's left keys) and to drop their tasks if unused."""
    load_ids = sorted({load[0] for t in trials for load in t.loads})
    run_sources = {(run_id, source_id) for ids in _chunks(load_ids) for run_id, source_id in conn.execute(
        select(_TRIALS.c.run_id, _LOADS.c.source_id)
        .join(_TRIAL_LOADS, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id)
        .join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id).where(_LOADS.c.id.in_(ids)))}
    _delete(conn, _CONFLICTS, _CONFLICTS.c.load_id, load_ids)
    _delete(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.load_id, load_ids)
    keys = _remove(conn, [t.trial_id for t in trials])
    # A trial folder's unit holds its one trial; a unit that somehow holds others is kept.
    _delete(conn, _LOADS, _LOADS.c.id, load_ids, ~exists().where(_TRIAL_LOADS.c.load_id == _LOADS.c.id))
    for run_id, source_id in sorted(run_sources):
        still = exists().where(_TRIALS.c.run_id == run_id, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id,
                               _LOADS.c.id == _TRIAL_LOADS.c.load_id, _LOADS.c.source_id == source_id)
        conn.execute(delete(_RUN_SOURCES).where(_RUN_SOURCES.c.run_id == run_id, _RUN_SOURCES.c.source_id == source_id,
                                                ~still))
    return keys


@dataclass(frozen=True)
class RunRemoval:
    """What deleting a run takes away (counted before, for the question asked first)."""

    trials: int
    episodes: int
    turns: int  # the episodes' turns, as the turns view counts them
    units: int  # ledger units that hold nothing else, which go too (a later ingest loads them again)
    sources: int  # sources left with no unit, which go too


def run_removal(conn: Connection, run_id: int) -> RunRemoval:
    trial_ids = select(_TRIALS.c.id).where(_TRIALS.c.run_id == run_id)
    episodes = select(_EPISODES.c.id, _EPISODES.c.n_turns).where(_EPISODES.c.trial_id.in_(trial_ids)).subquery()
    n_episodes, n_turns = conn.execute(select(func.count(), func.coalesce(func.sum(episodes.c.n_turns), 0))).one()
    units = _units_only_of(conn, run_id)
    sources = _sources_only_of(conn, units)
    return RunRemoval(conn.execute(select(func.count()).select_from(trial_ids.subquery())).scalar_one(),
                      n_episodes, int(n_turns), len(units), len(sources))


def delete_run(conn: Connection, run_id: int) -> RunRemoval:
    """Delete a run with everything that is only its: its trials with their episodes, turns,
    provenance and conflicts, its summaries, labels and sources' links, the ledger units that
    hold nothing else (and the sources left with none), the tasks and messages nothing else
    refers to; inside the caller's transaction (the whole delete commits or nothing does). A
    unit that also holds another run's trials stays in the ledger, so a later ingest of it does
    not bring the run back; a unit that goes is loaded again by a later ingest."""
    removal = run_removal(conn, run_id)
    units = _units_only_of(conn, run_id)
    sources = _sources_only_of(conn, units)
    trial_ids = list(conn.execute(select(_TRIALS.c.id).where(_TRIALS.c.run_id == run_id)).scalars())
    _delete(conn, _CONFLICTS, _CONFLICTS.c.load_id, units)
    keys = _remove(conn, trial_ids)
    _delete(conn, _LOADS, _LOADS.c.id, units)
    _delete(conn, _SOURCES, _SOURCES.c.id, sources)
    _delete_empty_run(conn, run_id)
    drop_unused_tasks(conn, (task_id for _, task_id in keys))
    return removal


@dataclass(frozen=True)
class SourceRemoval:
    """What taking back a source changes (counted before, for the question asked first)."""

    units: int
    trials: int  # trials no other source holds, which go
    shared: int  # trials other sources hold too, which stay with what those gave
    runs: int  # runs left with no trial, which go
    refused: str | None = None  # why the source cannot be taken back exactly


def source_removal(conn: Connection, source_id: int) -> SourceRemoval:
    units = list(conn.execute(select(_LOADS.c.id).where(_LOADS.c.source_id == source_id)).scalars())
    only, shared = _trials_of_source(conn, units)
    return SourceRemoval(len(units), len(only), len(shared), len(_runs_left_empty(conn, only)),
                         _unsure(conn, units, shared))


def delete_source(conn: Connection, source_id: int) -> SourceRemoval:
    """Take back a source: what only it brought goes (its units, the trials only it holds, with
    everything on them, the runs left with no trial); a trial other sources hold too stays, its
    Hub rows placed again without the source's (ingest.write.settle), so that the warehouse is
    what ingesting the other sources alone makes. Inside the caller's transaction. Refused
    (WarehouseError, nothing changed) where the stored rows cannot tell what the others alone
    would give (SourceRemoval.refused)."""
    from ingest.write.settle import place, take_up
    from ingest.write.writer import UnitWriter
    from warehouse import summaries
    from warehouse.errors import WarehouseError

    removal = source_removal(conn, source_id)
    if removal.refused:
        raise WarehouseError(removal.refused)
    units = list(conn.execute(select(_LOADS.c.id).where(_LOADS.c.source_id == source_id)).scalars())
    only, shared = _trials_of_source(conn, units)
    messages = _messages_of(conn, shared)
    if shared:
        w = UnitWriter(conn, units[0])
        try:
            for trial_id in shared:
                taken = take_up(w, trial_id)
                taken.rows = [row for row in taken.rows if row.load_id not in set(units)]
                place(w, trial_id, taken)
            w.flush()
            summaries.refresh(conn, units[0], w.touched_trials | set(shared), (), ())
        finally:
            w.bulk.close()
    _delete(conn, _CONFLICTS, _CONFLICTS.c.load_id, units)
    _delete(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.load_id, units)
    runs = _runs_left_empty(conn, only)
    keys = _remove(conn, only)
    _delete(conn, _TRIAL_LOADS, _TRIAL_LOADS.c.load_id, units)
    _delete(conn, _LOADS, _LOADS.c.id, units)
    linked = conn.execute(select(_RUNS.c.id, _RUNS.c.run_key, _RUNS.c.name).join(
        _RUN_SOURCES, _RUN_SOURCES.c.run_id == _RUNS.c.id).where(_RUN_SOURCES.c.source_id == source_id)).all()
    named = {run_id: dataset_names(conn, run_id, run_key)[1] for run_id, run_key, _ in linked}
    conn.execute(delete(_RUN_SOURCES).where(_RUN_SOURCES.c.source_id == source_id))
    conn.execute(delete(_SOURCES).where(_SOURCES.c.id == source_id))
    for run_id in runs:
        _delete_empty_run(conn, run_id)
    for run_id, run_key, name in linked:
        # A name the source gave goes with it: the run is named as the other sources name it.
        if run_id not in runs and name in named[run_id]:
            now = dataset_names(conn, run_id, run_key)[1]
            if name not in now:
                conn.execute(update(_RUNS).where(_RUNS.c.id == run_id).values(name=now[0] if now else None))
    left = {(run_id, task_id) for run_id, task_id in keys if run_id not in runs}
    if left:
        summaries.refresh(conn, units[0], (), (), left)
    drop_unused_tasks(conn, (task_id for _, task_id in keys))
    _drop_unused_messages(conn, messages)
    return removal


def _trials_of_source(conn: Connection, units: list[int]) -> tuple[list[int], list[int]]:
    """The trials the units hold: those no other unit holds, and those another unit holds too."""
    held = sorted({t for ids in _chunks(units) for t in conn.execute(
        select(_TRIAL_LOADS.c.trial_id).where(_TRIAL_LOADS.c.load_id.in_(ids))).scalars()})
    elsewhere = {t for ids in _chunks(held) for t in conn.execute(
        select(_TRIAL_LOADS.c.trial_id).where(_TRIAL_LOADS.c.trial_id.in_(ids),
                                              _TRIAL_LOADS.c.load_id.not_in(units))).scalars()}
    return [t for t in held if t not in elsewhere], [t for t in held if t in elsewhere]


# The Hub column each trial field comes from, where a dataset gives it (a trace directory gives
# every field): the fields that can say which unit a trial's value came from.
_FIELD_COLUMNS = {**FIELD_COLUMNS, "reward": "result", "exception_type": "result", "started_at": "date"}


def _unsure(conn: Connection, units: list[int], shared: list[int]) -> str | None:
    """Why the stored rows cannot tell what a shared trial is without these units, if they
    cannot: a trial of the units' trace directories (richer than any row of another source), or
    a trial field whose value only these units gave (the other units that have its column
    disagree, or none has it). A field these units disagreed on keeps the value it has."""
    if not shared:
        return None
    ours = set(units)
    traced, alone = set(), set()
    columns_of: dict[int, frozenset[str] | None] = {}  # None: a trace directory's unit
    for ids in _chunks(shared):
        holders: dict[int, list[int]] = {}
        for trial_id, load_id, schema in conn.execute(
                select(_TRIAL_LOADS.c.trial_id, _LOADS.c.id, _LOADS.c.arrow_schema)
                .join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id).where(_TRIAL_LOADS.c.trial_id.in_(ids))):
            holders.setdefault(trial_id, []).append(load_id)
            if load_id not in columns_of:
                columns_of[load_id] = None if schema is None else shard_columns(schema)
        disputed: dict[int, set[tuple[int, str]]] = {}
        for trial_id, load_id, field in conn.execute(
                select(_CONFLICTS.c.entity_id, _CONFLICTS.c.load_id, _CONFLICTS.c.field)
                .where(_CONFLICTS.c.entity == "trial", _CONFLICTS.c.entity_id.in_(ids))):
            disputed.setdefault(trial_id, set()).add((load_id, field))
        values = {row.id: row for row in conn.execute(select(_TRIALS).where(_TRIALS.c.id.in_(ids)))}
        for trial_id, loads in holders.items():
            if any(columns_of[load] is None for load in loads if load in ours):
                traced.add(trial_id)
                continue
            said = disputed.get(trial_id, set())

            def gives(load: int, field: str) -> bool:  # the unit's value is the trial's
                columns = columns_of[load]
                return (columns is None or _FIELD_COLUMNS[field] in columns) and (load, field) not in said

            for field in _FIELD_COLUMNS:
                if getattr(values[trial_id], field) is None:
                    continue
                if any(gives(load, field) for load in loads if load in ours) and \
                        not any(gives(load, field) for load in loads if load not in ours):
                    alone.add(trial_id)
    if traced:
        return (f"{len(traced):,} trial{'s' * (len(traced) != 1)} of its trace directories "
                f"{'are' if len(traced) != 1 else 'is'} also held by other sources, which cannot give what a "
                f"trace directory gave")
    if alone:
        return (f"{len(alone):,} trial{'s' * (len(alone) != 1)} it shares with other sources "
                f"{'have' if len(alone) != 1 else 'has'} values only it gave")
    return None


def shard_columns(arrow_schema: str | None) -> frozenset[str]:
    """The column names of a shard, from its schema as the ledger keeps it."""
    if not arrow_schema:
        return frozenset()
    from warehouse.arrow_json import schema_from_json  # pyarrow: a Hub unit has it loaded already

    return frozenset(schema_from_json(arrow_schema).names)


def _messages_of(conn: Connection, trial_ids: list[int]) -> set[int]:
    """The messages the trials' turns and instructions use (candidates to drop after)."""
    conversations = [c for ids in _chunks(trial_ids) for c in conn.execute(
        select(_CONVERSATIONS.c.id).where(_CONVERSATIONS.c.trial_id.in_(ids))).scalars()]
    messages = {m for ids in _chunks(conversations)
                for m in conn.execute(select(_TURNS.c.message_id).where(_TURNS.c.conversation_id.in_(ids))).scalars()}
    messages |= {m for ids in _chunks(trial_ids)
                 for m in conn.execute(select(_TRIALS.c.instruction_id).where(_TRIALS.c.id.in_(ids))).scalars()}
    messages.discard(None)
    return messages


def _runs_left_empty(conn: Connection, trial_ids: list[int]) -> list[int]:
    """The runs whose every trial is among `trial_ids`."""
    going = set(trial_ids)
    runs = {r for ids in _chunks(trial_ids) for r in conn.execute(
        select(_TRIALS.c.run_id).where(_TRIALS.c.id.in_(ids)).distinct()).scalars()}
    return sorted(run for run in runs if set(conn.execute(
        select(_TRIALS.c.id).where(_TRIALS.c.run_id == run)).scalars()) <= going)


def _delete_empty_run(conn: Connection, run_id: int) -> None:
    """A run with no trial left: its summaries, labels, sources' links and itself."""
    for table in (_OUTCOMES, models.RunTaskBreakdown.__table__, models.RunLabel.__table__, _RUN_SOURCES):
        conn.execute(delete(table).where(table.c.run_id == run_id))
    conn.execute(delete(_RUNS).where(_RUNS.c.id == run_id))


def _units_only_of(conn: Connection, run_id: int) -> list[int]:
    """The ledger units that hold trials of the run and of no other run."""
    of_run = (select(_TRIAL_LOADS.c.load_id).join(_TRIALS, _TRIALS.c.id == _TRIAL_LOADS.c.trial_id)
              .where(_TRIALS.c.run_id == run_id).distinct())
    others = exists().where(_TRIAL_LOADS.c.load_id == _LOADS.c.id, _TRIALS.c.id == _TRIAL_LOADS.c.trial_id,
                            _TRIALS.c.run_id != run_id)
    return sorted(conn.execute(select(_LOADS.c.id).where(_LOADS.c.id.in_(of_run), ~others)).scalars())


def _sources_only_of(conn: Connection, units: list[int]) -> list[int]:
    """The sources whose every unit is among `units`."""
    touched = {s for ids in _chunks(units) for s in conn.execute(
        select(_LOADS.c.source_id).where(_LOADS.c.id.in_(ids)).distinct()).scalars()}
    kept = set(units)
    return sorted(source for source in touched
                  if set(conn.execute(select(_LOADS.c.id).where(_LOADS.c.source_id == source)).scalars()) <= kept)


def _remove(conn: Connection, trial_ids: list[int]) -> set[tuple[int, int | None]]:
    """Delete the trials with their episodes, turns, provenance, conflicts and lengths, and the
    messages nothing else refers to then; the (run, task) keys they were under."""
    keys = {(run_id, task_id) for ids in _chunks(trial_ids) for run_id, task_id in conn.execute(
        select(_TRIALS.c.run_id, _TRIALS.c.task_id).where(_TRIALS.c.id.in_(ids)))}
    episode_ids = [e for ids in _chunks(trial_ids)
                   for e in conn.execute(select(_EPISODES.c.id).where(_EPISODES.c.trial_id.in_(ids))).scalars()]
    conversation_ids = [c for ids in _chunks(trial_ids) for c in conn.execute(
        select(_CONVERSATIONS.c.id).where(_CONVERSATIONS.c.trial_id.in_(ids))).scalars()]
    messages = _messages_of(conn, trial_ids)
    # Children before parents: PostgreSQL checks every reference as it goes.
    _delete(conn, _CONFLICTS, _CONFLICTS.c.entity_id, trial_ids, _CONFLICTS.c.entity == "trial")
    _delete(conn, _CONFLICTS, _CONFLICTS.c.entity_id, episode_ids, _CONFLICTS.c.entity == "episode")
    _delete(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.episode_id, episode_ids)
    _delete(conn, _EPISODES, _EPISODES.c.id, episode_ids)
    _delete(conn, _TURNS, _TURNS.c.conversation_id, conversation_ids)
    _delete(conn, _CONVERSATIONS, _CONVERSATIONS.c.id, conversation_ids)
    _delete(conn, _TRIAL_LOADS, _TRIAL_LOADS.c.trial_id, trial_ids)
    _delete(conn, _LENGTHS, _LENGTHS.c.trial_id, trial_ids)
    _delete(conn, _TRIALS, _TRIALS.c.id, trial_ids)
    _drop_unused_messages(conn, messages)
    return keys


def drop_unused_tasks(conn: Connection, task_ids: Iterable[int | None]) -> None:
    """Delete those of the tasks that no trial of any run is of, nor any summary row names.
    (run_task_breakdown has a row under a task only where run_task_outcomes has one: the two
    are refreshed together.)"""
    for ids in _chunks(sorted({t for t in task_ids if t is not None})):
        conn.execute(delete(_TASKS).where(
            _TASKS.c.id.in_(ids), ~exists().where(_TRIALS.c.task_id == _TASKS.c.id),
            ~exists().where(_OUTCOMES.c.task_id == _TASKS.c.id)))


def _drop_unused_messages(conn: Connection, candidates: set[int]) -> None:
    """Delete the messages among `candidates` that no turn, trial instruction or conflict refers
    to: a message is its text, and a warehouse that never held the removed trial has no such text.
    A conflict names messages by id in its JSON (a conflicting row's turns, an instruction), so a
    message one names is kept."""
    used = set()
    for ids in _chunks(sorted(candidates)):
        used.update(conn.execute(select(_TURNS.c.message_id).where(_TURNS.c.message_id.in_(ids))).scalars())
        used.update(conn.execute(select(_TRIALS.c.instruction_id).where(_TRIALS.c.instruction_id.in_(ids))).scalars())
    unused = candidates - used
    if not unused:
        return
    with conn.execute(select(_CONFLICTS.c.field, _CONFLICTS.c.kept, _CONFLICTS.c.incoming)
                      .where(_CONFLICTS.c.field.in_(("conversation", "instruction_id")))
                      .execution_options(yield_per=1000)) as named:
        for field, kept, incoming in named:
            if field == "conversation":
                unused -= {turn[1] for turn in (incoming or {}).get("turns", ())}
            else:
                unused -= {(kept or {}).get("instruction_id"), (incoming or {}).get("instruction_id")}
            if not unused:
                return
    for ids in _chunks(sorted(unused)):
        forget_messages(conn, list(ids))
    _delete(conn, _MESSAGES, _MESSAGES.c.id, sorted(unused))


def _delete(conn: Connection, table, column, ids: list[int], *where) -> None:
    for chunk in _chunks(ids):
        conn.execute(delete(table).where(column.in_(chunk), *where))


def _chunks(ids: Iterable[int]) -> Iterator[Sequence[int]]:
    return bulk.chunks(list(ids), _CHUNK)
