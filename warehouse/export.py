"""`export_hub`: warehouse rows written back as a Hub-shaped Parquet dataset
(`OUT/README.md` + `OUT/data/*.parquet`, one row per episode).

- **By source** (`sources=`): a reproduction of what was ingested. Each input shard gives one
  output shard with the same file name, the same Arrow schema (`loads.arrow_schema`, metadata
  included) and the same rows in the same order (the provenance in `episode_loads`), every value
  cast back to its original type. Trials read from trace directories have no Hub schema: their
  episodes go to `train-*` shards as `harbor traces export` writes them, for the options given
  (warehouse.harbor_rows: columns, Arrow schema, values, row order).
- **By run** (no `sources=`: every run, or those `filters=` keep): each episode once (from the
  first unit that brought it), under the *union* of the schemas of the shards the rows came
  from, so that no column of any of them is dropped (a row gets null in the columns its own shard
  lacked). Shards roll over at SHARD_BYTES of text.
- Both: only the rows of the episodes that the filters and the pick (warehouse.selection) keep.

Memory stays bounded whatever the size: provenance rows are streamed from the database, their
detail (episodes, trials, turns, messages) is fetched CHUNK_ROWS at a time, and rows are written
in row groups of at most ROW_GROUP_ROWS rows or ROW_GROUP_BYTES of text.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Connection, Engine, Integer, and_, exists, func, or_, select, text
from sqlalchemy.orm import aliased

from warehouse.arrow_json import from_json, schema_from_json
from warehouse.db import models
from warehouse.errors import WarehouseError, first_line
from warehouse.filters import Filters
from warehouse import harbor_rows
from warehouse.harbor_rows import Columns
from warehouse.hub_columns import FIELD_COLUMNS, parquet_name
from warehouse.outdir import staged_output
from warehouse.runs import labels_of
from warehouse.readonly import check_timeout
from warehouse.selection import DEFAULT_PICK_TIMEOUT, Pick, episodes_sql, picked_trials
from warehouse.summaries import check_threshold, own_trace_sql
from warehouse.texts import exact_column, from_bytes
from warehouse.version import __version__

SOURCES, LOADS, RUNS, TASKS, TRIALS, EPISODES, CONVERSATION_TURNS, MESSAGES, EPISODE_LOADS, TRIAL_LOADS, CONFLICTS = (
    models.sources, models.loads, models.runs, models.tasks, models.trials, models.episodes,
    models.conversation_turns, models.messages, models.episode_loads, models.trial_loads, models.conflicts,
)

CHUNK_ROWS = 1000
ROW_GROUP_ROWS = 1000
# Rows of an `--episodes all` export repeat long prefixes: a row group also closes at this much
# text so that a few huge rows cannot make one Arrow table of many gigabytes.
ROW_GROUP_BYTES = 64 << 20
# Rolled shards (run exports, trace-directory rows) start a new file past this much text: the
# `datasets` library's default max_shard_size.
SHARD_BYTES = 500 << 20
IN_CHUNK = 500  # ids per `IN (...)`: far below both backends' bound-parameter limits
COMPRESSION = "zstd"

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class CardPaths:
    """How the dataset card names what is local to this machine: a source ingested from a local
    path, and the paths in the command line it quotes. A card is written to be published, so by
    default no absolute path of the machine is in it: a local source under `root` is named by
    its path relative to `root`; any other by its folder's (or file's) name and a content hash,
    sha256 over its units' names and content hashes as the ledger holds them (`name
    (sha256:0123456789abcdef)`); a path in the command by its path relative to `root`, else its
    name. `full`: every path as it is. A Hub source is its id, with the revision ingested
    (`org/name@revision`); so is a local snapshot of one in the Hub's cache."""

    root: Path | None = None
    full: bool = False

    def __post_init__(self) -> None:
        if self.full and self.root is not None:
            raise WarehouseError("the card's paths are either full or relative to a root, not both")

    def path(self, value: str) -> str:
        """A local path as the card shows it (a relative one, as typed, is left as it is)."""
        if self.full or not os.path.isabs(os.path.expanduser(value)):
            return value
        path = Path(os.path.expanduser(value))
        return self._relative(path) or path.name or "/"

    def _relative(self, path: Path) -> str | None:
        """`path` relative to the root, if it is under it."""
        if self.root is None:
            return None
        root = self.root.expanduser().absolute()
        return path.relative_to(root).as_posix() if path == root or root in path.parents else None

    def source(self, conn: Connection, source_id: int, kind: str, uri: str, name: str, revision: str | None) -> str:
        """A source (its row of the sources table) as the card names it."""
        if kind == "hub" or (revision and "/" in name and not self.full):
            return f"{name}@{revision}" if revision else name
        if self.full:
            return uri
        if (relative := self._relative(Path(uri))) is not None:
            return relative
        units = conn.execute(select(LOADS.c.unit, LOADS.c.content_hash).where(
            LOADS.c.source_id == source_id, LOADS.c.status == "loaded").order_by(LOADS.c.unit, LOADS.c.id))
        digest = hashlib.sha256("".join(f"{unit}\t{content}\n" for unit, content in units).encode()).hexdigest()
        return f"{Path(uri).name} (sha256:{digest[:16]})"

    def command(self, args: Sequence[str]) -> list[str]:
        """A command line with the local paths in it named as `path` names them: arguments,
        `--option=value` values, and the file of a `sqlite:///` URL."""
        shown = []
        for arg in args:
            option, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
            if value.startswith("sqlite:///") and os.path.isabs(value[len("sqlite:///"):]):
                value = "sqlite:///" + self.path(value[len("sqlite:///"):])
            else:
                value = self.path(value)
            shown.append(f"{option}{eq}{value}")
        return shown


@dataclass
class ExportInfo:
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    rows_per_file: list[int] = field(default_factory=list)
    # What the export could not reproduce exactly, one line each.
    notes: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # what --force replaced in out_dir
    note: str | None = None  # a filter value that matched nothing (Filters.unmatched)
    schema: pa.Schema | None = None  # the one schema of every file (None when they differ)

    @property
    def n_rows(self) -> int:
        return sum(self.rows_per_file)


def export_hub(engine: Engine, out_dir: str | Path, filters: Filters | None = None,
               sources: Sequence[str] | None = None, *, pick: Pick | None = None,
               command: Sequence[str] | None = None, force: bool = False,
               timeout: float = DEFAULT_PICK_TIMEOUT, card_paths: CardPaths = CardPaths(),
               columns: Columns = Columns()) -> ExportInfo:
    """Write the rows of `sources` (names or URIs; none: every run's episodes), narrowed by
    `filters` (warehouse.filters: runs, tasks, models, agents, labels) and `pick`
    (warehouse.selection), as a Hub dataset in `out_dir`, which must be missing or empty unless
    `force`. `columns`: the metadata columns of trace-directory rows (Harbor's
    --instruction-metadata, --verifier-metadata). `command` is the command line the card names; `card_paths`, how the card names
    local paths (CardPaths: by default, never absolute). `timeout`: the seconds the trials may
    take to pick (the statement holding the filters and --where, run as `warehouse sql` runs a
    query); writing them out is not timed."""
    check_timeout(timeout)
    out = Path(out_dir)
    info = ExportInfo(out_dir=out)
    with engine.connect() as conn:
        selection = _Selection.resolve(conn, sources, filters or Filters(), pick or Pick(), timeout)
        info.note = selection.filters.unmatched(conn)
        outputs = (_plan_sources(conn, selection, columns) if selection.source_ids
                   else [_plan_runs(conn, selection, columns)])
        if selection.source_ids:
            info.notes += _missing_rows(conn, selection.source_ids)
        info.notes += _running_trials(conn, selection)
        builder = _RowBuilder(conn, columns)
        with staged_output(out, force, info.replaced) as staging:
            # Shards are written under temporary names in their own folder (a final name may be
            # anything an input shard was called) and renamed once all of them are known.
            parts, data = staging / "parts", staging / "data"
            parts.mkdir()
            data.mkdir()
            paths = (parts / f"{i:05d}.parquet" for i in itertools.count())
            shards = _drop_empty([shard for output in outputs for shard in _write_output(builder, output, paths)])
            info.schema = _one_schema([shard.schema for shard in shards])
            for shard, name in zip(shards, _file_names(shards)):
                shard.path.rename(data / name)
                info.files.append(out / "data" / name)
                info.rows_per_file.append(shard.n_rows)
            parts.rmdir()
            _write_card(staging / "README.md", conn, selection, info, builder, command, card_paths)
        info.notes += builder.notes()
    return info


# --- what to export ------------------------------------------------------------------------


@dataclass
class _Selection:
    source_ids: list[int] | None
    source_labels: list[str]
    filters: Filters
    pick: Pick
    episodes: Any = None  # the selected episodes' ids (a subquery), when the filters or the pick narrow

    @classmethod
    def resolve(cls, conn: Connection, sources: Sequence[str] | None, filters: Filters, pick: Pick,
                timeout: float) -> "_Selection":
        source_ids = _match(conn, SOURCES, ("uri", "name"), sources, "source", paths=True) if sources else None
        episodes = None
        check_threshold(pick.threshold, conn)  # outside [0, 1]: within the rewards stored
        if filters or pick:
            predicate = filters.sql(conn, run_id="s.run_id", task="s.task", model="s.model", agent="s.agent",
                                    started_at="s.started_at")
            # The trials are picked once, through the guarded read path (the user's --where is
            # in that statement); the export's own statements read their ids, bound as one JSON
            # array, never the predicate.
            trial_ids = picked_trials(conn.engine.url, pick, predicate, timeout=timeout)
            picked = ("SELECT value FROM json_each(:picked)" if conn.dialect.name == "sqlite" else
                      "SELECT CAST(value AS bigint) FROM jsonb_array_elements_text(CAST(:picked AS jsonb))")
            episodes = text(f"SELECT e.id AS episode_id FROM episodes e WHERE e.trial_id IN ({picked}) "
                            f"AND {episodes_sql(pick)}").bindparams(picked=json.dumps(trial_ids)) \
                .columns(episode_id=Integer)
        return cls(source_ids, list(sources or []), filters, pick, episodes)

    @property
    def row_filter(self) -> list:
        return [] if self.episodes is None else [EPISODE_LOADS.c.episode_id.in_(self.episodes)]

    @property
    def narrowed(self) -> bool:
        """Whether only some rows of the sources are wanted (an empty input shard then stays out)."""
        return self.episodes is not None


def _match(conn: Connection, table, columns: tuple[str, ...], wanted: Sequence[str], what: str,
           paths: bool = False) -> list[int]:
    """Ids of the rows whose `columns` equal each wanted value (all of them when several match);
    a local path also matches the absolute URI it was ingested under."""
    ids: list[int] = []
    for value in wanted:
        candidates = {value, str(Path(value).expanduser().resolve())} if paths else {value}
        cond = or_(*(table.c[c].in_(candidates) for c in columns))
        found = conn.execute(select(table.c.id).where(cond).order_by(table.c.id)).scalars().all()
        if not found:
            raise WarehouseError(f"no {what} {value!r} in the warehouse (give its {' or '.join(columns)})")
        ids += [i for i in found if i not in ids]
    return ids


@dataclass
class _Output:
    """A stream of rows bound for one schema: either one input shard (kept under its file
    name) or rows rolled into train-* shards."""

    schema: pa.Schema
    where: list  # conditions on the provenance query (episode_loads ⋈ loads ⋈ episodes ⋈ trials)
    file_name: str | None = None
    dedupe: bool = False  # one row per episode: its first provenance row
    keep_empty: bool = False  # an input shard that was empty (or all rejected) stays a shard
    # Trace-directory rows in Harbor's order (harbor_rows): main rows first, then subagent kinds.
    harbor_order: bool = False


# Harbor's exporter skips a trial directory without result.json (a trial still running).
_FINISHED = TRIALS.c.status == "complete"


def _plan_sources(conn: Connection, sel: _Selection, columns: Columns) -> list[_Output]:
    outputs = []
    hub_loads = select(LOADS.c.id, LOADS.c.unit, LOADS.c.arrow_schema).join(
        SOURCES, SOURCES.c.id == LOADS.c.source_id).where(
        LOADS.c.source_id.in_(sel.source_ids), LOADS.c.arrow_schema.is_not(None)).order_by(*_unit_order(LOADS, SOURCES))
    for load in conn.execute(hub_loads):
        outputs.append(_Output(schema=schema_from_json(load.arrow_schema), file_name=parquet_name(Path(load.unit).name),
                               where=[EPISODE_LOADS.c.load_id == load.id, *sel.row_filter],
                               keep_empty=not sel.narrowed))
    traces = [LOADS.c.source_id.in_(sel.source_ids), LOADS.c.arrow_schema.is_(None), _FINISHED, *sel.row_filter]
    if _any_row(conn, traces):
        outputs.append(_Output(schema=_harbor_schema(conn, traces, columns), where=traces, harbor_order=True))
    return outputs


def _plan_runs(conn: Connection, sel: _Selection, columns: Columns) -> _Output:
    where = [*sel.row_filter, or_(LOADS.c.arrow_schema.is_not(None), _FINISHED)]
    loads = select(EPISODE_LOADS.c.load_id).select_from(_PROVENANCE).where(*where)
    texts = conn.execute(select(LOADS.c.arrow_schema).join(SOURCES, SOURCES.c.id == LOADS.c.source_id).where(
        LOADS.c.id.in_(loads), LOADS.c.arrow_schema.is_not(None)).order_by(*_unit_order(LOADS, SOURCES))).scalars()
    schemas = [schema_from_json(text) for text in dict.fromkeys(texts)]
    traces = [*where, LOADS.c.arrow_schema.is_(None)]
    if not schemas or _any_row(conn, traces):
        schemas.append(_harbor_schema(conn, traces, columns))
    return _Output(schema=_union(schemas), where=where, dedupe=True, harbor_order=True)


def _union(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema holding every column of every shard, in order of first appearance. Only a
    single schema keeps its metadata: the `huggingface` features of one shard would not
    describe the union."""
    if len(schemas) == 1:
        return schemas[0]
    try:
        return pa.unify_schemas(schemas, promote_options="permissive").remove_metadata()
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise WarehouseError(f"the selected rows come from shards whose columns do not fit one schema "
                             f"({first_line(exc)}); export them with --source instead") from None


def _one_schema(schemas: list[pa.Schema]) -> pa.Schema | None:
    """The schema all files share (metadata aside), for the card's features; None if they differ."""
    if all(schema.equals(schemas[0]) for schema in schemas[1:]):
        return schemas[0]
    return None


# An episode of a main trajectory (harbor_rows), in the statements over _PROVENANCE.
_MAIN_TRAJECTORY = text(own_trace_sql("episodes"))
_SUBAGENT = text(f"NOT {own_trace_sql('episodes')}")


def _harbor_schema(conn: Connection, where: list, columns: Columns) -> pa.Schema:
    """Harbor's schema (harbor_rows.schema) for the trace-directory rows `where` selects:
    tool_definitions when the first main row has some (`datasets` takes the first row's keys),
    trace_source when some row is a subagent's."""
    return harbor_rows.schema(tool_definitions=_tool_definitions_type(conn, where), columns_=columns,
                              trace_source=_any_row(conn, [*where, _SUBAGENT]))


def _tool_definitions_type(conn: Connection, where: list) -> pa.DataType | None:
    """The type `datasets` gives Harbor's tool_definitions column (a list of OpenAI function
    schemas, as structs): Arrow's inference over the rows' distinct values. None when the first
    main row (in unit and row order, _provenance_query's) has none: its keys are the dataset's
    columns."""
    tools = EPISODES.c.extra["tool_definitions"]
    first = conn.execute(select(tools).select_from(_PROVENANCE).where(*where, _MAIN_TRAJECTORY)
                         .order_by(*_unit_order(LOADS, SOURCES), EPISODE_LOADS.c.row_number).limit(1)).scalar()
    if not first:
        return None
    stmt = select(tools).distinct().select_from(_PROVENANCE).where(*where)
    values = [harbor_rows.tool_definitions(v) for v in conn.execute(stmt).scalars() if v]
    if not values:
        return None
    try:
        return pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise WarehouseError(f"the trajectories' tool_definitions do not fit one Arrow type ({first_line(exc)})") from None


_PROVENANCE = (
    EPISODE_LOADS.join(LOADS, LOADS.c.id == EPISODE_LOADS.c.load_id)
    .join(SOURCES, SOURCES.c.id == LOADS.c.source_id)
    .join(EPISODES, EPISODES.c.id == EPISODE_LOADS.c.episode_id)
    .join(TRIALS, TRIALS.c.id == EPISODES.c.trial_id)
)


def _unit_order(loads, sources) -> list:
    """The order of units that does not depend on the order they were loaded in: trace
    directories first (their rows are the richer), then by source kind and URI, unit and its
    hash (load ids would give the order of loading)."""
    return [loads.c.arrow_schema.is_not(None), sources.c.kind, sources.c.uri, loads.c.unit, loads.c.content_hash]


def _earlier(a: list, b: list):
    """a < b, column by column."""
    if len(a) == 1:
        return a[0] < b[0]
    return or_(a[0] < b[0], and_(a[0] == b[0], _earlier(a[1:], b[1:])))


def _any_row(conn: Connection, where: list) -> bool:
    stmt = select(EPISODE_LOADS.c.episode_id).select_from(_PROVENANCE).where(*where).limit(1)
    return conn.execute(stmt).first() is not None


def _provenance_query(output: _Output, *where):
    """(load_id, row_number, episode_id, from_hub, the row's own extra or None, the episode's
    trace_source) of the output's rows (and `where`), in unit and row order (_unit_order). With
    `dedupe`, each episode's first row in that order: a trace directory's where it has one."""
    el = EPISODE_LOADS
    order = [*_unit_order(LOADS, SOURCES), el.c.row_number]
    stmt = (select(el.c.load_id, el.c.row_number, el.c.episode_id, LOADS.c.arrow_schema.is_not(None), el.c.extra,
                   EPISODES.c.trace_source)
            .select_from(_PROVENANCE).where(*output.where, *where).order_by(*order))
    if output.dedupe:
        earlier, its_load, its_source = aliased(el), aliased(LOADS), aliased(SOURCES)
        stmt = stmt.where(~exists().where(
            earlier.c.episode_id == el.c.episode_id, its_load.c.id == earlier.c.load_id,
            its_source.c.id == its_load.c.source_id,
            _earlier([*_unit_order(its_load, its_source), earlier.c.row_number], order)))
    return stmt


def _missing_rows(conn: Connection, source_ids: list[int]) -> list[str]:
    """Rows of the sources' shards that never made it into the tables, so cannot come back."""
    notes = []
    rejected = select(LOADS.c.unit, LOADS.c.n_rejected).where(
        LOADS.c.source_id.in_(source_ids), LOADS.c.n_rejected > 0).order_by(LOADS.c.id)
    for unit, n in conn.execute(rejected):
        notes.append(f"{unit}: {n} rows were rejected at ingest and are not in the warehouse")
    # Since schema 0005 a conflicting row keeps its own conversation and comes back; rows of
    # older loads only left a hash in the conflict and no provenance.
    kept = exists().where(EPISODE_LOADS.c.load_id == CONFLICTS.c.load_id,
                          EPISODE_LOADS.c.row_number == CONFLICTS.c.row_number)
    conflicted = (select(LOADS.c.unit, func.count()).join_from(CONFLICTS, LOADS, LOADS.c.id == CONFLICTS.c.load_id)
                  .where(LOADS.c.source_id.in_(source_ids), CONFLICTS.c.entity == "episode", ~kept)
                  .group_by(LOADS.c.id, LOADS.c.unit).order_by(LOADS.c.id))
    for unit, n in conn.execute(conflicted):
        notes.append(f"{unit}: {n} rows differ from an episode stored before with the same key "
                     f"(the first version is kept) and are not exported")
    return notes


def _running_trials(conn: Connection, sel: _Selection) -> list[str]:
    """The trace-directory trials left out because they had not finished (no result.json)."""
    where = [LOADS.c.arrow_schema.is_(None), ~_FINISHED, *sel.row_filter]
    if sel.source_ids:
        where.append(LOADS.c.source_id.in_(sel.source_ids))
    n = conn.execute(select(func.count(func.distinct(TRIALS.c.id))).select_from(_PROVENANCE).where(*where)).scalar()
    if not n:
        return []
    return [f"{n} trial{'s' if n > 1 else ''} without result.json (still running when read) "
            f"{'are' if n > 1 else 'is'} not written, as Harbor's exporter skips them"]


# --- rows ----------------------------------------------------------------------------------


class _RowBuilder:
    """Rebuilds Hub rows (column name -> Python value) from the tables, a chunk at a time."""

    def __init__(self, conn: Connection, columns: Columns = Columns()):
        self.conn = conn
        self.columns = columns
        self.n_surrogate_texts = 0
        # Rows written per load and per run (ids): the card's provenance.
        self.rows_by_load: Counter[int] = Counter()
        self.rows_by_run: Counter[int] = Counter()

    def rows(self, output: _Output) -> Iterator[tuple[dict[str, Any], int]]:
        """(row, text size) for each row of the output, in order: unit and row order, except
        that, in Harbor's order, trace-directory rows of subagents come after all the others,
        kind by kind (each kind in the order it first appears, its rows in unit and row order:
        one more pass over the provenance per kind)."""
        kinds: dict[str, None] = {}
        for chunk in self._provenance(output):
            main = []
            for row in chunk:
                kind = self._kind(output, row)
                if kind is None:
                    main.append(row)
                else:
                    kinds.setdefault(kind)
            yield from self._chunk(main)
        # A trace row is a subagent's by its episode's source, or by its own (EPISODE_LOADS.extra).
        candidates = (LOADS.c.arrow_schema.is_(None), or_(_SUBAGENT, EPISODE_LOADS.c.extra.is_not(None)))
        for kind in kinds:
            for chunk in self._provenance(output, *candidates):
                yield from self._chunk([row for row in chunk if self._kind(output, row) == kind])

    def _provenance(self, output: _Output, *where) -> Iterator[Sequence[tuple]]:
        result = self.conn.execution_options(yield_per=CHUNK_ROWS).execute(_provenance_query(output, *where))
        return result.partitions()

    @staticmethod
    def _kind(output: _Output, row: tuple) -> str | None:
        """The subagent kind a row waits for (None: written in place)."""
        _, _, _, from_hub, own_extra, trace_source = row
        if from_hub or not output.harbor_order:
            return None
        return harbor_rows.kind(trace_source, own_extra)

    def notes(self) -> list[str]:
        if not self.n_surrogate_texts:
            return []
        return [f"{self.n_surrogate_texts} texts held lone surrogates, which Parquet strings (UTF-8) cannot; "
                f"they were written with U+FFFD in their place"]

    def _chunk(self, chunk: Sequence[tuple]) -> Iterator[tuple[dict[str, Any], int]]:
        if not chunk:
            return
        episodes = self._by_id(EPISODES, {r[2] for r in chunk})
        trial_ids = {e.trial_id for e in episodes.values()}
        trials = {t.id: t for t in self._select_in(
            select(TRIALS, TASKS.c.name.label("task_name")).outerjoin(TASKS, TASKS.c.id == TRIALS.c.task_id),
            TRIALS.c.id, trial_ids)}
        # Each conversation read once; an episode's rows are the first n_turns of its structs,
        # shared (not copied) between the episodes of a trajectory: a chunk of a long
        # trajectory's episodes holds its turns once, not once per episode.
        turns: dict[int, list] = {}
        ct = CONVERSATION_TURNS
        for turn in self._select_in(select(ct).order_by(ct.c.conversation_id, ct.c.idx), ct.c.conversation_id,
                                    {e.conversation_id for e in episodes.values()} - {None}):
            turns.setdefault(turn.conversation_id, []).append(turn)
        overlay, overlay_messages = self._conflicts({r[0] for r in chunk}, trial_ids)
        own_turns = self._conflicting_conversations(chunk)
        texts = self._texts({t.message_id for ts in turns.values() for t in ts}
                            | {t.instruction_id for t in trials.values()} | overlay_messages
                            | {message_id for ts in own_turns.values() for _, message_id, _ in ts})
        structs = {conv: [_message(t.role, t.message_id, t.extra, texts) for t in ts] for conv, ts in turns.items()}
        steps: dict[int, dict] = {}  # per trial: {step: (instruction, verifier_output)}
        for load_id, row_number, episode_id, from_hub, own_extra, _ in chunk:
            episode = episodes[episode_id]
            trial = trials[episode.trial_id]
            self.rows_by_load[load_id] += 1
            self.rows_by_run[trial.run_id] += 1
            if (load_id, row_number) in own_turns:  # this row's conversation conflicted with the stored one
                conversation = [_message(*t, texts) for t in own_turns[load_id, row_number]]
                size = sum(len(m["content"] or "") for m in conversation)
            else:
                conversation = structs.get(episode.conversation_id, [])[:episode.n_turns]
                size = episode.n_chars  # its turns' characters, as stored
            values = {
                **self._trial_values(trial, texts, overlay.get((load_id, trial.id), {})),
                "conversations": conversation,
                "episode": f"episode-{episode.episode_index}",
                "trace_source": episode.trace_source,
            }
            extra = own_extra if own_extra is not None else episode.extra
            if from_hub:
                values = _hub_row(values, extra)
            else:
                if trial.id not in steps:
                    steps[trial.id] = harbor_rows.step_texts(trial.detail)
                values = harbor_rows.row(values, extra, steps[trial.id], self.columns)
            yield values, size + len(values.get("verifier_output") or "")

    @staticmethod
    def _trial_values(trial, texts: dict[int, str], overlay: dict[str, Any]) -> dict[str, Any]:
        values = dict(
            agent=trial.agent, model=trial.model, model_provider=trial.model_provider, date=trial.date_raw,
            task=trial.task_name, run_id=trial.source_run_id, trial_name=trial.trial_name, result=trial.result,
            verifier_output=exact_column(trial.detail, "verifier_output", trial.verifier_output),
            instruction=texts.get(trial.instruction_id),
        )
        values.update(overlay)
        if "instruction" in overlay:
            values["instruction"] = texts.get(overlay["instruction"])
        return values

    def _conflicts(self, load_ids: set[int], trial_ids: set[int]) -> tuple[dict, set[int]]:
        """{(load_id, trial_id): {column: value}}: what a unit said about a trial that differs
        from the value the trial keeps (ingest.write.writer: the richer source's, else the smaller)."""
        overlay: dict[tuple[int, int], dict[str, Any]] = {}
        stmt = select(CONFLICTS.c.load_id, CONFLICTS.c.entity_id, CONFLICTS.c.field, CONFLICTS.c.incoming).where(
            CONFLICTS.c.entity == "trial", CONFLICTS.c.load_id.in_(load_ids)).order_by(CONFLICTS.c.id)
        for load_id, trial_id, name, incoming in self._select_in(stmt, CONFLICTS.c.entity_id, trial_ids):
            if name in FIELD_COLUMNS and incoming:
                overlay.setdefault((load_id, trial_id), {}).setdefault(FIELD_COLUMNS[name], incoming.get(name))
        messages = {v.get("instruction") for v in overlay.values()} - {None}
        return overlay, messages

    def _conflicting_conversations(self, chunk: Sequence[tuple]) -> dict[tuple[int, int], list]:
        """{(load_id, row_number): [[role, message_id, extra], ...]}: the rows of the chunk whose
        conversation differed from the stored episode's, as their conflicts keep them."""
        rows = {(r[0], r[1]) for r in chunk}
        stmt = select(CONFLICTS.c.load_id, CONFLICTS.c.row_number, CONFLICTS.c.incoming).where(
            CONFLICTS.c.entity == "episode", CONFLICTS.c.field == "conversation",
            CONFLICTS.c.load_id.in_({load_id for load_id, _ in rows}))
        return {(load_id, row_number): incoming["turns"]
                for load_id, row_number, incoming in self._select_in(stmt, CONFLICTS.c.entity_id, {r[2] for r in chunk})
                if (load_id, row_number) in rows and "turns" in incoming}

    def _texts(self, ids: Iterable[int | None]) -> dict[int, str]:
        """Exact message texts by id."""
        texts = {}
        stmt = select(MESSAGES.c.id, MESSAGES.c.content, MESSAGES.c.content_raw)
        for message_id, content, raw in self._select_in(stmt, MESSAGES.c.id, {i for i in ids if i is not None}):
            texts[message_id] = content if raw is None else self._arrow_text(from_bytes(bytes(raw)))
        return texts

    def _arrow_text(self, text: str) -> str:
        if _SURROGATE.search(text) is None:
            return text
        self.n_surrogate_texts += 1
        return _SURROGATE.sub("\ufffd", text)

    def _by_id(self, table, ids: Iterable[int]) -> dict[int, Any]:
        return {row.id: row for row in self._select_in(select(table), table.c.id, ids)}

    def _select_in(self, stmt, column, ids: Iterable[int]) -> Iterator[Any]:
        ids = sorted(ids)
        for start in range(0, len(ids), IN_CHUNK):
            yield from self.conn.execute(stmt.where(column.in_(ids[start:start + IN_CHUNK])))


def unit_rows(conn: Connection, load_id: int, trial_id: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """A Hub unit's rows of one trial, as they were in its shard: (row number, the row as a
    one-row batch of the shard's own schema), in row order. What `sources delete` reads to
    place a trial's rows again without another source's."""
    schema_text = conn.execute(select(LOADS.c.arrow_schema).where(LOADS.c.id == load_id)).scalar_one()
    schema = schema_from_json(schema_text)
    chunk = conn.execute(
        select(EPISODE_LOADS.c.load_id, EPISODE_LOADS.c.row_number, EPISODE_LOADS.c.episode_id, True,
               EPISODE_LOADS.c.extra, EPISODES.c.trace_source)
        .join(EPISODES, EPISODES.c.id == EPISODE_LOADS.c.episode_id)
        .where(EPISODE_LOADS.c.load_id == load_id, EPISODES.c.trial_id == trial_id)
        .order_by(EPISODE_LOADS.c.row_number)).all()
    for row, (values, _) in zip(chunk, _RowBuilder(conn)._chunk(chunk)):
        yield row[1], pa.RecordBatch.from_arrays([from_json([values.get(f.name)], f.type, f.name) for f in schema],
                                                 schema=schema)


def _message(role: str, message_id: int | None, extra: dict | None, texts: dict[int, str]) -> dict[str, Any]:
    """One conversation struct: role, content (null when the source had null) and any other
    fields the source's struct had (kept in turns.extra)."""
    return {**(extra or {}), "role": role, "content": texts[message_id] if message_id is not None else None}


def _hub_row(values: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """A row from a Hub shard: its other columns are in episodes.extra, with the raw `episode`
    string when it was not exactly episode-N (e.g. zero-padded) and the raw `trace_source` when
    it was null or empty (stored under the key "main"), and the trial columns in which the row
    differed from its trial's first row in its shard (ingest.read.hub.ROW_VALUE_COLUMNS)."""
    return {**values, **(extra or {})}


# --- writing -------------------------------------------------------------------------------


class _ShardWriter:
    """Streams rows into one Parquet file, a row group at a time."""

    def __init__(self, path: Path, schema: pa.Schema, output: _Output):
        self.path = path
        self.schema = schema
        self.output = output
        self.n_rows = 0
        self.text_bytes = 0
        self._writer = pq.ParquetWriter(path, schema, compression=COMPRESSION)
        self._reset()

    def _reset(self) -> None:
        self._columns: dict[str, list] = {name: [] for name in self.schema.names}
        self._buffered_rows = 0
        self._buffered_bytes = 0

    def add(self, values: dict[str, Any], text_bytes: int) -> None:
        for name, column in self._columns.items():
            column.append(values.get(name))
        self._buffered_rows += 1
        self._buffered_bytes += text_bytes
        self.text_bytes += text_bytes
        self.n_rows += 1
        if self._buffered_rows >= ROW_GROUP_ROWS or self._buffered_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buffered_rows:
            return
        arrays = [from_json(self._columns[f.name], f.type, f.name) for f in self.schema]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._reset()

    def close(self) -> "_ShardWriter":
        self._flush()
        self._writer.close()
        return self


def _write_output(builder: _RowBuilder, output: _Output, paths: Iterator[Path]) -> list[_ShardWriter]:
    """The output's rows in one file, or (rolled outputs) in files of about SHARD_BYTES, at
    the temporary `paths`."""
    shards: list[_ShardWriter] = []

    def open_shard() -> _ShardWriter:
        shards.append(_ShardWriter(next(paths), output.schema, output))
        return shards[-1]

    shard = open_shard()
    for values, size in builder.rows(output):
        if output.file_name is None and shard.text_bytes >= SHARD_BYTES:
            shard.close()
            shard = open_shard()
        shard.add(values, size)
    shard.close()
    return shards


def _drop_empty(shards: list[_ShardWriter]) -> list[_ShardWriter]:
    """Empty files only where they reproduce an empty input shard (or where the dataset would
    otherwise have no file at all)."""
    kept = [s for s in shards if s.n_rows or s.output.keep_empty] or shards[:1]
    for shard in shards:
        if shard not in kept:
            shard.path.unlink()
    return kept


def _file_names(shards: list[_ShardWriter]) -> list[str]:
    """Each input shard's own file name, when every file has one and they are distinct (one
    source); else train-0000i-of-0000N.parquet in order."""
    names = [s.output.file_name for s in shards]
    if all(names) and len(set(names)) == len(names):
        return names
    return [f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))]


# Loads listed one per line on the card; past this, a source's loads are only counted.
CARD_LOADS = 100


def _write_card(path: Path, conn: Connection, sel: _Selection, info: ExportInfo, builder: _RowBuilder,
                command: Sequence[str] | None, paths: CardPaths) -> None:
    """README.md: the Hub's YAML front matter (configs, `dataset_info` features and row count)
    and what the rows are and where they came from. Dated by the warehouse's last load rather
    than the clock, so two exports of the same warehouse are the same bytes."""
    from huggingface_hub import DatasetCardData  # a dependency already; its YAML is the Hub's own

    dataset_info: dict[str, Any] = {"splits": [{"name": "train", "num_examples": info.n_rows}]}
    if info.schema is not None:
        dataset_info = {"features": [_feature(f.name, f.type) for f in info.schema], **dataset_info}
    front = DatasetCardData(
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": "data/*.parquet"}]}],
        dataset_info=dataset_info, tags=["agent-trajectories", "harbor"]).to_yaml()
    what = []
    if command:
        what.append(f"command: `{shlex.join(paths.command(command))}`")
    if sel.source_labels:
        what.append("sources: " + ", ".join(f"`{paths.path(s)}`" for s in sel.source_labels))
    what += _describe_filters(sel.filters)
    if sel.pick:
        what += sel.pick.describe()
    revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    as_of = conn.execute(select(func.max(LOADS.c.finished_at))).scalar()
    lines = [
        "---", front.rstrip("\n"), "---", "",
        "# Agent trajectories exported from a trajectory warehouse", "",
        f"Written by `warehouse export hub` (warehouse {__version__}): one row per episode, in the columns of "
        "`harbor traces export`.", "",
        *[f"- {line}" for line in what],
        f"- rows: {info.n_rows}",
        f"- files: {len(info.files)}", "",
        "## Provenance", "",
        f"The warehouse as of its last load, {_when(as_of)}, at schema revision {revision}.", "",
        *_provenance(conn, builder, paths),
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def _describe_filters(filters: Filters) -> list[str]:
    """The filters as given, one line each ("runs: all" when they name none)."""
    lines = ["runs: " + (", ".join(f"`{r}`" for r in filters.runs) if filters.runs else "all")]
    for name, values in (("labels", [f"{k}={v}" for k, v in filters.labels]), ("tasks", filters.tasks),
                         ("models", filters.models), ("agents", filters.agents)):
        if values:
            lines.append(f"{name}: " + ", ".join(f"`{v}`" for v in values))
    if filters.times:
        lines.append(f"trials started: {filters.window_text()}")
    return lines


def _provenance(conn: Connection, builder: _RowBuilder, paths: CardPaths) -> list[str]:
    """Markdown tables of the runs, sources and loads the rows came from, with their row counts."""
    lines = ["| run_key | name | labels | rows |", "|---|---|---|---|"]
    runs = builder._select_in(select(RUNS.c.id, RUNS.c.run_key, RUNS.c.name), RUNS.c.id, builder.rows_by_run)
    labels = labels_of(conn, builder.rows_by_run)
    for run_id, key, name in sorted(runs, key=lambda r: r.run_key):
        shown = " ".join(f"{k}={v}" for k, v in labels.get(run_id, {}).items())
        lines.append(f"| {_cell(key)} | {_cell(name)} | {_cell(shown)} | {builder.rows_by_run[run_id]} |")
    stmt = (select(LOADS.c.id, LOADS.c.unit, LOADS.c.content_hash, SOURCES.c.id.label("source_id"), SOURCES.c.kind,
                   SOURCES.c.name, SOURCES.c.uri, SOURCES.c.revision)
            .join_from(LOADS, SOURCES, SOURCES.c.id == LOADS.c.source_id))
    loads = sorted(builder._select_in(stmt, LOADS.c.id, builder.rows_by_load), key=lambda r: r.id)
    sources: dict[int, list] = {}
    for load in loads:
        sources.setdefault(load.source_id, []).append(load)
    lines += ["", "| source | kind | uri | loads | rows |", "|---|---|---|---|---|"]
    for group in sorted(sources.values(), key=lambda g: g[0].source_id):
        first = group[0]
        rows = sum(builder.rows_by_load[load.id] for load in group)
        shown = paths.source(conn, first.source_id, first.kind, first.uri, first.name, first.revision)
        lines.append(f"| {_cell(first.name)} | {first.kind} | {_cell(shown)} | {len(group)} | {rows} |")
    if len(loads) <= CARD_LOADS:
        lines += ["", "| load | source | unit | content hash | rows |", "|---|---|---|---|---|"]
        lines += [f"| {load.id} | {_cell(load.name)} | {_cell(load.unit)} | {_cell(load.content_hash)} | "
                  f"{builder.rows_by_load[load.id]} |" for load in loads]
    else:
        lines += ["", f"({len(loads)} loads, more than the {CARD_LOADS} listed here one by one: `export tables` "
                      f"holds every one in loads.parquet.)"]
    return [*lines, ""]


def _cell(value: Any) -> str:
    """A value as one Markdown table cell."""
    return "" if value is None else str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _when(value: Any) -> str:
    if value is None:
        return "never (it is empty)"
    if isinstance(value, str):  # a raw SQLite text, should a driver hand one back
        value = datetime.fromisoformat(value)
    value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return f"{value.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def _feature(name: str, type: pa.DataType) -> dict[str, Any]:
    """A column as the `dataset_info` features of a Hub card describe it (`datasets`' YAML)."""
    return {"name": name, **_feature_type(type)}


_DTYPES = {"double": "float64", "float": "float32", "halffloat": "float16"}


def _feature_type(type: pa.DataType) -> dict[str, Any]:
    if pa.types.is_struct(type):
        return {"struct": [_feature(f.name, f.type) for f in type]}
    if _is_list(type):
        value = type.value_type
        if pa.types.is_struct(value):
            return {"list": [_feature(f.name, f.type) for f in value]}
        inner = _feature_type(value)
        return {"sequence": inner["dtype"] if set(inner) == {"dtype"} else inner}
    if pa.types.is_dictionary(type):
        return _feature_type(type.value_type)
    return {"dtype": _DTYPES.get(str(type), str(type))}


def _is_list(type: pa.DataType) -> bool:
    return (pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_fixed_size_list(type)
            or pa.types.is_list_view(type) or pa.types.is_large_list_view(type))

