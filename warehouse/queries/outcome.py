"""What a trial's outcome is, as the queries with --metric and --errors count it.

--metric KEY: a trial's value is rewards[KEY] (one key: a Harbor key may hold dots, as
`clawbench.accuracy`), not its reward; it succeeds when that is at least --threshold, and a trial
without the key has no value, as a trial without a reward. --errors exclude leaves out the trials
with an exception and no value, as if never run; --errors fail (the default) counts them as
attempts that failed. The SQL reads the value as `{reward}` and keeps the trials `{kept}` allows
(registry's module docstring); the answer's note says the choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, text

from warehouse.errors import WarehouseError
from warehouse.filters import Filters

ERRORS = ("fail", "exclude")
# What the default says of errors (--errors fail), on every answer that counts attempts.
DEFAULT_NOTE = "errors: counted as failures (--errors exclude leaves them out)"

# A key's value in trials.rewards (JSON text on SQLite, JSONB on PostgreSQL), as a number.
# SQLite's JSON paths cannot spell a key holding a double quote ('$."a\"b"' finds nothing), and
# its ->> reads 'a.b' as a path: json_each compares the key itself.
_VALUE = {
    "sqlite": "(SELECT j.value FROM json_each({t}.rewards) j WHERE j.key = :metric)",
    "postgresql": "CAST({t}.rewards ->> :metric AS DOUBLE PRECISION)",
    # A lake's engines (warehouse.lake) hold rewards as JSON text. DuckDB finds the key by its
    # JSON Pointer (`/` and `~` escaped: any key, dots and all); Spark reads the object as a map.
    "duckdb": "TRY_CAST(json_extract_string({t}.rewards, '/' || replace(replace(:metric, '~', '~0'), '/', '~1'))"
              " AS DOUBLE PRECISION)",
    "spark": "TRY_CAST(try_element_at(from_json({t}.rewards, 'map<string,string>'), :metric) AS DOUBLE PRECISION)",
}
# A few of the keys the trials hold, for the error naming an unknown one.
_KEYS = {
    "sqlite": "SELECT DISTINCT j.key FROM trials t, json_each(t.rewards) j ORDER BY 1 LIMIT 6",
    "postgresql": "SELECT DISTINCT jsonb_object_keys(t.rewards) AS key FROM trials t ORDER BY 1 LIMIT 6",
    "duckdb": "SELECT DISTINCT k.key FROM (SELECT unnest(json_keys(t.rewards)) AS key FROM trials t) k ORDER BY 1 LIMIT 6",
    "spark": "SELECT DISTINCT k.key FROM (SELECT explode(json_object_keys(t.rewards)) AS key FROM trials t) k "
             "ORDER BY 1 LIMIT 6",
}


def chosen(values: Mapping[str, Any]) -> bool:
    """Whether the values ask for other than the reward with errors counted as failures."""
    return values.get("errors", "fail") != "fail" or values.get("metric") is not None


def value(values: Mapping[str, Any], dialect: str, t: str = "tr") -> str:
    """The SQL of a trial's value (under alias `t`): its reward, or its --metric."""
    return f"{t}.reward" if values.get("metric") is None else _VALUE[dialect].format(t=t)


def fill(sql: str, values: Mapping[str, Any], conn: Connection, filters: Filters
         ) -> tuple[str, dict[str, Any], str | None]:
    """`sql` with `{reward}` and `{kept}` filled, the binds they need, and the note saying the
    choice, for every query that takes one: what an answer counts as an attempt and a success
    changes what it means (a denominator moves a mean), so no answer leaves it unsaid."""
    if "errors" not in values and "metric" not in values:
        return sql, {}, None
    dialect = conn.dialect.name
    reward = value(values, dialect)
    binds = {} if values.get("metric") is None else {"metric": values["metric"]}
    if binds:
        _check_key(conn, values["metric"], reward, dialect)
    errored = f"(tr.exception_type IS NOT NULL AND {reward} IS NULL)"
    exclude = values.get("errors", "fail") == "exclude"
    sql = sql.replace("{reward}", reward).replace("{kept}", f"NOT {errored}" if exclude else "1 = 1")
    lines = []
    if values.get("metric") is not None:
        lines.append(f"metric: rewards[{values['metric']!r}] >= threshold (a trial without the key has no value)")
    if exclude:
        n = _count(conn, values, errored, binds, filters)
        lines.append(f"errors: excluded ({n} trials with an exception and no "
                     f"{'reward' if values.get('metric') is None else 'value'} left out)")
    else:
        lines.append(DEFAULT_NOTE)
    return sql, binds, "\n".join(lines) or None


def _check_key(conn: Connection, key: str, reward: str, dialect: str) -> None:
    """A key no trial holds is a mistake (a typo), not an answer of zeros."""
    if conn.execute(text(f"SELECT 1 FROM trials tr WHERE {reward} IS NOT NULL LIMIT 1"), {"metric": key}).first():
        return
    known = [row[0] for row in conn.execute(text(_KEYS[dialect]))]
    listed = ", ".join(repr(k) for k in known[:5]) + (", …" if len(known) > 5 else "")
    raise WarehouseError(f"--metric {key!r}: no trial has that reward key"
                         + (f" (keys: {listed})" if known else " (no trial has rewards)"))


def _count(conn: Connection, values: Mapping[str, Any], errored: str, binds: Mapping[str, Any],
           filters: Filters) -> int:
    """The trials --errors exclude leaves out of the query's selection (its filters, and for
    compare its two runs)."""
    from warehouse.queries.registry import narrow, trial_columns  # registry imports this module

    where, more = narrow("{filters}", {"filters": trial_columns("tr")}, filters,
                         conn if filters.needs_connection else None)
    runs = ""
    if values.get("a") is not None and values.get("b") is not None:
        runs = " AND tr.run_id IN (SELECT id FROM runs WHERE run_key IN (:a, :b))"
        more = {**more, "a": values["a"], "b": values["b"]}
    return int(conn.execute(text(f"SELECT count(*) FROM trials tr WHERE {errored} AND {where}{runs}"),
                            {**binds, **more}).scalar_one())
