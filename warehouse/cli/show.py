"""`warehouse show TRIAL`: one trajectory, for reading or as JSON."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state


class ShowFormat(str, Enum):
    # A trajectory is one nested object, not rows: table (for people) and json only.
    table = "table"
    json = "json"


@app.command("show")
def show(
    ctx: typer.Context,
    trial: Annotated[str, typer.Argument(help="A trial name, RUN/TRIAL when the name is in several runs, or a trial id.")],
    episode: Annotated[Optional[int], typer.Option("--episode", help="Show this episode (index) of the main trace.")] = None,
    all_episodes: Annotated[bool, typer.Option("--all", help="Show every episode of every trace source.")] = False,
    fmt: Annotated[ShowFormat, typer.Option("--format", "-f", help="table (readable) or json (exact texts).")] = ShowFormat.table,
) -> None:
    """Show one trial: run, task, agent, model, reward, status, an episode's turns, verifier output.

    By default the episode is the longest of the main trace (the whole trajectory: exported
    episodes are prefixes of one another).

    Examples:

    \b
      warehouse show debug-csv__XM5Mqch
      warehouse show debug-csv__XM5Mqch --all
      warehouse show 9f8c2915-4688-461a-8cba-3901225a1cb2/debug-csv__XM5Mqch --format json
    """
    if episode is not None and all_episodes:
        raise typer.BadParameter("give --episode or --all, not both", param_hint="--episode")
    from warehouse import show as show_lib  # the ORM models: imported by this command only

    trajectory = state(ctx).warehouse.show(trial, episode=episode, all_episodes=all_episodes)
    out = show_lib.to_json(trajectory) + "\n" if fmt is ShowFormat.json else show_lib.to_text(trajectory)
    sys.stdout.write(out)
