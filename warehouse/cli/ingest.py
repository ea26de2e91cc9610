"""`warehouse ingest SOURCE…`"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from warehouse.api import IngestError
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import echo_err
from warehouse.cli.progress import ProgressLine
from warehouse.errors import Interrupted, ignore_stops, interruption, stop_signal
from warehouse.runs import parse_labels


@app.command()
def ingest(
    ctx: typer.Context,
    sources: Annotated[list[str], typer.Argument(
        help="Rows file (.parquet, .json list, .jsonl/.ndjson, .jsonl.gz), Hub-snapshot folder (README.md + "
        "data/*.parquet or *.jsonl…), Hub id org/name[@rev], Harbor trace directory (trial, job, trace_jobs/, "
        "or a root of many), or a lone ATIF trajectory.json.")],
    run: Annotated[Optional[str], typer.Option(
        "--run", help="Name the runs these rows belong to; for rows and trials whose files name no run "
        "(RL rollouts), also their run's key.")] = None,
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="A label for every run these sources' rows belong to (replacing the "
        "key's value). Repeatable.")] = None,
    keep_going: Annotated[bool, typer.Option(
        "--keep-going", "-k", help="Reject bad rows (the rest of their unit still loads) and exit 0 "
        "even when units failed; failures are still reported and counted.")] = False,
) -> None:
    """Load sources into the warehouse, idempotently: units already loaded are skipped.

    A bad unit (shard or trial directory) is reported in one line and not written at all;
    every other unit still loads, and the exit code is 1 (0 with --keep-going).

    SIGTERM or Ctrl-C ends the ingest in one line, with exit code 143 or 130: the units
    finished are kept, the one being written is rolled back.

    Examples:

    \b
      warehouse ingest examples/sample
      warehouse ingest examples/sample --run baseline --label step=100
      warehouse --db team.db ingest examples/sample --keep-going
    """
    bar = ProgressLine(sys.stderr) if sys.stderr.isatty() else None

    def warn(message: str) -> None:
        if bar is not None:
            bar.clear()  # the line is drawn again at the next step
        echo_err(f"Error: {message}")

    wh = state(ctx).warehouse
    failed = False
    try:
        labels = parse_labels(label or ())  # a bad label before anything is written
        try:
            summary = wh.ingest(sources, run=run, label=labels, keep_going=keep_going, progress=bar, warn=warn)
        except IngestError as exc:  # each failure was reported as it happened
            summary, failed = exc.report, True
    except (KeyboardInterrupt, Exception) as exc:  # (by now the reader process is stopped and reaped)
        stop = interruption(exc)
        if stop is None:
            raise
        # The one line is warehouse.__main__'s, as for a stop anywhere else.
        raise Interrupted(stop_signal(stop), "finished units kept, the current one rolled back") from None
    # Every unit is written: a stop now could only cut the report short.
    ignore_stops()
    for note in summary.notes[:50]:
        echo_err(f"warning: {note}", wrap=True)
    if len(summary.notes) > 50:
        echo_err(f"warning: … and {len(summary.notes) - 50} more (see the conflicts table)", wrap=True)
    for line in summary.lines():
        echo_err(line)
    if failed:
        raise typer.Exit(1)
