"""`warehouse runs`: the runs, their names and labels; `runs rename`, `runs label`, `runs delete`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.filtering import narrowed
from warehouse.cli.output import Format, FormatOption, WideOption, echo_err, write_rows
from warehouse.cli.shared import choice_list
from warehouse.cli.writing import confirm, write_transaction
from warehouse.filters import Filters

runs_app = typer.Typer(invoke_without_command=True, help="""The runs: key, name, labels, trials, pass rate, sources.

    Examples:

    \b
      warehouse runs
      warehouse runs --sort label:step
      warehouse runs label 9f8c2915 step=100 lr=3e-5
      warehouse runs delete 9f8c2915
    """)
app.add_typer(runs_app, name="runs")


@runs_app.callback()
@narrowed
def list_runs(
    ctx: typer.Context,
    filters: Filters = Filters(),
    sort: Annotated[Optional[str], typer.Option(
        "--sort", metavar=choice_list(("key", "name", "label:KEY")),
        help="key (default), name (numbers in it as numbers: ckpt-200 before ckpt-1000), or label:KEY "
        "(numbers as numbers).")] = None,
    fmt: FormatOption = Format.table,
    wide: WideOption = False,
) -> None:
    """List the runs: key, name, labels, trials, pass rate (reward >= 1), sources.

    A run is asked for anywhere by its key, a unique prefix of the key, or its name. The filters
    narrow the list as they narrow `warehouse query runs`: --run and --label keep those runs;
    --task, --model, --agent, --since and --until count only the trials they keep, and leave
    out a run with none.

    Examples:

    \b
      warehouse runs
      warehouse runs --sort name --format csv
      warehouse runs --label step=100 --since 7d
    """
    if ctx.invoked_subcommand is not None:
        return
    from warehouse.readonly import readonly_session
    from warehouse.runs import list_runs as listing

    with readonly_session(state(ctx).read_engine().url) as session:  # (its SQLite has string_agg)
        columns, rows = listing(session.connection, sort, filters)
        # A value that matches nothing: said beside the (empty) list, as the queries say it.
        note = filters.unmatched(session.connection) if filters.narrows_trials or filters.labels else None
    write_rows(columns, rows, fmt, wide=wide)
    if note:
        echo_err(f"note: {note}", wrap=True)


@runs_app.command("rename")
def rename(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run: its key, a unique prefix of it, or its name.")],
    name: Annotated[str, typer.Argument(help="Its new name: no other run's name, nor what another run's key starts with.")],
) -> None:
    """Give a run a new name (a later ingest keeps it, unless given --run).

    Examples:

    \b
      warehouse runs rename 9f8c2915 baseline
      warehouse runs rename b421acf4 "step 200"
    """
    from warehouse.runs import rename_run, resolve_run

    with write_transaction(ctx) as conn:
        ref = resolve_run(conn, run)
        rename_run(conn, ref, name)
    echo_err(f"renamed {ref} to {name!r}")


@runs_app.command("label")
def label(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run: its key, a unique prefix of it, or its name.")],
    labels: Annotated[Optional[list[str]], typer.Argument(
        help="KEY=VALUE labels; a key the run has gets the new value.", show_default=False)] = None,
    remove: Annotated[Optional[list[str]], typer.Option(
        "--remove", help="Remove the label KEY. Repeatable.")] = None,
) -> None:
    """Set (or --remove) labels on a run.

    Examples:

    \b
      warehouse runs label 9f8c2915 step=100 lr=3e-5
      warehouse runs label 9f8c2915 --remove lr
    """
    from warehouse.runs import label_run, labels_of

    with write_transaction(ctx) as conn:
        ref = label_run(conn, run, labels or (), remove or ())
        now = labels_of(conn, [ref.id]).get(ref.id, {})
    echo_err(f"{ref}: {', '.join(f'{k}={v}' for k, v in now.items()) or 'no labels'}")


@runs_app.command("delete")
def delete(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The run: its key, a unique prefix of it, or its name.")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete without asking.")] = False,
) -> None:
    """Delete a run and what only it holds, in one transaction.

    Its trials go with their episodes and turns, summaries and labels, and so do the ledger
    units that hold nothing else. A unit that also holds other runs stays in the ledger (a later
    ingest of it does not bring the run back); a unit that goes is loaded again by a later
    ingest.

    Says what will go and asks on a terminal; without one it refuses unless --yes.

    Examples:

    \b
      warehouse runs delete 9f8c2915
      warehouse runs delete sample-b421acf4
    """
    from ingest.take_back import delete_run, run_removal
    from warehouse.runs import resolve_run

    with write_transaction(ctx) as conn:  # counted under the lock, asked after it is let go
        ref = resolve_run(conn, run)
        what = _removal_text(ref, run_removal(conn, ref.id))
    confirm(f"delete {what}", yes)
    with write_transaction(ctx) as conn:
        ref = resolve_run(conn, ref.run_key)  # (gone since, by another hand: said as for any unknown run)
        done = delete_run(conn, ref.id)
    echo_err(f"deleted {_removal_text(ref, done)}")


def _removal_text(ref, removal) -> str:
    parts = [f"run {ref}: {removal.trials:,} trial{'s' * (removal.trials != 1)}, "
             f"{removal.episodes:,} episode{'s' * (removal.episodes != 1)}, "
             f"{removal.turns:,} turn{'s' * (removal.turns != 1)}"]
    if removal.units:
        parts.append(f"{removal.units:,} ledger unit{'s' * (removal.units != 1)} holding nothing else")
    if removal.sources:
        parts.append(f"{removal.sources:,} source{'s' * (removal.sources != 1)} left with no unit")
    return "; ".join(parts)
