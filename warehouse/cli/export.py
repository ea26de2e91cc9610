"""`warehouse export hub|tables OUT`"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app as root
from warehouse.cli.context import state

app = typer.Typer(no_args_is_help=True, help="""Write warehouse contents out as Parquet.

    Examples:

    \b
      warehouse export hub out/sample --source sample
      warehouse export tables out/tables
    """)
root.add_typer(app, name="export")

Out = Annotated[Path, typer.Argument(help="Output folder: must be missing or empty, unless --force.")]
Force = Annotated[bool, typer.Option(
    "--force", help="Write into a non-empty OUT, replacing what the export writes and keeping the rest.")]


@app.command()
def hub(
    ctx: typer.Context,
    out: Out,
    run: Annotated[Optional[list[str]], typer.Option(
        "--run", help="Export this run's episodes (run key or name); repeatable.")] = None,
    source: Annotated[Optional[list[str]], typer.Option(
        "--source", help="Export this source's rows, shard by shard as ingested (name, URI or path); "
        "repeatable. With --run: only those runs' rows of it.")] = None,
    force: Force = False,
) -> None:
    """Write a Hub-shaped dataset: README.md + data/*.parquet.

    By source, each ingested shard comes back with its own file name, columns, types and rows.
    By run (or, without --run and --source, every run), each episode once, under the union of
    the schemas of the shards it came from.

    Examples:

    \b
      warehouse export hub out/sample --source sample
      warehouse export hub out/one-run --run 9f8c2915-4688-461a-8cba-3901225a1cb2
      warehouse export hub out/all --force
    """
    engine = state(ctx).read_engine()
    from warehouse.export import export_hub  # pyarrow: imported by the commands that use it

    info = export_hub(engine, out, runs=run, sources=source, force=force)
    for note in info.notes:
        typer.echo(f"warning: {note}", err=True)
    _say_replaced(out, info.replaced)
    typer.echo(f"wrote {out}: {info.n_rows} rows in {len(info.files)} files under data/", err=True)


@app.command()
def tables(ctx: typer.Context, out: Out, force: Force = False) -> None:
    """Write every table as Parquet, one folder per table.

    Run-scoped tables (trials, episodes, turns, episode_loads, trial_loads) are partitioned Hive
    style by run_id=<runs.id>/; the others are plain folders of part-*.parquet files.

    Examples:

    \b
      warehouse export tables out/tables
      warehouse export tables out/tables --force
    """
    engine = state(ctx).read_engine()
    from warehouse.export_tables import export_tables

    info = export_tables(engine, out, force=force)
    summary = ", ".join(f"{name} {n}" for name, n in info.rows.items())
    _say_replaced(out, info.replaced)
    typer.echo(f"wrote {out}: {sum(info.files.values())} files; rows: {summary}", err=True)


def _say_replaced(out: Path, replaced: list[str]) -> None:
    if replaced:
        typer.echo(f"replaced in {out}: {', '.join(replaced)}", err=True)
