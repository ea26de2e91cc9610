"""Taking a load back: `warehouse runs delete` and `warehouse sources delete`.

A run goes with everything only it holds: its trials (whatever source brought them) with their
episodes, turns, provenance and conflicts, its summaries and labels, the ledger units that hold
nothing else (and the sources left with none). A unit that also holds other runs stays in the
ledger, so that a later ingest of it does not bring the run back.

A source goes so that the warehouse is what ingesting the other sources alone makes (the
canonical state of the law that order never matters, design.md §8): its units, the trials only it
holds, the runs left with no trial. A trial other sources hold too is made again from what they
gave: where only datasets hold it besides, from their rows, each read back as its shard held it
(warehouse.export.unit_rows) and written by the writer as their ingest writes it; where another
trace directory holds it, that directory's trial stays, and the source's Hub rows are taken off
it and the others' placed again (ingest.write.settle). Where the stored rows cannot tell what the
others alone give, the delete is refused and nothing changes (_unsure).

Both run inside the caller's transaction: a killed delete leaves the warehouse as it was. This
module reads rows back (a reader's work) and writes them (the writer's), as the pipelines beside
it do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import Connection, delete, exists, func, select, update

from ingest.write.removal import (
    chunks, delete_in, drop_unused_messages, drop_unused_tasks, messages_of, remove, shard_columns,
)
from warehouse.db import models
from warehouse.hub_columns import FIELD_COLUMNS
from warehouse.runs import dataset_names

_TRIALS, _RUNS = models.trials, models.runs
_LOADS, _SOURCES = models.loads, models.sources
_TRIAL_LOADS, _EPISODE_LOADS = models.trial_loads, models.episode_loads
_CONFLICTS, _EPISODES = models.conflicts, models.episodes
_OUTCOMES, _RUN_SOURCES = models.run_task_outcomes, models.run_sources


@dataclass(frozen=True)
class RunRemoval:
    """What deleting a run takes away (counted before, for the question asked first)."""

    trials: int
    episodes: int
    turns: int  # the episodes' turns, as the turns view counts them
    units: int  # ledger units that hold nothing else, which go too (a later ingest loads them again)
    sources: int  # sources left with no unit, which go too


def run_removal(conn: Connection, run_id: int) -> RunRemoval:
    return _run_plan(conn, run_id)[0]


def delete_run(conn: Connection, run_id: int) -> RunRemoval:
    """Delete a run with everything that is only its: its trials with their episodes, turns,
    provenance and conflicts, its summaries, labels and sources' links, the ledger units that
    hold nothing else (and the sources left with none), the tasks and messages nothing else
    refers to; inside the caller's transaction (the whole delete commits or nothing does). A
    unit that also holds another run's trials stays in the ledger, so a later ingest of it does
    not bring the run back; a unit that goes is loaded again by a later ingest."""
    removal, units, sources = _run_plan(conn, run_id)
    trial_ids = list(conn.execute(select(_TRIALS.c.id).where(_TRIALS.c.run_id == run_id)).scalars())
    delete_in(conn, _CONFLICTS, _CONFLICTS.c.load_id, units)
    keys = remove(conn, trial_ids)
    delete_in(conn, _LOADS, _LOADS.c.id, units)
    delete_in(conn, _SOURCES, _SOURCES.c.id, sources)
    _delete_empty_run(conn, run_id)
    drop_unused_tasks(conn, (task_id for _, task_id in keys))
    return removal


def _run_plan(conn: Connection, run_id: int) -> tuple[RunRemoval, list[int], list[int]]:
    """What deleting the run takes away, with the units and sources that go with it."""
    trial_ids = select(_TRIALS.c.id).where(_TRIALS.c.run_id == run_id)
    episodes = select(_EPISODES.c.id, _EPISODES.c.n_turns).where(_EPISODES.c.trial_id.in_(trial_ids)).subquery()
    n_episodes, n_turns = conn.execute(select(func.count(), func.coalesce(func.sum(episodes.c.n_turns), 0))).one()
    units = _units_only_of(conn, run_id)
    sources = _sources_only_of(conn, units)
    n_trials = conn.execute(select(func.count()).select_from(trial_ids.subquery())).scalar_one()
    return RunRemoval(n_trials, n_episodes, int(n_turns), len(units), len(sources)), units, sources


@dataclass(frozen=True)
class SourceRemoval:
    """What taking back a source changes (counted before, for the question asked first)."""

    units: int
    trials: int  # trials no other source holds, which go
    shared: int  # trials other sources hold too, which stay with what those gave
    runs: int  # runs left with no trial, which go
    refused: str | None = None  # why the source cannot be taken back exactly


def source_removal(conn: Connection, source_id: int) -> SourceRemoval:
    return _SourcePlan.of(conn, source_id).removal


@dataclass(frozen=True)
class _SourcePlan:
    """What taking back a source works from: its units, the trials only they hold, those
    others hold too (and of these, those another trace directory holds), the runs left empty."""

    units: list[int]
    only: list[int]
    shared: list[int]
    traced: set[int]
    runs: list[int]
    removal: SourceRemoval

    @classmethod
    def of(cls, conn: Connection, source_id: int) -> "_SourcePlan":
        units = list(conn.execute(select(_LOADS.c.id).where(_LOADS.c.source_id == source_id)).scalars())
        only, shared = _trials_of_source(conn, units)
        traced = _traced(conn, shared, units)
        runs = _runs_left_empty(conn, only)
        removal = SourceRemoval(len(units), len(only), len(shared), len(runs), _unsure(conn, units, sorted(traced)))
        return cls(units, only, shared, traced, runs, removal)


def delete_source(conn: Connection, source_id: int) -> SourceRemoval:
    """Take back a source: what only it brought goes (its units, the trials only it holds, with
    everything on them, the runs left with no trial); a trial other sources hold too is made as
    ingesting them alone makes it (_replay; or, where another trace directory holds it, its
    Hub rows placed again without the source's: ingest.write.settle). Inside the caller's
    transaction. Refused (WarehouseError, nothing changed) where the stored rows cannot tell
    what the others alone would give (SourceRemoval.refused)."""
    from ingest.read.traces import TraceUnit, run_name_for
    from ingest.write.settle import place, take_up
    from ingest.write.writer import UnitWriter
    from warehouse import summaries
    from warehouse.errors import WarehouseError

    plan = _SourcePlan.of(conn, source_id)
    if plan.removal.refused:
        raise WarehouseError(plan.removal.refused)
    units, only, shared, traced, runs = plan.units, plan.only, plan.shared, plan.traced, plan.runs
    ours = set(units)
    messages = messages_of(conn, shared)
    if traced:
        # A trial another trace directory holds stays that directory's: the source's Hub rows
        # are taken off it and the others' placed again (_unsure checked that its fields stay).
        w = UnitWriter(conn, units[0])
        try:
            for trial_id in sorted(traced):
                taken = take_up(w, trial_id)
                taken.rows = [row for row in taken.rows if row.load_id not in ours]
                place(w, trial_id, taken)
            w.flush()
            summaries.refresh(conn, units[0], w.touched_trials | traced, (), ())
        finally:
            w.bulk.close()
    for trial_id in shared:
        if trial_id not in traced:
            _replay(conn, trial_id, units)
    delete_in(conn, _CONFLICTS, _CONFLICTS.c.load_id, units)
    delete_in(conn, _EPISODE_LOADS, _EPISODE_LOADS.c.load_id, units)
    keys = remove(conn, only)
    # The names the source's trace directories give their runs (the folder holding each trial).
    folders = {run_name_for(TraceUnit(Path(uri) / unit, "trial")) for uri, unit in conn.execute(
        select(_SOURCES.c.uri, _LOADS.c.unit).join(_LOADS, _LOADS.c.source_id == _SOURCES.c.id)
        .where(_SOURCES.c.id == source_id, _LOADS.c.arrow_schema.is_(None)))}
    delete_in(conn, _TRIAL_LOADS, _TRIAL_LOADS.c.load_id, units)
    linked = conn.execute(select(_RUNS.c.id, _RUNS.c.run_key, _RUNS.c.name).join(
        _RUN_SOURCES, _RUN_SOURCES.c.run_id == _RUNS.c.id).where(_RUN_SOURCES.c.source_id == source_id)).all()
    given = {run_id: set(dataset_names(conn, run_id, run_key)[1]) | folders for run_id, run_key, _ in linked}
    delete_in(conn, _LOADS, _LOADS.c.id, units)
    conn.execute(delete(_RUN_SOURCES).where(_RUN_SOURCES.c.source_id == source_id))
    conn.execute(delete(_SOURCES).where(_SOURCES.c.id == source_id))
    for run_id in runs:
        _delete_empty_run(conn, run_id)
    for run_id, run_key, name in linked:
        # A name the source gave goes with it: the run is named as the others name it (a trace
        # directory's folder, else the first dataset's name: warehouse.runs.dataset_names).
        if run_id not in runs and name in given[run_id]:
            by_trace, named = dataset_names(conn, run_id, run_key)
            if not by_trace and name not in named:
                conn.execute(update(_RUNS).where(_RUNS.c.id == run_id).values(name=named[0] if named else None))
    left = {(run_id, task_id) for run_id, task_id in keys if run_id not in runs}
    if left:
        summaries.refresh(conn, units[0], (), (), left)
    drop_unused_tasks(conn, (task_id for _, task_id in keys))
    drop_unused_messages(conn, messages)
    return plan.removal


def _traced(conn: Connection, trial_ids: list[int], units: list[int]) -> set[int]:
    """Those of the trials that a trace directory's unit other than `units` holds."""
    return {t for ids in chunks(trial_ids) for t in conn.execute(
        select(_TRIAL_LOADS.c.trial_id).join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id)
        .where(_TRIAL_LOADS.c.trial_id.in_(ids), _LOADS.c.id.not_in(units), _LOADS.c.arrow_schema.is_(None))).scalars()}


def _replay(conn: Connection, trial_id: int, units: list[int]) -> None:
    """A trial only datasets hold besides `units`: made again from the other units' rows, each
    read back as its shard held it (warehouse.export.unit_rows) and written by the writer as
    an ingest of those units writes it (ingest.write.settle makes the result one of the set of
    rows, not of their order)."""
    from ingest.read.hub import rows_of
    from ingest.write.writer import UnitWriter
    from warehouse import summaries
    from warehouse.export import unit_rows

    run_key = conn.execute(select(_RUNS.c.run_key).join(_TRIALS, _TRIALS.c.run_id == _RUNS.c.id)
                           .where(_TRIALS.c.id == trial_id)).scalar_one()
    others = conn.execute(
        select(_LOADS.c.id, _LOADS.c.arrow_schema, _SOURCES.c.uri, _LOADS.c.unit)
        .join(_TRIAL_LOADS, _TRIAL_LOADS.c.load_id == _LOADS.c.id).join(_SOURCES, _SOURCES.c.id == _LOADS.c.source_id)
        .where(_TRIAL_LOADS.c.trial_id == trial_id, _LOADS.c.id.not_in(units))
        .order_by(_SOURCES.c.kind, _SOURCES.c.uri, _LOADS.c.unit, _LOADS.c.content_hash)).all()
    rows: dict[int, list] = {}
    for load_id, _, uri, unit in others:
        seen: dict = {}  # the trial's first row in the shard (hub.map_row)
        rows[load_id] = []
        for row_number, batch in unit_rows(conn, load_id, trial_id):
            trials, rejected = rows_of(batch, Path(uri) / unit, row_number, run_key, None, seen)
            assert not rejected, rejected  # each row was accepted when its unit was loaded
            rows[load_id] += [replace(trial, run_key=run_key) for trial in trials]
    keys = remove(conn, [trial_id])
    for load_id, schema, _, _ in others:
        w = UnitWriter(conn, load_id, from_hub=True, columns=shard_columns(schema))
        try:
            w.add_trials(rows[load_id])
            w.settle()
            w.flush()
            summaries.refresh(conn, load_id, w.touched_trials, (), w.left_keys | keys)
            keys = set()
        finally:
            w.bulk.close()


def _trials_of_source(conn: Connection, units: list[int]) -> tuple[list[int], list[int]]:
    """The trials the units hold: those no other unit holds, and those another unit holds too."""
    held = sorted({t for ids in chunks(units) for t in conn.execute(
        select(_TRIAL_LOADS.c.trial_id).where(_TRIAL_LOADS.c.load_id.in_(ids))).scalars()})
    elsewhere = {t for ids in chunks(held) for t in conn.execute(
        select(_TRIAL_LOADS.c.trial_id).where(_TRIAL_LOADS.c.trial_id.in_(ids),
                                              _TRIAL_LOADS.c.load_id.not_in(units))).scalars()}
    return [t for t in held if t not in elsewhere], [t for t in held if t in elsewhere]


# The Hub column each trial field comes from, where a dataset gives it (a trace directory gives
# every field): the fields that can say which unit a trial's value came from.
_FIELD_COLUMNS = {**FIELD_COLUMNS, "reward": "result", "exception_type": "result", "started_at": "date"}


def _unsure(conn: Connection, units: list[int], traced: list[int]) -> str | None:
    """Why the stored rows cannot tell what a shared trial is without these units, if they
    cannot (`traced`: the shared trials another trace directory holds). A trial only datasets
    hold besides them is made again from those datasets' rows (_replay); one another trace
    directory holds stays that directory's, which cannot be told when these units hold another
    version of its trial folder (one whose contents hash otherwise), or when one of its fields
    has the value only these units gave (the other units that have its column disagree, or
    none has it). A field these units disagreed on keeps the value it has."""
    if not traced:
        return None
    ours = set(units)
    twice, alone = set(), set()
    columns_of: dict[int, frozenset[str] | None] = {}  # None: a trace directory's unit
    hash_of: dict[int, str] = {}
    for ids in chunks(traced):
        holders: dict[int, list[int]] = {}
        for trial_id, load_id, schema, content_hash in conn.execute(
                select(_TRIAL_LOADS.c.trial_id, _LOADS.c.id, _LOADS.c.arrow_schema, _LOADS.c.content_hash)
                .join(_LOADS, _LOADS.c.id == _TRIAL_LOADS.c.load_id).where(_TRIAL_LOADS.c.trial_id.in_(ids))):
            holders.setdefault(trial_id, []).append(load_id)
            if load_id not in columns_of:
                columns_of[load_id] = None if schema is None else shard_columns(schema)
                hash_of[load_id] = content_hash
        disputed: dict[int, set[tuple[int, str]]] = {}
        for trial_id, load_id, field in conn.execute(
                select(_CONFLICTS.c.entity_id, _CONFLICTS.c.load_id, _CONFLICTS.c.field)
                .where(_CONFLICTS.c.entity == "trial", _CONFLICTS.c.entity_id.in_(ids))):
            disputed.setdefault(trial_id, set()).add((load_id, field))
        values = {row.id: row for row in conn.execute(select(_TRIALS).where(_TRIALS.c.id.in_(ids)))}
        for trial_id, loads in holders.items():
            # A trial folder these units hold is the same as another source's (the same job
            # loaded from two places) when their contents hash alike: nothing of it is lost.
            kept = {hash_of[load] for load in loads if load not in ours and columns_of[load] is None}
            if any(columns_of[load] is None and hash_of[load] not in kept for load in loads if load in ours):
                twice.add(trial_id)
                continue
            said = disputed.get(trial_id, set())

            def gives(load: int, field: str) -> bool:  # the unit's value is the trial's
                columns = columns_of[load]
                return (columns is None or _FIELD_COLUMNS[field] in columns) and (load, field) not in said

            for field in _FIELD_COLUMNS:
                if getattr(values[trial_id], field) is not None and \
                        any(gives(load, field) for load in loads if load in ours) and \
                        not any(gives(load, field) for load in loads if load not in ours):
                    alone.add(trial_id)
    if twice:
        return (f"{len(twice):,} trial{'s' * (len(twice) != 1)} of its trace directories "
                f"{'are' if len(twice) != 1 else 'is'} also held, as another version, by another source's trace "
                f"directory")
    if alone:
        return (f"{len(alone):,} trial{'s' * (len(alone) != 1)} it shares with a trace directory "
                f"{'have' if len(alone) != 1 else 'has'} values only it gave")
    return None


def _runs_left_empty(conn: Connection, trial_ids: list[int]) -> list[int]:
    """The runs whose every trial is among `trial_ids`."""
    going = set(trial_ids)
    runs = {r for ids in chunks(trial_ids) for r in conn.execute(
        select(_TRIALS.c.run_id).where(_TRIALS.c.id.in_(ids)).distinct()).scalars()}
    return sorted(run for run in runs if set(conn.execute(
        select(_TRIALS.c.id).where(_TRIALS.c.run_id == run)).scalars()) <= going)


def _delete_empty_run(conn: Connection, run_id: int) -> None:
    """A run with no trial left: its summaries, labels, sources' links and itself."""
    for table in (_OUTCOMES, models.run_task_breakdown, models.run_labels, _RUN_SOURCES):
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
    touched = {s for ids in chunks(units) for s in conn.execute(
        select(_LOADS.c.source_id).where(_LOADS.c.id.in_(ids)).distinct()).scalars()}
    kept = set(units)
    return sorted(source for source in touched
                  if set(conn.execute(select(_LOADS.c.id).where(_LOADS.c.source_id == source)).scalars()) <= kept)
