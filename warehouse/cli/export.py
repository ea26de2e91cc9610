"""`warehouse export hub|tables OUT`"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app as root
from warehouse.cli.context import state
from warehouse.cli.filtering import narrowed
from warehouse.cli.output import echo_err
from warehouse.cli.query import param_option
from warehouse.filters import Filters
from warehouse.queries.catalog import THRESHOLD
from warehouse.selection import DEFAULT_PICK_TIMEOUT

app = typer.Typer(no_args_is_help=True, help="""Write warehouse contents out as Parquet.

    Examples:

    \b
      warehouse export hub sample-copy --source sample
      warehouse export tables tables
    """)
root.add_typer(app, name="export")

Out = Annotated[Path, typer.Argument(help="Output folder: must be missing or empty, unless --force.")]
Force = Annotated[bool, typer.Option(
    "--force", help="Write into a non-empty OUT, replacing what the export writes and keeping the rest.")]


class PerTask(str, Enum):
    all = "all"
    best = "best"
    shortest = "shortest"
    first = "first"


class Episodes(str, Enum):
    all = "all"
    last = "last"


class CardPathsChoice(str, Enum):
    private = "private"
    full = "full"


# --solved is what the queries call success.
ThresholdOption = param_option(THRESHOLD)


@app.command()
@narrowed
def hub(
    ctx: typer.Context,
    out: Out,
    filters: Filters = Filters(),
    source: Annotated[Optional[list[str]], typer.Option(
        "--source", help="Export this source's rows, shard by shard as ingested (name, URI or path); "
        "repeatable. With --run: only those runs' rows of it.")] = None,
    solved: Annotated[Optional[bool], typer.Option(
        "--solved/--unsolved", show_default=False,
        help="Only the trials whose reward is at least --threshold / only the others.")] = None,
    threshold: ThresholdOption = THRESHOLD.default,
    where: Annotated[Optional[str], typer.Option(
        "--where",
        help="Only the trials this SQL predicate over the trial_summary view holds for "
        "(e.g. \"reward > 0.5 AND agent = 'terminus-2'\"); read-only, checked as `warehouse sql` checks a query.")] = None,
    per_task: Annotated[PerTask, typer.Option(
        "--per-task", help="Per task, keep every selected trial (all), or one: the highest reward then "
        "shortest (best), the fewest turns (shortest), the earliest started (first).")] = PerTask.all,
    episodes: Annotated[Episodes, typer.Option(
        "--episodes", help="Every episode of the trials (all), or the last of each main trajectory "
        "and every subagent's, as `harbor traces export --episodes last` (last).")] = Episodes.all,
    subagents: Annotated[bool, typer.Option(
        "--subagents/--no-subagents", help="Also the subagents' episodes (summarizations), as "
        "`harbor traces export`.")] = True,
    instruction_metadata: Annotated[bool, typer.Option(
        "--instruction-metadata", help="Trace-directory rows get Harbor's instruction column.")] = False,
    verifier_metadata: Annotated[bool, typer.Option(
        "--verifier-metadata", help="Trace-directory rows get Harbor's verifier_output column "
        "(the verifier's stdout and stderr).")] = False,
    card_paths: Annotated[CardPathsChoice, typer.Option(
        "--card-paths", help="How README.md names local sources and the paths in the command it quotes: "
        "private (their path relative to --card-root, else their name and content hash) or full "
        "(absolute paths of this machine).")] = CardPathsChoice.private,
    card_root: Annotated[Optional[Path], typer.Option(
        "--card-root", help="README.md names local sources and paths under DIR relative to it.")] = None,
    force: Force = False,
    timeout: Annotated[float, typer.Option(
        "--timeout",
        help="Stop if picking the trials (the filters, --solved, --where, --per-task) takes longer than this; "
        "writing them is not timed.")] = DEFAULT_PICK_TIMEOUT,
) -> None:
    """Write a Hub-shaped dataset: README.md + data/*.parquet.

    README.md, the dataset card, is written to be published: it names a Hub source by its id and
    revision, and no absolute path of this machine unless --card-paths full.

    By source, each ingested shard comes back with its own file name, columns, types and rows.
    By run (or, without --run and --source, every run), each episode once, under the union of
    the schemas of the shards it came from.

    --task, --label, --model, --agent, --since, --until, --solved, --where, --per-task,
    --episodes and --no-subagents narrow either to a dataset built by query; README.md says what was selected,
    from which runs, sources and loads, and by which command.

    Trials read from trace directories are written as `harbor traces export` writes them, with
    the same options (--episodes, --subagents, --instruction-metadata, --verifier-metadata).

    Examples:

    \b
      warehouse export hub sample-copy --source sample
      warehouse export hub one-run --run 9f8c2915 --force
      warehouse export hub sft --solved --per-task shortest --episodes last
    """
    if card_root is not None and card_paths is CardPathsChoice.full:
        raise typer.BadParameter("give --card-root or --card-paths full, not both", param_hint="--card-root")
    engine = state(ctx).read_engine()
    from warehouse.export import CardPaths, export_hub  # pyarrow: imported by the commands that use it
    from warehouse.harbor_rows import Columns
    from warehouse.selection import Pick

    paths = CardPaths(root=card_root, full=card_paths is CardPathsChoice.full)
    pick = Pick(solved=solved, threshold=threshold, where=where, per_task=per_task.value, episodes=episodes.value,
                subagents=subagents)
    columns = Columns(instruction=instruction_metadata, verifier_output=verifier_metadata)
    info = export_hub(engine, out, filters, sources=source, pick=pick, command=_command_line(), force=force,
                      timeout=timeout, card_paths=paths, columns=columns)
    if info.note:
        echo_err(f"note: {info.note}", wrap=True)
    for note in info.notes:
        echo_err(f"warning: {note}", wrap=True)
    _say_replaced(out, info.replaced)
    typer.echo(f"wrote {out}: {info.n_rows} rows in {len(info.files)} files under data/", err=True)


def _command_line() -> list[str]:
    """This command as typed, for the dataset card, with the password of a --db URL hidden."""
    from warehouse.db.engine import redact

    def shown(db: str) -> str:
        return db if "://" not in db or db.startswith("sqlite") else redact(db)  # a file: as typed

    args = ["warehouse"]
    hide = False
    for arg in sys.argv[1:]:
        if hide:
            arg, hide = shown(arg), False
        elif arg == "--db":
            hide = True
        elif arg.startswith("--db="):
            arg = "--db=" + shown(arg.removeprefix("--db="))
        args.append(arg)
    return args


@app.command()
def tables(ctx: typer.Context, out: Out, force: Force = False) -> None:
    """Write every table as Parquet, one folder per table, and the views as SQL for DuckDB.

    Run-scoped tables (trials, episodes, conversations, conversation_turns, episode_loads,
    trial_loads) are partitioned Hive style by run_id=<runs.id>/; the others are plain folders of
    part-*.parquet files. OUT/views.sql makes each table a DuckDB view over its files and defines
    the warehouse's views (turns, turn_text, trial_summary) over them: run it in OUT.

    Examples:

    \b
      warehouse export tables tables
      warehouse export tables tables --force
    """
    engine = state(ctx).read_engine()
    from warehouse.export_tables import VIEWS_SQL, export_tables

    info = export_tables(engine, out, force=force)
    summary = ", ".join(f"{name} {n}" for name, n in info.rows.items())
    _say_replaced(out, info.replaced)
    views = f"; views in {VIEWS_SQL}: {', '.join(info.views)}" if info.views else ""
    typer.echo(f"wrote {out}: {sum(info.files.values())} files; rows: {summary}{views}", err=True)


def _say_replaced(out: Path, replaced: list[str]) -> None:
    if replaced:
        typer.echo(f"replaced in {out}: {', '.join(replaced)}", err=True)
