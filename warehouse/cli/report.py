"""`warehouse report OUT.html`: the sweep as one self-contained page (warehouse.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.errors import WarehouseError
from warehouse.readonly import DEFAULT_TIMEOUT


@app.command()
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The HTML file to write; refused if it exists, unless --force.")],
    run: Annotated[Optional[list[str]], typer.Option(
        "--run", help="Only this run (run key, unique prefix or name); repeatable.")] = None,
    task: Annotated[Optional[list[str]], typer.Option(
        "--task", help="Only tasks matching this glob (*, ?); repeatable.")] = None,
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="Only runs with this label, KEY=VALUE; repeatable.")] = None,
    by: Annotated[str, typer.Option(
        "--by", help="Pass rate per run, model, agent, or per value of a run label (label:KEY).")] = "run",
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop each query after this many seconds.")]
    = DEFAULT_TIMEOUT,
) -> None:
    """Write an HTML report of the sweep: runs, pass rate with its interval, solve matrix,
    failures and lengths.

    One file with its charts' code inside: it opens offline, and nothing in the warehouse is
    written. Needs plotly (the `report` extra)."""
    from warehouse import report as building  # plotly and the charts: only for this command

    building.require_plotly()
    building.check_out(out, force)  # before any query: a refusal costs nothing
    engine = state(ctx).read_engine()
    # --task and --label are the canned queries' filters (issue 17.3, the `runs` branch): handed
    # to every query as parameters, which refuse them in one line until they take them.
    filters = {name: value for name, value in (("task", task), ("label", label)) if value}
    run_keys = _resolve(engine, run) if run else []
    info = building.write_report(engine.url, out, by=by, runs=run_keys, filters=filters, force=force,
                                 timeout=timeout)
    charts = f"{len(info.charts)} chart{'' if len(info.charts) == 1 else 's'}"
    typer.echo(f"wrote {out}: {info.runs} runs, {info.tasks} tasks, {charts}, {info.bytes:,} bytes", err=True)


def _resolve(engine, specs: list[str]) -> list[str]:
    """Run keys for what the user typed: exact run keys until warehouse.runs.resolve_runs
    (prefixes and names) is on main."""
    with engine.connect() as conn:
        keys = {key for (key,) in conn.exec_driver_sql("SELECT run_key FROM runs")}
    for spec in specs:
        if spec not in keys:
            raise WarehouseError(f"no run {spec!r} (warehouse query runs lists them)")
    return list(dict.fromkeys(specs))
