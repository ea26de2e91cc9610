"""`warehouse ingest SOURCE…`"""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from ingest.pipeline import Progress, ingest as run_ingest
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import echo_err
from warehouse.errors import interruption
from warehouse.runs import parse_labels

stderr = Console(stderr=True)


class BarProgress(Progress):
    """Rows and MB/s of the unit being loaded, on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self._bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
            TextColumn("{task.fields[mbps]:.1f} MB/s"), TimeElapsedColumn(),
            console=stderr, transient=True, disable=not sys.stderr.isatty(),
        )
        self._task = None

    def start(self, label: str, total_rows: int) -> None:
        self._bar.start()
        self._t0, self._bytes = time.perf_counter(), 0
        self._task = self._bar.add_task(label, total=total_rows, mbps=0.0)

    def advance(self, rows: int, nbytes: int) -> None:
        self._bytes += nbytes
        mbps = self._bytes / 1e6 / max(time.perf_counter() - self._t0, 1e-6)
        self._bar.update(self._task, advance=rows, mbps=mbps)

    def finish(self) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        self._bar.stop()


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where the ingest is, as Ctrl-C's KeyboardInterrupt is: the unit being
    written rolls back on the way out (and psycopg cancels a statement in flight, a wait for
    the write lock included, as it does for Ctrl-C)."""

    signum = signal.SIGTERM


def _raise_interrupted(_signum, _frame) -> None:
    raise Interrupted()


@contextmanager
def _sigterm_interrupts():
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command()
def ingest(
    ctx: typer.Context,
    sources: Annotated[list[str], typer.Argument(
        help="Parquet file, Hub-snapshot folder (README.md + data/*.parquet), Hub id org/name[@rev], "
        "or Harbor trace directory (trial, job, trace_jobs/, or a root of many).")],
    run: Annotated[Optional[str], typer.Option(
        "--run", help="Name the runs these rows belong to; for rows and trials whose files name no run "
        "(RL rollouts), also their run's key.")] = None,
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="KEY=VALUE label for every run these sources' rows belong to (replacing the "
        "key's value). Repeatable.")] = None,
    keep_going: Annotated[bool, typer.Option(
        "--keep-going", "-k", help="Reject bad rows (the rest of their unit still loads) and exit 0 "
        "even when units failed; failures are still reported and counted.")] = False,
) -> None:
    """Load sources into the warehouse, idempotently: units already loaded are skipped.

    A bad unit (shard or trial directory) is reported in one line and not written at all;
    every other unit still loads, and the exit code is 1 (0 with --keep-going).

    SIGTERM or Ctrl-C ends the ingest in one line, with exit code 143 or 130: the units
    finished are kept, the one being written is rolled back."""
    # Arrow's default allocator (mimalloc) keeps freed pages; streaming shard after shard, the
    # system allocator returns them, which keeps this process's memory flat. Arrow reads this
    # when it first allocates (it is imported only once a shard needs reading).
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        with _sigterm_interrupts():
            labels = parse_labels(label or ())  # a bad label before anything is written
            engine = state(ctx).write_engine(create=True)
            summary = run_ingest(engine, sources, run=run, labels=labels, keep_going=keep_going,
                                 progress=BarProgress(),
                                 warn=lambda msg: echo_err(f"Error: {msg}"))
    except (KeyboardInterrupt, Exception) as exc:  # (by now the reader process is stopped and reaped)
        stop = interruption(exc)
        if stop is None:
            raise
        signum = getattr(stop, "signum", signal.SIGINT)
        echo_err(f"Error: interrupted ({signum.name}): finished units kept, the current one rolled back")
        raise typer.Exit(128 + signum) from None
    for note in summary.notes[:50]:
        echo_err(f"warning: {note}")
    if len(summary.notes) > 50:
        typer.echo(f"warning: … and {len(summary.notes) - 50} more (see the conflicts table)", err=True)
    for line in summary.lines():
        echo_err(line)
    if summary.errors and not keep_going:
        raise typer.Exit(1)
