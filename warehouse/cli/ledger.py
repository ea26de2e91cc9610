"""`warehouse sources` and `warehouse loads`: the load ledger, as the canned queries of the same
names (their options, filters and formats), at the top level where a user looks for them; and
`warehouse sources delete`, which takes a source back."""

from __future__ import annotations

from typing import Annotated

import typer

from warehouse.cli.app import app
from warehouse.cli.output import echo_err
from warehouse.cli.query import register
from warehouse.cli.writing import confirm, write_transaction
from warehouse.queries import QUERIES

sources_app = typer.Typer()
app.add_typer(sources_app, name="sources")
register(QUERIES["sources"], sources_app, callback=True,
         examples=("warehouse sources", "warehouse sources --format json", "warehouse sources --run 9f8c2915",
                   "warehouse sources delete sample"))
register(QUERIES["loads"], app, examples=("warehouse loads", "warehouse loads sample",
                                          "warehouse loads sample --format csv"))


@sources_app.command("delete")
def delete(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="The source: its name or URI (`warehouse sources` lists them).")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete without asking.")] = False,
) -> None:
    """Take a source back: what only it brought goes, in one transaction.

    Its units go, with the trials only it holds (their episodes and turns) and the runs left
    with no trial; a trial other sources hold too stays as ingesting them alone would leave it.

    Says what will go and asks on a terminal; without one it refuses unless --yes. Refused,
    with nothing changed, where the warehouse cannot tell what a shared trial is without the
    source (a trial folder another source holds in another version, or a value only the
    source gave a trace directory's trial).

    Examples:

    \b
      warehouse sources delete sample
    """
    from ingest.take_back import delete_source, source_removal
    from warehouse.errors import WarehouseError

    with write_transaction(ctx) as conn:  # counted under the lock, asked after it is let go
        source_id, name = _source(conn, source)
        removal = source_removal(conn, source_id)
    if removal.refused:
        raise WarehouseError(f"source {name!r} cannot be taken back: {removal.refused}; nothing done")
    what = _removal_text(name, removal)
    confirm(f"delete {what}", yes)
    with write_transaction(ctx) as conn:
        source_id, name = _source(conn, source)
        done = delete_source(conn, source_id)
    echo_err(f"deleted {_removal_text(name, done)}")


def _source(conn, spec: str) -> tuple[int, str]:
    from sqlalchemy import text

    from warehouse.errors import WarehouseError

    found = conn.execute(text("SELECT id, name FROM sources WHERE name = :s OR uri = :s ORDER BY id"), {"s": spec}).all()
    if not found:
        raise WarehouseError(f"no source {spec!r} (`warehouse sources` lists them)")
    if len(found) > 1:
        raise WarehouseError(f"{len(found)} sources are named {spec!r}: give its URI (`warehouse sources --wide`)")
    return found[0][0], found[0][1]


def _removal_text(name: str, removal) -> str:
    def n(count: int, word: str) -> str:
        return f"{count:,} {word}{'s' * (count != 1)}"

    parts = [f"source {name!r}: {n(removal.units, 'unit')}, {n(removal.trials, 'trial')} only it holds"]
    if removal.shared:
        parts.append(f"{n(removal.shared, 'trial')} shared with other sources kept as they give them")
    if removal.runs:
        parts.append(f"{n(removal.runs, 'run')} left with no trial")
    return "; ".join(parts)
