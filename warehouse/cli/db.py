"""`warehouse db …`: the schema's version."""

from __future__ import annotations

import typer

from warehouse.cli.context import state
from warehouse.db import schema
from warehouse.db.engine import redact
from warehouse.errors import SchemaError
from warehouse.readonly import reader_role_note

app = typer.Typer(no_args_is_help=True, help="Create, upgrade and check the warehouse schema.")


@app.command()
def upgrade(ctx: typer.Context, revision: str = typer.Argument("head")) -> None:
    """Bring the schema up to REVISION (default: the newest)."""
    st = state(ctx)
    before = schema.current_revision(st.engine)
    if before is None and not schema.is_empty(st.engine):
        raise SchemaError(f"{redact(st.url)} holds tables but no warehouse schema version: refusing to touch it")
    schema.upgrade(st.engine, revision)
    after = schema.current_revision(st.engine)
    msg = "already at" if before == after else f"upgraded {before or 'empty'} ->"
    typer.echo(f"{redact(st.url)}: {msg} {after}", err=True)
    if note := reader_role_note(st.engine):
        typer.echo(f"note: {note}", err=True)


@app.command()
def downgrade(ctx: typer.Context, revision: str) -> None:
    """Take the schema down to REVISION (`base` removes every table)."""
    st = state(ctx)
    schema.downgrade(st.engine, revision)
    typer.echo(f"{redact(st.url)}: now at {schema.current_revision(st.engine) or 'base'}", err=True)


@app.command()
def current(ctx: typer.Context) -> None:
    """Print the schema revision the database is at."""
    typer.echo(schema.current_revision(state(ctx).engine) or "none")


@app.command()
def check(ctx: typer.Context) -> None:
    """Exit 0 if the database is at the revision this tool needs, 1 with the fix if not."""
    st = state(ctx)
    schema.ensure_current(st.engine)
    typer.echo(f"{redact(st.url)}: at {schema.head_revision()} (current)", err=True)
