"""`warehouse db …`: the schema's version."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from warehouse.cli.app import app as root
from warehouse.cli.context import state
from warehouse.db import integrity, schema
from warehouse.db.engine import redact
from warehouse.db.session import read_transaction
from warehouse.errors import SchemaError, WarehouseError
from warehouse.readonly import reader_role_note

app = typer.Typer(no_args_is_help=True, help="""Create, upgrade and check the warehouse schema.

    Examples:

    \b
      warehouse db upgrade
      warehouse db check
      warehouse --db team.db db current
    """)
root.add_typer(app, name="db")


def _ours(st) -> str | None:
    """The database's schema revision; a database holding tables but none is refused."""
    current = schema.current_revision(st.engine)
    if current is None and not schema.is_empty(st.engine):
        raise SchemaError(f"{redact(st.url)} holds tables but no warehouse schema version: refusing to touch it")
    return current


@app.command()
def upgrade(ctx: typer.Context, revision: str = typer.Argument("head")) -> None:
    """Bring the schema up to REVISION (default: the newest), creating a missing SQLite file.

    Examples:

    \b
      warehouse db upgrade
      warehouse --db new.db db upgrade
    """
    st = state(ctx)
    before = _ours(st)
    schema.upgrade(st.engine, revision)
    after = schema.current_revision(st.engine)
    msg = "already at" if before == after else f"upgraded {before or 'empty'} ->"
    typer.echo(f"{redact(st.url)}: {msg} {after}", err=True)
    if note := reader_role_note(st.engine):
        typer.echo(f"note: {note}", err=True)


# `-1` (one step down) is a revision, not an unknown option.
@app.command(context_settings={"ignore_unknown_options": True})
def downgrade(
    ctx: typer.Context,
    revision: str,
    yes: Annotated[bool, typer.Option("--yes", help="Drop tables and columns that hold data without asking.")] = False,
) -> None:
    """Take the schema down to REVISION (`base` removes every table; `-1` is one step down).

    A downgrade that would delete data says how much, and asks on a terminal; without one it
    refuses unless --yes.

    Examples:

    \b
      warehouse db downgrade -1 --yes
      warehouse db downgrade base --yes
    """
    st = state(ctx)
    where = redact(st.url)
    _ours(st)  # a database of another program's tables: Alembic would add its version table
    losses = schema.downgrade_losses(st.engine, revision)
    if losses and not yes:
        what = f"downgrading {where} to {revision} would delete {losses}"
        if not sys.stdin.isatty():
            raise WarehouseError(f"{what}: nothing done (pass --yes to go ahead)")
        if not typer.confirm(f"{what}. Go ahead?", default=False, err=True):
            raise WarehouseError("downgrade cancelled: nothing done")
    schema.downgrade(st.engine, revision)
    typer.echo(f"{where}: now at {schema.current_revision(st.engine) or 'base'}", err=True)


@app.command()
def current(ctx: typer.Context) -> None:
    """Print the schema revision the database is at ("none" for an empty database).

    Examples:

    \b
      warehouse db current
    """
    typer.echo(schema.current_revision(state(ctx).read_engine(check_schema=False)) or "none")


@app.command()
def check(ctx: typer.Context) -> None:
    """Exit 0 if the database is at the revision this tool needs and its stored conversations
    hold together (every episode reads back its turns); 1 with what is wrong if not.

    Reads only: a few aggregate queries over the conversations, linear in the rows.

    Examples:

    \b
      warehouse db check
      warehouse db check || warehouse db upgrade
    """
    st = state(ctx)
    engine = st.read_engine()  # checks the schema
    with read_transaction(engine) as conn:
        found = integrity.problems(conn)
    if found:
        for line in found:
            typer.echo(f"Error: {redact(st.url)}: {line}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{redact(st.url)}: at {schema.head_revision()} (current); conversations consistent", err=True)
