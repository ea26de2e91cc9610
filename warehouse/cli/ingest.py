"""`warehouse ingest SOURCE…`"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from warehouse.api import IngestError
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import echo_err
from warehouse.cli.progress import ProgressLine, WatchLine
from warehouse.errors import Interrupted, WarehouseError, ignore_stops, interruption, stop_signal
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
    watch: Annotated[bool, typer.Option(
        "--watch", help="Keep following the sources (local folders): load each trial when it finishes "
        "and each shard once whole, until Ctrl-C or SIGTERM.")] = False,
    running: Annotated[bool, typer.Option(
        "--running", help="With --watch: load running trials too, as incomplete snapshots, replaced "
        "when they finish.")] = False,
    poll: Annotated[Optional[float], typer.Option(
        "--poll", metavar="SECONDS", help="With --watch: look every SECONDS instead of waiting for the "
        "file system's change notices (NFS and other network file systems send none).")] = None,
    settle: Annotated[Optional[float], typer.Option(
        "--settle", metavar="SECONDS", help="With --watch: read a trial or shard once its files have "
        "not changed for SECONDS (default 0.5).")] = None,
) -> None:
    """Load sources into the warehouse, idempotently: units already loaded are skipped.

    A bad unit (shard or trial directory) is reported in one line and not written at all;
    every other unit still loads, and the exit code is 1 (0 with --keep-going).

    SIGTERM or Ctrl-C ends the ingest in one line, with exit code 143 or 130: the units
    finished are kept, the one being written is rolled back.

    With --watch it keeps following the folders, as jobs write them, and ends on Ctrl-C or
    SIGTERM in one line (exit 0, or 1 if a unit failed): when the folders stop changing, the
    warehouse holds what a one-shot ingest of them gives.

    Examples:

    \b
      warehouse ingest examples/sample
      warehouse ingest examples/sample --run baseline --label step=100
      warehouse --db team.db ingest examples/sample --keep-going
      warehouse ingest --watch jobs/
    """
    if not watch and (running or poll is not None or settle is not None):
        given = "--running" if running else "--poll" if poll is not None else "--settle"
        raise WarehouseError(f"{given} goes with --watch")
    if watch:
        _watch(ctx, sources, run=run, label=label, keep_going=keep_going, running=running, poll=poll,
               settle=settle)
        return
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


def _watch(ctx: typer.Context, sources: list[str], *, run, label, keep_going: bool, running: bool,
           poll: float | None, settle: float | None) -> None:
    """`ingest --watch`: a line per event to a pipe, one redrawn line on a terminal (failures
    above it); Ctrl-C or SIGTERM ends it with one line of totals."""
    what = sources[0] if len(sources) == 1 else f"{len(sources)} sources"
    line = WatchLine(sys.stderr, what) if sys.stderr.isatty() else None
    totals = None  # as the last event left them

    def on_event(event) -> None:
        nonlocal totals
        totals = event.totals
        if line is None:
            echo_err(event.text if event.kind == "watching" else f"{event.kind}: {event.text}")
            return
        if event.kind in ("failed", "waiting", "reconnected"):
            line.clear()
            echo_err(f"{'Error' if event.kind == 'failed' else event.kind}: {event.text}")
        line.update(totals, event.text if event.kind == "loaded" else None)

    wh = state(ctx).warehouse
    try:
        try:
            wh.watch(sources, run=run, label=parse_labels(label or ()), keep_going=keep_going, running=running,
                     poll=poll, settle=settle, on_event=on_event)
        except (KeyboardInterrupt, Exception) as exc:
            if interruption(exc) is None:
                raise
    finally:
        if line is not None:
            line.close()
    ignore_stops()
    loaded, failed, skipped = (totals.loaded, totals.failed, totals.skipped) if totals else (0, 0, 0)
    echo_err(f"Stopped: {loaded} units loaded, {failed} failed, {skipped} unchanged; the unit being written, "
             f"if any, was rolled back.")
    if failed and not keep_going:
        raise typer.Exit(1)
