"""`warehouse report OUT.html`: the sweep as one self-contained page (warehouse.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.filtering import narrowed
from warehouse.cli.output import echo_err
from warehouse.cli.shared import choice_list
from warehouse.filters import Filters
from warehouse.queries.catalog import BY_GROUP, ERRORS
from warehouse.readonly import DEFAULT_TIMEOUT


@app.command()
@narrowed
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The HTML file to write; refused if it exists, unless --force.")],
    filters: Filters = Filters(),
    # --by and --errors as pass-rate's, which the report's pass rates are.
    by: Annotated[str, typer.Option(
        "--by", metavar=choice_list(BY_GROUP.allowed),
        help="Pass rate per run, model, agent, or per value of a run label (label:KEY).")] = "run",
    errors: Annotated[str, typer.Option(
        "--errors", metavar=choice_list(ERRORS.allowed),
        help="Trials with an exception and no reward: fail (failed attempts) or exclude (left out).")] = "fail",
    metric: Annotated[Optional[str], typer.Option(
        "--metric", help="Succeed on this key of the trials' rewards instead of the reward.")] = None,
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
                                 timeout=timeout, errors=errors, metric=metric)
    counts = ", ".join(_count(n, what) for n, what in ((info.runs, "run"), (info.tasks, "task"),
                                                       (len(info.charts), "chart")))
    for line in (info.note or "").splitlines():
        echo_err(f"note: {line}", wrap=True)
    echo_err(f"wrote {out}: {counts}, {info.bytes:,} bytes")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
