"""The Python API: what the CLI does, for a program or a notebook.

    import warehouse

    with warehouse.open("warehouse.db") as wh:          # a path or a URL, as --db takes
        wh.ingest(["examples/sample"])
        rates = wh.query("pass-rate", by="model")         # a canned query, its options by name
        rates.to_pandas()
        wh.sql("SELECT count(*) AS n FROM trials WHERE reward >= :r", r=1.0).rows

Reads go through the read-only path every read command takes (warehouse.readonly: a connection
that cannot write, the schema checked first) and leave the database as they found them; only
`ingest` writes. Opening connects to nothing: a missing SQLite file is not created by a read
(which raises the no-warehouse error), and `ingest` creates it. Errors a user can act on are
WarehouseErrors with one-line messages, as the CLI prints them; an argument of the wrong type
or value is one too, a UsageError (warehouse.arguments), which is also a TypeError or a
ValueError.

Heavy modules (the ingest pipeline, pyarrow, pandas, the schema's tables) are imported by the
methods that need them: `import warehouse` stays cheap for the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from warehouse import arguments as check
from warehouse.db.engine import first_load, make_engine, make_read_engine, redact, refuse_missing, resolve_url
from warehouse.errors import ArgumentValueError, WarehouseError, database_error, first_line, interruption
from warehouse.readonly import DEFAULT_MAX_ROW_BYTES, DEFAULT_MAX_ROWS, DEFAULT_MAX_VALUE_BYTES, DEFAULT_TIMEOUT

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from ingest.report import Progress, Summary
    from warehouse.filters import Filters
    from warehouse.lake import Lake
    from warehouse.lake.sync import SyncInfo
    from warehouse.readonly import RowStream

__all__ = ["IngestError", "Result", "Warehouse", "open", "open_lake"]


def open(db: str | os.PathLike[str] | None = None) -> Warehouse:  # noqa: A001 (warehouse.open, as sqlite3.connect)
    """The warehouse at `db`: a SQLAlchemy URL or a SQLite file path, else $WAREHOUSE_DB, else
    ./warehouse.db (the rules of --db). Nothing is opened yet: a URL that is refused raises now,
    a database that is missing or unreachable when first used."""
    return Warehouse(db)


@dataclass
class Result:
    """The rows of one answer, in memory. `truncated`: more rows existed than the cap let through
    (`sql`'s max_rows, `search`'s limit). `note`: something the answer should be read with (a
    search index that did not cover every message)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    note: str | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)

    def __repr__(self) -> str:
        more = ", truncated" if self.truncated else ""
        return f"Result(columns={self.columns!r}, {len(self.rows)} rows{more})"

    def to_dicts(self) -> list[dict[str, Any]]:
        """One dict per row, by column name (a repeated name keeps its last column)."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def to_arrow(self) -> pyarrow.Table:
        """A pyarrow Table, each column's type inferred from its values (an int column with NULLs
        stays int64; timestamps keep their zone). A SQLite column mixing types (SQLite allows it)
        is refused: CAST it in the SQL."""
        import pyarrow as pa

        arrays = []
        for i, name in enumerate(self.columns):
            try:
                arrays.append(pa.array([row[i] for row in self.rows]))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise WarehouseError(f"column {name}: its values do not make one Arrow column "
                                     f"({first_line(exc)}); CAST it in the SQL") from None
        return pa.Table.from_arrays(arrays, names=list(self.columns))

    def to_pandas(self) -> pandas.DataFrame:
        """A pandas DataFrame of the rows, values as they are (pandas is optional: `pip install
        pandas`)."""
        try:
            import pandas as pd
        except ImportError:
            raise WarehouseError("to_pandas needs pandas, which is not installed: pip install pandas") from None
        return pd.DataFrame.from_records(self.rows, columns=self.columns)


class IngestError(WarehouseError):
    """Units failed to load (without keep_going); `report` is the ingest's whole report, the
    units that did load included (they are kept)."""

    def __init__(self, report: Summary) -> None:
        first = report.errors[0] if report.errors else "a unit failed"
        more = f" (and {len(report.errors) - 1} more: see .report.errors)" if len(report.errors) > 1 else ""
        super().__init__(f"{first}{more}")
        self.report = report


@dataclass(eq=False)  # one object per opened database: compared by identity
class Warehouse:
    """One warehouse database; see the module docstring. Use it as a context manager, or call
    close(), to let go of its connections."""

    db: str | os.PathLike[str] | None = None
    _read_engine: Engine | None = field(default=None, init=False, repr=False)
    _write_engine: Engine | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.url = resolve_url(check.optional_path(self.db, "db"))

    def __repr__(self) -> str:
        return f"Warehouse({redact(self.url)!r})"

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close this object's connections (it can still be used: they open again when needed)."""
        from warehouse.readonly import release

        release(self.url)
        for engine in (self._read_engine, self._write_engine):
            if engine is not None:
                engine.dispose()
        self._read_engine = self._write_engine = None

    # --- engines ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The database as it may be shown: a file's path, a URL without its password."""
        return redact(self.url)

    @property
    def engine(self) -> Engine:
        """The writing engine, schema unchecked (what `db upgrade|downgrade` work on). A SQLite
        file is created when it first connects."""
        if self._write_engine is None:
            self._write_engine = make_engine(self.url)
        return self._write_engine

    def write_engine(self, *, create: bool = False) -> Engine:
        """The writing engine, once the schema is the one this tool knows (`create`: an empty or
        missing database is given it)."""
        from warehouse.db import schema

        with _errors():
            if not create:
                refuse_missing(self.url)
            schema.ensure_current(self.engine, create=create)
        return self.engine

    def read_engine(self, *, check_schema: bool = True) -> Engine:
        """The engine that cannot write (warehouse.db.engine.make_read_engine), once the schema is
        checked unless told not to. A missing SQLite file raises the no-warehouse error."""
        from warehouse.db import schema

        with _errors():
            if self._read_engine is None:
                self._read_engine = make_read_engine(self.url)
            if check_schema:
                schema.ensure_current(self._read_engine)
        return self._read_engine

    def _ready_for_reads(self) -> None:
        """The schema checked before a read that goes through warehouse.readonly (query, sql,
        search). On PostgreSQL that check reads on readonly's pooled connection, so a command
        opens one connection, not two (each a server process, about 8 ms, and the driver's first
        look at the server); only a revision other than head goes on to read_engine's check,
        for its one-line refusal."""
        from warehouse.db import schema

        if self.url.get_backend_name() != "sqlite":
            from warehouse.readonly import schema_revision

            if schema_revision(self.url) == schema.head_revision():
                return
        self.read_engine()

    # --- writing ---------------------------------------------------------------------------------

    def ingest(self, sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], /, *,
               run: str | None = None, label: str | Iterable[str] | Mapping[str, str] | None = None,
               keep_going: bool = False, progress: Progress | None = None,
               warn: Callable[[str], None] | None = None) -> Summary:
        """Load sources (what `warehouse ingest` takes: Parquet files, Hub-snapshot folders, Hub
        ids, Harbor trace directories), idempotently, creating the warehouse if it is missing.

        Returns the report (ingest.report.Summary: units loaded/skipped/failed, episodes new and
        duplicate, conflicts, rows rejected, errors, notes). A unit that fails is written not at
        all and the others still load; then IngestError (its `.report`) is raised, unless
        `keep_going`, which also rejects bad rows and loads the rest of their unit. `warn` hears
        each failure as it happens; `progress` is an ingest.report.Progress.

        `run` names every run the sources' rows belong to (and is the run of rows that carry
        none); `label` gives them labels: "key=value", several, or a dict."""
        specs = check.paths(sources, "sources")
        check.optional_text(run, "run")
        check.labels(label)
        check.flag(keep_going, "keep_going")
        check.optional_callable(warn, "warn")
        with _errors(), _reading_ahead(specs, run) as (reader, ahead), first_load(self.engine):
            # Imported while the reader reads: the writer's modules and the schema are its lead.
            from ingest.pipeline import ingest
            from ingest.report import Progress

            check.implements(progress, Progress, "progress")
            engine, labels = self._ingest_target(run, label)
            report = ingest(engine, specs, run=run, labels=labels, keep_going=keep_going, progress=progress,
                            warn=warn or (lambda _msg: None), reader=reader, ahead=ahead)
        report.database = self.name
        if report.errors and not keep_going:
            raise IngestError(report)
        return report

    def watch(self, sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], /, *,
              run: str | None = None, label: str | Iterable[str] | Mapping[str, str] | None = None,
              keep_going: bool = False, running: bool = False, poll: float | None = None,
              settle: float | None = None, on_event: Callable[[Any], None] | None = None,
              stop: Any = None) -> Any:
        """Follow local sources (what `warehouse ingest --watch` does) until `stop` (a
        threading.Event) is set, or Ctrl-C: each trial loaded when it finishes (with `running`,
        running trials as incomplete snapshots too), each shard once whole; as `ingest` loads them.
        `poll`: seconds between looks, instead of the file system's notices (network file
        systems); `settle`: seconds a unit's files must be unchanged before it is read.
        `on_event` hears an ingest.watch.Event per unit loaded, failed or skipped. Returns the
        totals (ingest.watch.Totals)."""
        import threading

        from ingest.read import limits
        from ingest.watch import SETTLE_SECONDS, Watch, sources_of

        specs = check.paths(sources, "sources")
        check.optional_text(run, "run")
        check.labels(label)
        check.flag(keep_going, "keep_going")
        check.flag(running, "running")
        poll, settle = check.optional_seconds(poll, "poll"), check.optional_seconds(settle, "settle")
        check.optional_callable(on_event, "on_event")
        with _errors():
            limits.check()
            specs = sources_of(specs)  # (before the warehouse is made: a mistyped folder makes none)
            engine, labels = self._ingest_target(run, label)
            watcher = Watch(engine, specs, run=run, labels=labels, keep_going=keep_going, running=running,
                            poll=poll, settle=SETTLE_SECONDS if settle is None else settle,
                            on_event=on_event or (lambda _event: None))
            return watcher.run(stop if stop is not None else threading.Event())

    def _ingest_target(self, run: str | None, label: Any) -> tuple[Engine, dict[str, str]]:
        """What an ingest or a watch writes through, its arguments checked: the write engine
        (the warehouse made if missing) and the labels as a dict. `run`, a name that would
        shadow another run, is refused here, before anything is written."""
        from warehouse.runs import label_pairs

        _system_arrow_pool()
        labels = dict(label_pairs(label))  # a key given twice keeps its last value
        engine = self.write_engine(create=True)
        if run is not None:
            from warehouse.runs import check_name

            with engine.connect() as conn:
                check_name(conn, str(run))
        return engine, labels

    # --- reading ---------------------------------------------------------------------------------

    def query(self, name: str, /, *, run: str | Iterable[str] | None = None,
              task: str | Iterable[str] | None = None, model: str | Iterable[str] | None = None,
              agent: str | Iterable[str] | None = None,
              label: str | Iterable[str] | Mapping[str, str] | None = None,
              since: str | date | None = None, until: str | date | None = None,
              timeout: float = DEFAULT_TIMEOUT, **params: Any) -> Result:
        """A canned query (`warehouse query list`), its parameters by their Python names
        (`per_task=True`, `k=[1, 5]`, `threshold=0.5`). The filters narrow it: `run` (run keys, unique
        prefixes or names), `task` (globs), `model`, `agent`, each one value or several; `label`
        "key=value", several, or a dict; `since` and `until` a window on the trials' start (a date,
        a datetime, or text as `--since` takes it)."""
        filters = _filters(run=run, task=task, model=model, agent=agent, label=label, since=since, until=until)
        return _canned(self.url, name, filters, timeout, params, ready=self._ready_for_reads)

    def sql(self, text: str, params: Mapping[str, Any] | None = None, /, *,
            timeout: float = DEFAULT_TIMEOUT, max_rows: int | None = DEFAULT_MAX_ROWS,
            max_value_bytes: int | None = DEFAULT_MAX_VALUE_BYTES, max_row_bytes: int | None = DEFAULT_MAX_ROW_BYTES,
            **binds: Any) -> Result:
        """One read-only statement (what `warehouse sql` runs), its `:name` parameters bound from
        `binds` (or `params`, for a name such as `timeout`), as Python values. At most `max_rows`
        rows, `truncated` saying whether there were more; a value over `max_value_bytes` or a row
        over `max_row_bytes` is refused (WarehouseError); `timeout` seconds for the whole call.
        None lifts a cap (max_rows, max_value_bytes, max_row_bytes)."""
        with self.sql_stream(text, params, timeout=timeout, max_rows=max_rows, max_value_bytes=max_value_bytes,
                             max_row_bytes=max_row_bytes, **binds) as rows:
            return Result(rows.columns, list(rows), rows.truncated)

    @contextmanager
    def sql_stream(self, text: str, params: Mapping[str, Any] | None = None, /, *,
                   timeout: float = DEFAULT_TIMEOUT, max_rows: int | None = DEFAULT_MAX_ROWS,
                   max_value_bytes: int | None = DEFAULT_MAX_VALUE_BYTES,
                   max_row_bytes: int | None = DEFAULT_MAX_ROW_BYTES, **binds: Any) -> Iterator[RowStream]:
        """`sql`, its rows handed out as they arrive: iterate the stream (`.columns`, then
        `.truncated` once done) inside the `with`, where the time limit covers the consuming too.
        The same caps as `sql`."""
        from warehouse.readonly import stream_readonly

        check.text(text, "the SQL")
        params = check.mapping(params, "params")
        check.optional_integer(max_rows, "max_rows", 0)
        check.optional_integer(max_value_bytes, "max_value_bytes", 1)
        self._ready_for_reads()
        with _errors(), stream_readonly(self.url, text, {**(params or {}), **binds}, timeout=timeout,
                                        max_rows=max_rows, max_value_bytes=max_value_bytes,
                                        max_row_bytes=max_row_bytes) as rows:
            yield rows

    def search(self, text: str, /, *, run: str | Iterable[str] | None = None,
               task: str | Iterable[str] | None = None, model: str | Iterable[str] | None = None,
               agent: str | Iterable[str] | None = None,
               label: str | Iterable[str] | Mapping[str, str] | None = None,
               since: str | date | None = None, until: str | date | None = None,
               role: str | None = None, limit: int = 50, by: str = "turn", regex: bool = False,
               timeout: float = DEFAULT_TIMEOUT) -> Result:
        """Turns, verifier output and exception messages holding `text` (what `warehouse search`
        finds), one row per turn with a snippet, or with `by="trial"` one per trial with its hits
        counted; at most `limit` (`truncated`: there were more). `regex`: `text` is a regular
        expression (`search --regex`). The filters as `query`'s."""
        from warehouse.search import search

        check.text(text, "the search text")
        filters = _filters(run=run, task=task, model=model, agent=agent, label=label, since=since, until=until)
        for value, what in ((role, "role"), (by, "by")):
            check.optional_text(value, what)
        check.integer(limit, "limit", 1)
        check.flag(regex, "regex")
        self._ready_for_reads()
        with _errors():
            found = search(self.url, text, filters=filters, role=role, limit=limit, by=by, regex=regex,
                           timeout=timeout)
        return Result(found.columns, found.rows, found.truncated, found.note)

    def show(self, trial: str | int, /, *, episode: int | None = None, all_episodes: bool = False,
             trace: str | None = None, turns: str | None = None) -> dict[str, Any]:
        """One trajectory as `warehouse show --format json` gives it (a trial name or a unique start
        of one, RUN/TRIAL, or a trial id): the trial's fields and its chosen episodes with their
        turns, texts exact. `trace` picks a trace source, `turns` "A:B" a slice of the turns."""
        from warehouse.show import load_trajectory

        trial = check.trial(trial)
        check.optional_integer(episode, "episode", 0)
        check.flag(all_episodes, "all_episodes")
        check.optional_text(trace, "trace")
        check.optional_text(turns, "turns")
        if all_episodes and (episode is not None or trace is not None):
            raise WarehouseError("give episode or trace, or all_episodes, not both")
        engine = self.read_engine()
        with _errors():
            return load_trajectory(engine, trial, episode=episode, all_episodes=all_episodes, trace=trace, turns=turns)

    def lake_sync(self, out: str | os.PathLike[str], /, *, full: bool = False, iceberg: str | None = None,
                  iceberg_namespace: str | None = None) -> SyncInfo:
        """Bring the lake at `out` (a folder or a file:// URL) up to date, as `warehouse lake
        sync` does: only the runs new or changed since its last sync are written, then its
        manifest, atomically (warehouse.lake.sync). Returns what it did (its `line()` is the
        CLI's summary). `full`: write everything anew. `iceberg`: an Iceberg SQL catalog (a
        SQLite file or a database URL) to publish the lake's tables to, in `iceberg_namespace`
        ("warehouse" unless given; warehouse.lake.iceberg)."""
        from warehouse.lake.sync import Catalog, sync_lake

        out = check.path(out, "out")
        check.flag(full, "full")
        catalog = Catalog.named(check.optional_text(iceberg, "iceberg"),
                                check.optional_text(iceberg_namespace, "iceberg_namespace"))
        engine = self.read_engine()
        with _errors():
            return sync_lake(engine, out, full=full, iceberg=catalog)


def _system_arrow_pool() -> None:
    """Arrow's default allocator (mimalloc) keeps freed pages; streaming shard after shard, the
    system allocator returns them, which keeps the process's memory flat. Arrow reads this when
    it first allocates, in this process or a reader forked from it (it is imported only once a
    shard needs reading)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


@contextmanager
def _reading_ahead(specs: list[str], run: str | None) -> Iterator[tuple[Any, Any]]:
    """The ingest's reader process, and the shard it was started on: the first of the first
    source when that is a local Parquet or JSON rows dataset (ingest.read.shard_job). Forked
    before the writer imports the rest of itself and makes the schema, it has the first batches
    ready when the writer is; a shard the ledger has already is dropped unread (the next job
    stops the process, or the end does)."""
    from ingest.process.worker import Reader
    from ingest.read import limits
    from ingest.read.shard_job import Started, prepared_batches
    from ingest.read.sources import resolve

    _system_arrow_pool()
    with Reader() as reader:
        ahead = None
        try:
            limits.check()
            source = resolve(specs[0]) if specs and os.path.exists(specs[0]) else None
        except WarehouseError:  # reported by the ingest, when its turn comes
            source = None
        if source is not None and source.kind != "traces" and source.shards:
            shard = source.shards[0]
            ahead = Started(shard, reader.run(prepared_batches, shard, source.name, run))
        yield reader, ahead


def open_lake(path: str | os.PathLike[str], engine: str = "duckdb") -> Lake:
    """The lake at `path` (a folder `warehouse export tables` or `lake sync` wrote), read by
    `engine`: "duckdb" (in this process) or "spark" (local mode; pyspark and Java 17). Nothing
    is read yet: a missing folder raises when first queried."""
    from warehouse.lake import Lake

    return Lake(check.path(path, "the lake's folder"), check.text(engine, "engine"))


def _canned(target: Any, name: str, filters: Filters | None, timeout: float, params: Mapping[str, Any], *,
            ready: Callable[[], None] | None = None) -> Result:
    """A canned query's answer from a database (its URL) or a lake (warehouse.lake.Lake): what
    Warehouse.query and Lake.query share. `ready` checks the target before it is read."""
    from warehouse.queries import QUERIES, run_canned

    check.text(name, "the query's name")
    canned = QUERIES.get(name) or QUERIES.get(name.replace("_", "-"))
    if canned is None:
        raise WarehouseError(f"no canned query {name!r}: the queries are {', '.join(QUERIES)}")
    canned.values(params)  # a parameter it has not, a value it refuses: before connecting
    if ready is not None:
        ready()
    with _errors():
        result = run_canned(target, canned, params, timeout=timeout, filters=filters)
    return Result(result.columns, result.rows, note=result.note)


def _filters(*, run: Any, task: Any, model: Any, agent: Any, label: Any, since: Any, until: Any) -> Filters | None:
    """The filter keywords of `query` and `search`, checked, as warehouse.filters.Filters; None
    when none is given."""
    given = {"run": check.texts(run, "run"), "task": check.texts(task, "task"), "model": check.texts(model, "model"),
             "agent": check.texts(agent, "agent"), "label": check.labels(label),
             "since": check.when(since, "since"), "until": check.when(until, "until")}
    if all(value is None for value in given.values()):
        return None
    from warehouse.filters import Filters

    return Filters.of(**given)


@contextmanager
def _errors() -> Iterator[None]:
    """Database errors a user can act on (a server that does not answer, a file that is not a
    database) as one-line WarehouseErrors, as the CLI reports them; a Ctrl-C behind one stays
    a Ctrl-C."""
    try:
        yield
    except DBAPIError as exc:
        if (stop := interruption(exc)) is not None:
            raise stop from None
        raise database_error(exc) from None
    except OverflowError as exc:  # a bound int the driver cannot send (SQLite's are 64-bit)
        raise ArgumentValueError(f"a parameter does not fit the database's integers: {first_line(exc)}") from None
