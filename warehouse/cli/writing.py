"""What the commands that change a warehouse share: one write transaction under the ingest's
write lock, and asking before anything is deleted."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from warehouse.cli.context import state
from warehouse.cli.output import wrapped
from warehouse.errors import WarehouseError

if TYPE_CHECKING:
    from sqlalchemy import Connection


@contextmanager
def write_transaction(ctx: typer.Context) -> Iterator[Connection]:
    """One write transaction under the ingest write lock (so it never meets an ingest's)."""
    from ingest.write.bulk import lock_for_writing
    from warehouse.db.session import write_transaction as transaction

    with transaction(state(ctx).write_engine()) as conn:
        lock_for_writing(conn)
        yield conn


def confirm(what: str, yes: bool, *, question: str | None = None, cancelled: str | None = None) -> None:
    """Go ahead with `what` ("delete …", "downgrading … would delete …") if --yes was given or
    the person at the terminal answers `question` (default: `what`?) yes; else a one-line
    refusal naming it, or the `cancelled` action (default: `what`'s first word), nothing done."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise WarehouseError(f"{what}: nothing done (pass --yes to go ahead)")
    if not typer.confirm(wrapped(question or f"{what}?"), default=False, err=True):
        raise WarehouseError(f"{cancelled or what.split()[0]} cancelled: nothing done")
