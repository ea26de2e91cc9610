"""`warehouse report OUT.html`: the sweep as one self-contained page (warehouse.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.filtering import narrowed
from warehouse.cli.output import echo_err
from warehouse.cli.query import param_option
from warehouse.filters import Filters
from warehouse.queries.catalog import BY_GROUP, ERRORS, METRIC
from warehouse.readonly import DEFAULT_TIMEOUT


ByOption, ErrorsOption, MetricOption = (param_option(p) for p in (BY_GROUP, ERRORS, METRIC))


@app.command()
@narrowed
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The HTML file to write; refused if it exists, unless --force.")],
    filters: Filters = Filters(),
    # pass-rate's, which the report's pass rates are.
    by: ByOption = BY_GROUP.default,
    errors: ErrorsOption = ERRORS.default,
    metric: MetricOption = METRIC.default,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop each query after this many seconds.")]
    = DEFAULT_TIMEOUT,
) -> None:
    """Write an HTML report of the sweep: runs, pass rate with its interval, solve matrix,
    failures and lengths.

    One file with its charts' code inside: it opens offline, and nothing in the warehouse is
    written. Needs plotly (the `report` extra).

    Examples:

    \b
      warehouse report sweep.html
      warehouse runs label 9f8c2915 step=100 \\
        && warehouse report sweep.html --by label:step
      warehouse report one.html --run 9f8c2915
      warehouse report errors-out.html --errors exclude
    """
    from warehouse import report as building  # plotly and the charts: only for this command
    building.require_plotly()
    building.check_out(out, force)  # before any query: a refusal costs nothing
    info = building.write_report(state(ctx).read_engine(), out, filters=filters, by=by, force=force,
                                 timeout=timeout, errors=getattr(errors, "value", errors), metric=metric)
    counts = ", ".join(_count(n, what) for n, what in ((info.runs, "run"), (info.tasks, "task"),
                                                       (len(info.charts), "chart")))
    for line in (info.note or "").splitlines():
        echo_err(f"note: {line}", wrap=True)
    echo_err(f"wrote {out}: {counts}, {info.bytes:,} bytes")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
