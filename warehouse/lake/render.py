"""One statement of the warehouse's portable SQL, rendered for a lake's engine (DuckDB, Spark SQL).

The canned queries' SQL runs unchanged on SQLite and PostgreSQL; sqlglot parses it (as
PostgreSQL's, the stricter of the two) and writes it in the engine's dialect: its types
(`DOUBLE PRECISION`, `TEXT`), its quoting of identifiers and of string literals (Spark reads `\\`
in a literal as an escape), and NULL ordering made explicit where the engine's default differs
(PostgreSQL sorts NULLs last ascending, first descending; the rendered ORDER BY says so). The
binds are written in as literals of their types, so that the engines need no parameter syntax
of their own.

What sqlglot cannot know is rewritten here: `string_agg(x, sep)`, which the portable SQL feeds
from a subquery ordered by `x` (its values distinct), sorts its values explicitly, since neither
engine keeps a subquery's order into an aggregate. Integer division is not rewritten: the
definitions divide only after a CAST to DOUBLE PRECISION.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date, datetime, timezone
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import exp

from warehouse.errors import WarehouseError

DIALECTS = {"duckdb": "duckdb", "spark": "spark"}


def render(sql: str, binds: Mapping[str, Any], engine: str) -> str:
    """`sql` (`:name` binds) for `engine`, its binds written in."""
    tree = _parsed(sql).copy()
    tree = tree.transform(lambda node: _literal(node, binds) if isinstance(node, exp.Placeholder) else node)
    tree = tree.transform(lambda node: _sorted_agg(node, engine) if isinstance(node, exp.GroupConcat) else node)
    if engine == "spark":
        tree = tree.transform(_one_per_group)
    return tree.sql(dialect=DIALECTS[engine], comments=False)


@lru_cache(maxsize=256)
def _parsed(sql: str) -> exp.Expression:
    try:
        return sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as e:  # the library's own text: a bug, said in one line
        raise WarehouseError(f"cannot render a statement for the lake: {str(e).splitlines()[0]}") from None


def _literal(node: exp.Placeholder, binds: Mapping[str, Any]) -> exp.Expression:
    name = node.name
    if name not in binds:
        raise WarehouseError(f"cannot render a statement for the lake: no value for :{name}")
    return literal(binds[name])


def literal(value: Any) -> exp.Expression:
    """A Python value as a SQL literal of its type."""
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Literal.number(int(value))
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WarehouseError(f"cannot write {value} into a lake's statement")
        # A DOUBLE, not the DECIMAL a bare 0.5 is to both engines: compared as the warehouse compares.
        return exp.cast(exp.Literal.number(repr(value)), exp.DataType.build("DOUBLE"))
    if isinstance(value, datetime):
        moment = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return exp.cast(exp.Literal.string(moment.isoformat()), exp.DataType.build("TIMESTAMPTZ"))
    if isinstance(value, date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("DATE"))
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise WarehouseError(f"cannot write a {type(value).__name__} into a lake's statement")


def _one_per_group(node: exp.Expression) -> exp.Expression:
    """A scalar subquery in the select list of a grouped SELECT as `first(...)`: the portable SQL
    correlates such a subquery with the groups' columns alone (one value per group), which
    Spark takes only when told so (SCALAR_SUBQUERY_IS_IN_GROUP_BY_OR_AGGREGATE_FUNCTION)."""
    if not isinstance(node, exp.Subquery) or _is_first(node.parent):
        return node
    outer = node.find_ancestor(exp.Select)
    if outer is None or not outer.args.get("group"):
        return node
    if not any(node is e or any(node is s for s in e.find_all(exp.Subquery)) for e in outer.expressions):
        return node  # in FROM, WHERE or HAVING
    return exp.Anonymous(this="first", expressions=[node])


def _is_first(node: exp.Expression | None) -> bool:
    return isinstance(node, exp.Anonymous) and node.name == "first"


def _sorted_agg(node: exp.GroupConcat, engine: str) -> exp.Expression:
    """string_agg(x, sep) with its values in x's order (the module docstring)."""
    value = node.this.this if isinstance(node.this, exp.Order) else node.this
    separator = node.args.get("separator") or exp.Literal.string(",")
    if engine == "duckdb":
        return exp.GroupConcat(this=exp.Order(this=value.copy(), expressions=[exp.Ordered(this=value.copy())]),
                               separator=separator.copy())
    # Spark: array_join of the sorted values; NULL (as string_agg) when there are none.
    joined = exp.Anonymous(this="array_join", expressions=[
        exp.Anonymous(this="array_sort", expressions=[exp.Anonymous(this="collect_list", expressions=[value.copy()])]),
        separator.copy()])
    return exp.Case(ifs=[exp.If(this=exp.GT(this=exp.Count(this=value.copy()), expression=exp.Literal.number(0)),
                                true=joined)])
