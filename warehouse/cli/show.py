"""`warehouse show TRIAL`: one trajectory, for reading or as JSON."""

from __future__ import annotations

import os
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
    trial: Annotated[str, typer.Argument(help="A trial name or a unique start of one, RUN/TRIAL when the name is in several runs, or a trial id.")],
    episode: Annotated[Optional[int], typer.Option("--episode", help="Show this episode (index) of the main trace, or of --trace.")] = None,
    trace: Annotated[Optional[str], typer.Option("--trace", help="Show this trace source (a subagent's, say): its longest episode, or --episode N.")] = None,
    all_episodes: Annotated[bool, typer.Option("--all", help="Show every episode of every trace source.")] = False,
    turns: Annotated[Optional[str], typer.Option("--turns", help="Only turns A to B-1 of those shown (a Python slice: 40:, -5:, 12).")] = None,
    no_pager: Annotated[bool, typer.Option("--no-pager", help="Print straight to the terminal, not through $PAGER.")] = False,
    fmt: Annotated[ShowFormat, typer.Option("--format", "-f", help="table (readable) or json (exact texts).")] = ShowFormat.table,
) -> None:
    """Show one trial: run, task, agent, model, reward, status, an episode's turns, verifier output.

    By default every conversation of the trial (each step of a multi-step trial, with its
    reward), the longest episode of each (exported episodes are prefixes of one another);
    subagents and shorter episodes are listed at the end. On a terminal it pages through
    $PAGER (less -R).

    Examples:

    \b
      warehouse show debug-csv__XM5
      warehouse show debug-csv__XM5Mqch --turns 40:60
      warehouse show 9f8c2915/debug-csv__XM5Mqch --format json
    """
    if all_episodes and (episode is not None or trace is not None):
        raise typer.BadParameter("give --episode or --trace, or --all, not both", param_hint="--all")
    from warehouse import show as show_lib  # the ORM models: imported by this command only
    from warehouse.cli.pager import page

    trajectory = state(ctx).warehouse.show(trial, episode=episode, trace=trace, all_episodes=all_episodes, turns=turns)
    if fmt is ShowFormat.json:
        out = show_lib.to_json(trajectory) + "\n"
    else:
        # Thinking dimmed only on a terminal (through the pager too: less -R passes colours on,
        # as git counts on), and not under NO_COLOR.
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        out = show_lib.to_text(trajectory, color=color)
    page(out, enabled=not no_pager)
