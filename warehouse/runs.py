"""Runs as people name them, and their labels.

A run is asked for by its `run_key` (a Harbor job UUID, or the name an RL source was ingested
under), by a unique prefix of that key (`5de746de`, as `git` and `gh` take a commit), or by its
`name` (the job folder, the dataset). The one rule, used wherever a run is asked for:

1. a key that matches exactly;
2. else a name that matches exactly, if one run has it;
3. else a key that starts with the spec, if one run's does.

Anything else is one line: no such run, or the candidates an ambiguous spec could mean.

Labels are `key=value` text on a run (table `run_labels`, one value per key per run).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, text

from warehouse.errors import WarehouseError

# How many candidates an ambiguous spec lists before "…".
_CANDIDATES_SHOWN = 5


@dataclass(frozen=True)
class RunRef:
    id: int
    run_key: str
    name: str | None

    def __str__(self) -> str:
        return self.run_key if not self.name or self.name == self.run_key else f"{self.run_key} ({self.name})"


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
    # Case-sensitive on both backends (LIKE is not on SQLite), and no wildcard characters.
    for where in ("name = :s", "substr(run_key, 1, length(:s)) = :s"):
        found = _refs(conn, where, {"s": spec})
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(str(ref) for ref in found[:_CANDIDATES_SHOWN])
            more = f", … ({len(found)} in all)" if len(found) > _CANDIDATES_SHOWN else ""
            raise WarehouseError(f"run {spec!r} is ambiguous: it could be {shown}{more}")
    raise WarehouseError(f"no run {spec!r} (`warehouse runs` lists them)")


def resolve_runs(conn: Connection, specs: Iterable[str]) -> list[RunRef]:
    """Each spec's run, in the order given, without repeats."""
    return list(dict.fromkeys(resolve_run(conn, spec) for spec in specs))


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


def set_labels(conn: Connection, run_id: int, labels: Mapping[str, str]) -> None:
    """Give a run these labels, replacing the value of a key it already has. The caller's
    transaction commits it (a writer's connection)."""
    for key, value in labels.items():
        conn.execute(text("DELETE FROM run_labels WHERE run_id = :r AND key = :k"), {"r": run_id, "k": key})
        conn.execute(text("INSERT INTO run_labels (run_id, key, value) VALUES (:r, :k, :v)"),
                     {"r": run_id, "k": key, "v": value})


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
