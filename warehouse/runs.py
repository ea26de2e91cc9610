"""Runs as people name them, and their labels.

A run is asked for by its `run_key` (a Harbor job UUID, or the name an RL source was ingested
under), by a unique prefix of that key (`5de746de`, as `git` and `gh` take a commit), or by its
`name` (the job folder, the dataset). The one rule, used wherever a run is asked for:

1. a key that matches exactly;
2. else a key that starts with the spec, if one run's does;
3. else a name that matches exactly, if one run has it.

Anything else is one line: no such run, or the candidates an ambiguous spec could mean. So that
a name never silently means another run, no run may be named what another run's key starts
with (check_name: `runs rename`, `ingest --run`).

Labels are `key=value` text on a run (table `run_labels`, one value per key per run).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, text

from warehouse.numbers import without_noise
from warehouse.errors import WarehouseError

if TYPE_CHECKING:
    from warehouse.filters import Filters  # which imports this module

# How many candidates an ambiguous spec lists before "…".
_CANDIDATES_SHOWN = 5


@dataclass(frozen=True)
class RunRef:
    id: int
    run_key: str
    name: str | None

    def __str__(self) -> str:
        return self.run_key if not self.name or self.name == self.run_key else f"{self.run_key} ({self.name})"


# A key that starts with :s (substr, not LIKE: case-sensitive on both backends, no wildcards).
_KEY_STARTS_WITH = "substr(run_key, 1, length(:s)) = :s"


def _refs(conn: Connection, where: str, binds: Mapping[str, object]) -> list[RunRef]:
    rows = conn.execute(text(f"SELECT id, run_key, name FROM runs WHERE {where} ORDER BY run_key"), binds)
    return [RunRef(*row) for row in rows]


def resolve_run(conn: Connection, spec: str) -> RunRef:
    """The one run `spec` names (module docstring), or a WarehouseError in one line."""
    spec = str(spec)
    if not spec:
        raise WarehouseError("an empty run name matches no run")
    exact = _refs(conn, "run_key = :s", {"s": spec})
    if exact:
        return exact[0]
    prefixed = _refs(conn, _KEY_STARTS_WITH, {"s": spec})
    if len(prefixed) == 1:
        return prefixed[0]
    named = _refs(conn, "name = :s", {"s": spec})
    if len(named) == 1:
        return named[0]
    found = list(dict.fromkeys(prefixed + named))
    if found:
        shown = ", ".join(str(ref) for ref in found[:_CANDIDATES_SHOWN])
        more = f", … ({len(found)} in all)" if len(found) > _CANDIDATES_SHOWN else ""
        raise WarehouseError(f"run {spec!r} is ambiguous: it could be {shown}{more}")
    raise WarehouseError(f"no run {spec!r} (`warehouse runs` lists them)")


def resolve_runs(conn: Connection, specs: Iterable[str]) -> list[RunRef]:
    """Each spec's run, in the order given, without repeats."""
    return list(dict.fromkeys(resolve_run(conn, spec) for spec in specs))


# --- names -------------------------------------------------------------------------------------

# The columns that hold run keys, and the column a table shows each one's run names in.
RUN_NAME_COLUMNS = {"run_key": "run_name"}


def with_run_names(columns: Sequence[str], rows: Iterable[Sequence[Any]], names: Callable[[], Mapping[str, str | None]],
                   named: Mapping[str, str] = RUN_NAME_COLUMNS) -> tuple[list[str], Iterable[Sequence[Any]]]:
    """A table that names runs by key (a `run_key` column, or the `named` ones) with their names
    beside them, for people: a `run_name` column after `run_key` (∅ for a run without a name).
    CSV and JSON keep their columns, for scripts (`query runs` maps keys to names). `names()`
    (run_names) is called only when there is a key column to name, and no name column already
    (`query runs` has one)."""
    columns = list(columns)
    pairs = [(key, name) for key, name in named.items() if key in columns and name not in columns]
    if not pairs or "name" in columns:
        return columns, rows
    name_of = names()
    at = {columns.index(key): name for key, name in pairs}
    out_columns = [c for i, column in enumerate(columns) for c in ((column, at[i]) if i in at else (column,))]

    def with_names(row: Sequence[Any]) -> tuple:
        return tuple(v for i, value in enumerate(row) for v in ((value, name_of.get(value)) if i in at else (value,)))

    return out_columns, map(with_names, rows)


def run_names(url: Any, timeout: float) -> dict[str, str | None]:
    """{run key: name} of every run (runs are few), read-only (with_run_names), from a database
    (its URL) or a lake (warehouse.lake.Lake)."""
    from warehouse.lake import Lake
    from warehouse.readonly import readonly_session

    if isinstance(url, Lake):
        from warehouse.lake.engines import lake_session

        opened = lake_session(url, timeout=timeout)
    else:
        opened = readonly_session(url, timeout=timeout, own_text=True)
    with opened as session:
        return dict(session.fetch("SELECT run_key, name FROM runs", {}, max_rows=None, last=True).rows)


def source_run_name(name: str, run_key: str, n_runs: int) -> str:
    """What a run of a source named `name` (a dataset, or `ingest --run NAME`) is called: the
    name itself when the source holds one run (or this run's key is the name), else the name
    and the key's first 8 characters (`sample-5de746de`), so a dataset of several jobs still
    names each one. Migration 0010 names runs loaded before it by the same rule."""
    return name if n_runs == 1 or run_key == name else f"{name}-{run_key[:8]}"


def dataset_names(conn: Connection, run_id: int, run_key: str) -> tuple[bool, list[str]]:
    """Whether a trace directory holds the run, and the names its datasets give it (as
    source_run_name makes them), best first: a dataset loaded in any order names a run the same
    (the first by source kind and URI), and a trace directory's job folder names it before any."""
    rows = conn.execute(text(
        "SELECT s.kind, s.uri, s.name, (SELECT count(*) FROM run_sources x WHERE x.source_id = s.id) "
        "FROM run_sources rs JOIN sources s ON s.id = rs.source_id WHERE rs.run_id = :r ORDER BY s.kind, s.uri"),
        {"r": run_id}).all()
    traced = any(kind == "traces" for kind, _, _, _ in rows)
    return traced, [source_run_name(name, run_key, n) for kind, _, name, n in rows if kind != "traces" and name]


def check_name(conn: Connection, name: str, run_id: int | None = None) -> None:
    """Refuse `name` for a run (run_id: that run; None: runs an ingest is about to name) when
    it would make another run unreachable by its name or shadow one: another run's name, a key
    another run's starts with (that key, or a prefix of it, which resolve_run tries first)."""
    if not name.strip():
        raise WarehouseError("a run name cannot be empty")
    others = {"s": name, "id": -1 if run_id is None else run_id}
    keyed = _refs(conn, f"{_KEY_STARTS_WITH} AND id <> :id", others)
    if run_id is None:  # an ingest's own run may be keyed by the name (rows that carry no run)
        keyed = [ref for ref in keyed if ref.run_key != name]
    if keyed:
        what = "the key of" if keyed[0].run_key == name else "a prefix of the key of"
        raise WarehouseError(f"the name {name!r} is {what} run {keyed[0]}: `--run {name}` would mean "
                             f"that run; choose another name")
    if run_id is not None:
        taken = _refs(conn, "name = :s AND id <> :id", others)
        if taken:
            raise WarehouseError(f"the name {name!r} is taken by run {taken[0]}")


def rename_run(conn: Connection, ref: RunRef, name: str) -> None:
    """`warehouse runs rename`: a name check_name allows."""
    check_name(conn, name, ref.id)
    conn.execute(text("UPDATE runs SET name = :n WHERE id = :id"), {"n": name, "id": ref.id})


# --- labels ------------------------------------------------------------------------------------

def parse_label(item: str) -> tuple[str, str]:
    """`key=value` as typed (`step=13`); the value may hold `=` and may be empty."""
    key, sep, value = str(item).partition("=")
    key = key.strip()
    if not sep or not key:
        raise WarehouseError(f"a label is key=value, got {item!r}")
    return key, value


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """Several labels; a key given twice keeps its last value, as later options override."""
    return dict(parse_label(item) for item in items)


def label_pairs(label: str | tuple[str, str] | Iterable[str | tuple[str, str]] | Mapping[str, str] | None
                ) -> tuple[tuple[str, str], ...]:
    """Labels as a library caller may pass them: "key=value", a (key, value) pair, several of
    either, or a mapping; as (key, value) pairs in the order given."""
    if label is None:
        return ()
    if isinstance(label, Mapping):
        return tuple((str(k), str(v)) for k, v in label.items())
    items = (label,) if isinstance(label, (str, tuple)) else label
    return tuple(item if isinstance(item, tuple) else parse_label(item) for item in items)


def labels_of(conn: Connection, run_ids: Iterable[int] | None = None) -> dict[int, dict[str, str]]:
    """Each run's labels, keys in order, for the runs given (every run when None)."""
    sql = "SELECT run_id, key, value FROM run_labels"
    binds: dict[str, object] = {}
    statement = text(sql + " ORDER BY run_id, key")
    if run_ids is not None:
        binds["ids"] = list(run_ids)
        if not binds["ids"]:
            return {}
        statement = text(sql + " WHERE run_id IN :ids ORDER BY run_id, key").bindparams(
            bindparam("ids", expanding=True))
    out: dict[int, dict[str, str]] = {}
    for run_id, key, value in conn.execute(statement, binds):
        out.setdefault(run_id, {})[key] = value
    return out


def runs_with_labels(conn: Connection, labels: Iterable[tuple[str, str]]) -> set[int]:
    """The ids of the runs that carry every one of these labels."""
    wanted = list(labels)
    if not wanted:
        return set(r for (r,) in conn.execute(text("SELECT id FROM runs")))
    matched: set[int] | None = None
    for key, value in wanted:
        ids = {r for (r,) in conn.execute(
            text("SELECT run_id FROM run_labels WHERE key = :k AND value = :v"), {"k": key, "v": value})}
        matched = ids if matched is None else matched & ids
    return matched or set()


def set_labels(conn: Connection, run_id: int, labels: Mapping[str, str], *, replace: bool = True) -> None:
    """Give a run these labels, replacing the value of a key it already has (or, with
    replace=False, keeping it: what a source says yields to what a person said). The caller's
    transaction commits it (a writer's connection)."""
    for key, value in labels.items():
        binds = {"r": run_id, "k": key, "v": value}
        if replace:
            conn.execute(text("DELETE FROM run_labels WHERE run_id = :r AND key = :k"), binds)
        conn.execute(text("INSERT INTO run_labels (run_id, key, value) SELECT :r, :k, :v WHERE NOT EXISTS "
                          "(SELECT 1 FROM run_labels WHERE run_id = :r AND key = :k)"), binds)


def remove_labels(conn: Connection, run_id: int, keys: Iterable[str]) -> None:
    for key in keys:
        conn.execute(text("DELETE FROM run_labels WHERE run_id = :r AND key = :k"), {"r": run_id, "k": key})


def label_sort_key(value: str | None) -> tuple:
    """Orders a label's values as a sweep is read: numbers as numbers (step 2 before step 10),
    then text; runs without the label last."""
    if value is None:
        return (2, 0.0, "")
    try:
        number = float(value)
    except ValueError:
        return (1, 0.0, value)
    return (0, number, value) if math.isfinite(number) else (1, 0.0, value)


def natural_key(text: str) -> list[Any]:
    """Sort key reading digit runs as numbers: ckpt-200 before ckpt-1000 (how every listing
    orders names: `runs --sort name`, the report, the viewer)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


# --- the runs listing ---------------------------------------------------------------------------

RUN_COLUMNS = ["run_key", "name", "labels", "trials", "pass_rate", "sources"]

# From the summaries, so it answers at once however many trials there are. pass_rate is at the
# canned queries' default threshold (a reward of at least 1).
_LIST = """
SELECT r.id, r.run_key, r.name,
       (SELECT sum(o.n_trials) FROM run_task_outcomes o WHERE o.run_id = r.id) AS trials,
       (SELECT CAST(sum(o.n_successes) AS DOUBLE PRECISION) / NULLIF(sum(o.n_trials), 0)
          FROM run_task_outcomes o WHERE o.run_id = r.id) AS pass_rate,
       (SELECT string_agg(s.name, ', ')
          FROM (SELECT DISTINCT src.name FROM run_sources rs JOIN sources src ON src.id = rs.source_id
                 WHERE rs.run_id = r.id ORDER BY src.name) s) AS sources
FROM runs r
ORDER BY r.run_key
"""


# A filter on the trials (warehouse.filters: task, model, agent, start): the trials it keeps,
# counted per run from the trials themselves.
_NARROWED = """
SELECT tr.run_id, count(*) AS trials,
       CAST(sum(CASE WHEN tr.reward >= 1.0 THEN 1 ELSE 0 END) AS DOUBLE PRECISION) / count(*) AS pass_rate
FROM trials tr
WHERE {predicate}
GROUP BY tr.run_id
"""


def list_runs(conn: Connection, sort: str | None = None, filters: "Filters | None" = None
              ) -> tuple[list[str], list[tuple]]:
    """`warehouse runs`: one row per run (RUN_COLUMNS), by key, or by `name` (natural_key's
    order, runs without a name last) or `label:KEY` (label_sort_key's, runs without the label
    last). `filters` narrow it as they narrow `query runs`: runs and labels keep their runs; a
    filter on the trials counts only the trials it keeps, and leaves out a run with none."""
    if sort not in (None, "key", "name") and not (sort.startswith("label:") and sort[len("label:"):]):
        raise WarehouseError(f"--sort is key, name or label:KEY, not {sort!r}")
    rows = conn.execute(text(_LIST)).all()
    if filters:
        run_ids = filters.run_ids(conn)
        rows = [row for row in rows if run_ids is None or row[0] in run_ids]
    if filters and filters.narrows_trials:
        predicate, binds = filters.sql(conn, run_id="tr.run_id", task_id="tr.task_id", model="tr.model",
                                       agent="tr.agent", started_at="tr.started_at", run_ids=None)
        kept = {run_id: (trials, rate) for run_id, trials, rate in
                conn.execute(text(_NARROWED.format(predicate=predicate)), binds)}
        rows = [(run_id, key, name, *kept[run_id], sources) for run_id, key, name, _, _, sources in rows
                if run_id in kept]
    labels = labels_of(conn)
    out = [(run_key, name, ", ".join(f"{k}={v}" for k, v in labels.get(run_id, {}).items()),
            trials or 0, without_noise(pass_rate), sources, labels.get(run_id, {}))
           for run_id, run_key, name, trials, pass_rate, sources in rows]
    if sort == "name":
        out.sort(key=lambda row: (row[1] is None, natural_key(row[1] or ""), row[0]))
    elif sort and sort.startswith("label:"):
        key = sort[len("label:"):]
        out.sort(key=lambda row: (label_sort_key(row[6].get(key)), row[0]))
    return RUN_COLUMNS, [row[:6] for row in out]


def label_run(conn: Connection, spec: str, items: Iterable[str], remove: Iterable[str] = ()) -> RunRef:
    """`warehouse runs label RUN k=v… --remove KEY`: in the caller's transaction."""
    labels, keys = parse_labels(items), [str(k) for k in remove]
    if not labels and not keys:
        raise WarehouseError("give labels as KEY=VALUE, or --remove KEY")
    both = sorted(set(labels) & set(keys))
    if both:
        raise WarehouseError(f"label {both[0]!r} is both set and removed")
    ref = resolve_run(conn, spec)
    remove_labels(conn, ref.id, keys)
    set_labels(conn, ref.id, labels)
    return ref
