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
the task of a removed trial. `remove` and the helpers beside it are what taking a load back
(ingest.take_back) deletes trials with too.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, delete, exists, select

from ingest.write import bulk
from warehouse.db import models
from warehouse.search import forget_messages

_TRIALS, _RUNS, _TASKS = models.trials, models.runs, models.tasks
_EPISODES, _MESSAGES = models.episodes, models.messages
_CONVERSATIONS, _TURNS = models.conversations, models.conversation_turns
_LOADS, _SOURCES = models.loads, models.sources
_TRIAL_LOADS, _EPISODE_LOADS = models.trial_loads, models.episode_loads
_CONFLICTS, _LENGTHS = models.conflicts, models.trial_lengths
_OUTCOMES, _RUN_SOURCES = models.run_task_outcomes, models.run_sources

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
    for ids in chunks(candidates):
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
    run_sources = {(run_id, source_id) for ids in chunks(load_ids) for run_id, source_id in conn.execute(
        select(_TRIALS.c.run_id, _LOADS.c.source_id)
        .join(_TRIAL_LOADS, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id)
        .join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id).where(_LOADS.c.id.in_(ids)))}
    delete_in(conn, _CONFLICTS, _CONFLICTS.c.load_id, load_ids)
    delete_in(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.load_id, load_ids)
    keys = remove(conn, [t.trial_id for t in trials])
    # A trial folder's unit holds its one trial; a unit that somehow holds others is kept.
    delete_in(conn, _LOADS, _LOADS.c.id, load_ids, ~exists().where(_TRIAL_LOADS.c.load_id == _LOADS.c.id))
    for run_id, source_id in sorted(run_sources):
        still = exists().where(_TRIALS.c.run_id == run_id, _TRIAL_LOADS.c.trial_id == _TRIALS.c.id,
                               _LOADS.c.id == _TRIAL_LOADS.c.load_id, _LOADS.c.source_id == source_id)
        conn.execute(delete(_RUN_SOURCES).where(_RUN_SOURCES.c.run_id == run_id, _RUN_SOURCES.c.source_id == source_id,
                                                ~still))
    return keys


def shard_columns(arrow_schema: str | None) -> frozenset[str]:
    """The column names of a shard, from its schema as the ledger keeps it."""
    if not arrow_schema:
        return frozenset()
    from warehouse.arrow_json import schema_from_json  # pyarrow: a Hub unit has it loaded already

    return frozenset(schema_from_json(arrow_schema).names)


def messages_of(conn: Connection, trial_ids: list[int]) -> set[int]:
    """The messages the trials' turns and instructions use (candidates to drop after)."""
    conversations = [c for ids in chunks(trial_ids) for c in conn.execute(
        select(_CONVERSATIONS.c.id).where(_CONVERSATIONS.c.trial_id.in_(ids))).scalars()]
    messages = {m for ids in chunks(conversations)
                for m in conn.execute(select(_TURNS.c.message_id).where(_TURNS.c.conversation_id.in_(ids))).scalars()}
    messages |= {m for ids in chunks(trial_ids)
                 for m in conn.execute(select(_TRIALS.c.instruction_id).where(_TRIALS.c.id.in_(ids))).scalars()}
    messages.discard(None)
    return messages


def remove(conn: Connection, trial_ids: list[int]) -> set[tuple[int, int | None]]:
    """Delete the trials with their episodes, turns, provenance, conflicts and lengths, and the
    messages nothing else refers to then; the (run, task) keys they were under."""
    keys = {(run_id, task_id) for ids in chunks(trial_ids) for run_id, task_id in conn.execute(
        select(_TRIALS.c.run_id, _TRIALS.c.task_id).where(_TRIALS.c.id.in_(ids)))}
    episode_ids = [e for ids in chunks(trial_ids)
                   for e in conn.execute(select(_EPISODES.c.id).where(_EPISODES.c.trial_id.in_(ids))).scalars()]
    conversation_ids = [c for ids in chunks(trial_ids) for c in conn.execute(
        select(_CONVERSATIONS.c.id).where(_CONVERSATIONS.c.trial_id.in_(ids))).scalars()]
    messages = messages_of(conn, trial_ids)
    # Children before parents: PostgreSQL checks every reference as it goes.
    delete_in(conn, _CONFLICTS, _CONFLICTS.c.entity_id, trial_ids, _CONFLICTS.c.entity == "trial")
    delete_in(conn, _CONFLICTS, _CONFLICTS.c.entity_id, episode_ids, _CONFLICTS.c.entity == "episode")
    delete_in(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.episode_id, episode_ids)
    delete_in(conn, _EPISODES, _EPISODES.c.id, episode_ids)
    delete_in(conn, _TURNS, _TURNS.c.conversation_id, conversation_ids)
    delete_in(conn, _CONVERSATIONS, _CONVERSATIONS.c.id, conversation_ids)
    delete_in(conn, _TRIAL_LOADS, _TRIAL_LOADS.c.trial_id, trial_ids)
    delete_in(conn, _LENGTHS, _LENGTHS.c.trial_id, trial_ids)
    delete_in(conn, _TRIALS, _TRIALS.c.id, trial_ids)
    drop_unused_messages(conn, messages)
    return keys


def drop_unused_tasks(conn: Connection, task_ids: Iterable[int | None]) -> None:
    """Delete those of the tasks that no trial of any run is of, nor any summary row names.
    (run_task_breakdown has a row under a task only where run_task_outcomes has one: the two
    are refreshed together.)"""
    for ids in chunks(sorted({t for t in task_ids if t is not None})):
        conn.execute(delete(_TASKS).where(
            _TASKS.c.id.in_(ids), ~exists().where(_TRIALS.c.task_id == _TASKS.c.id),
            ~exists().where(_OUTCOMES.c.task_id == _TASKS.c.id)))


def drop_unused_messages(conn: Connection, candidates: set[int]) -> None:
    """Delete the messages among `candidates` that no turn, trial instruction or conflict refers
    to: a message is its text, and a warehouse that never held the removed trial has no such text.
    A conflict names messages by id in its JSON (a conflicting row's turns, an instruction), so a
    message one names is kept."""
    used = set()
    for ids in chunks(sorted(candidates)):
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
    for ids in chunks(sorted(unused)):
        forget_messages(conn, list(ids))
    delete_in(conn, _MESSAGES, _MESSAGES.c.id, sorted(unused))


def delete_in(conn: Connection, table, column, ids: list[int], *where) -> None:
    for chunk in chunks(ids):
        conn.execute(delete(table).where(column.in_(chunk), *where))


def chunks(ids: Iterable[int]) -> Iterator[Sequence[int]]:
    return bulk.chunks(list(ids), _CHUNK)
