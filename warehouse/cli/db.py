"""`warehouse db …`: the schema's version."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from warehouse.cli.app import app as root
from warehouse.cli.context import state
from warehouse.cli.output import echo_err
from warehouse.cli.writing import confirm
from warehouse.db import integrity, schema
from warehouse.db.engine import not_a_warehouse, redact, refuse_missing
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
def upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="The revision to reach: head is the newest.")] = "head",
) -> None:
    """Bring the schema up to REVISION (default: the newest).

    A missing SQLite file is created.

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
        echo_err(f"note: {note}", wrap=True)


# `-1` (one step down) is a revision, not an unknown option.
@app.command(context_settings={"ignore_unknown_options": True})
def downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(
        help="The revision to go down to: -1 is one step down, base removes every table.")],
    yes: Annotated[bool, typer.Option("--yes", help="Drop tables and columns that hold data without asking.")] = False,
) -> None:
    """Take the schema down to REVISION.

    A downgrade that would delete data says how much, and asks on a terminal; without one it
    refuses unless --yes.

    Examples:

    \b
      warehouse db downgrade -1
      warehouse db downgrade 0014
    """
    st = state(ctx)
    where = redact(st.url)
    refuse_missing(st.url)
    _ours(st)  # a database of another program's tables: Alembic would add its version table
    losses = schema.downgrade_losses(st.engine, revision)
    if losses:
        what = f"downgrading {where} to {revision} would delete {losses}"
        confirm(what, yes, question=f"{what}. Go ahead?", cancelled="downgrade")
    schema.downgrade(st.engine, revision)
    typer.echo(f"{where}: now at {schema.current_revision(st.engine) or 'base'}", err=True)


@app.command()
def current(ctx: typer.Context) -> None:
    """Print the schema revision the database is at ("none" for an empty database).

    A database that holds tables but no schema version (not a warehouse) is refused, as every
    other command refuses it.

    Examples:

    \b
      warehouse db current
    """
    engine = state(ctx).read_engine(check_schema=False)
    current = schema.current_revision(engine)
    if current is None and not schema.is_empty(engine):
        raise not_a_warehouse(redact(engine.url))
    typer.echo(current or "none")


@app.command()
def check(
    ctx: typer.Context,
    against: Annotated[Optional[str], typer.Option(
        "--against",
        help="Also compare every table with the warehouse OTHER (a URL or a SQLite file): row counts and checksums.")
    ] = None,
) -> None:
    """Check the schema's revision, every reference, and that the stored conversations hold together.

    Exit 0 if the database is at the revision this tool needs, every `…_id` names a row that
    exists and every episode reads back its turns; 1 with what is wrong if not.

    Reads only: a few aggregate queries, linear in the rows. With
    --against, every table of both is read once more, to compare them.

    Examples:

    \b
      warehouse db check
      warehouse db check || warehouse db upgrade
      warehouse db check --against team.db
    """
    st = state(ctx)
    engine = st.read_engine()  # checks the schema
    with read_transaction(engine) as conn:
        found = integrity.problems(conn)
    if found:
        for line in found:
            typer.echo(f"Error: {redact(st.url)}: {line}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{redact(st.url)}: at {schema.head_revision()} (current); references kept; conversations consistent", err=True)
    if against is not None:
        from warehouse.api import Warehouse
        from warehouse.db.copy import compare, snapshot, table_digests

        other = Warehouse(against)
        with snapshot(engine) as conn:
            ours = table_digests(conn)
        with snapshot(other.read_engine()) as conn:
            theirs = table_digests(conn)
        differ = compare(ours, theirs)
        for line in differ:
            typer.echo(f"Error: {redact(st.url)} and {other.name} differ: {line}", err=True)
        if differ:
            raise typer.Exit(1)
        typer.echo(f"{redact(st.url)} and {other.name}: every table the same "
                   f"({sum(d.rows for d in ours.values()):,} rows in {len(ours)} tables)", err=True)


@app.command("copy")
def copy_command(
    ctx: typer.Context,
    target: Annotated[list[str], typer.Argument(
        metavar="[SOURCE] TARGET", show_default=False,
        help="The warehouse to copy, a URL or a SQLite file (without it, --db's); then an empty "
             "database to copy it to, a URL or a SQLite file (created if missing).")],
) -> None:
    """Copy a warehouse to another database, SQLite or PostgreSQL, every table exactly.

    SOURCE is the warehouse named, or without it the one --db (or WAREHOUSE_DB) names, as for
    every other command. TARGET must be empty (or an empty warehouse at SOURCE's revision).
    SOURCE is read in one snapshot and never written; TARGET is written in one transaction,
    checked table by table (rows and checksums) before it commits: a copy that fails leaves no
    row in TARGET. Ids, provenance, conflicts, labels and summaries come across as they are. The
    search index is not copied: `warehouse index build` on TARGET.

    Examples:

    \b
      warehouse db copy warehouse.db copy.db
      warehouse --db team.db db copy team-copy.db
      warehouse db copy warehouse.db b.db && warehouse db check --against b.db
    """
    from warehouse.api import Warehouse
    from warehouse.db.copy import copy

    st = state(ctx)
    if len(target) > 2:
        raise typer.BadParameter(f"takes [SOURCE] TARGET, not {len(target)} databases", param_hint="'[SOURCE] TARGET'")
    *named, to = target  # (one argument or two: the last is the target)
    source_wh, target_wh = (Warehouse(named[0]) if named else st.warehouse), Warehouse(to)
    if named and st.db_typed and source_wh.url != st.url:
        raise WarehouseError(f"--db names {st.warehouse.name} and SOURCE {source_wh.name}: give the warehouse "
                             f"to copy once")
    source_wh.read_engine()  # a missing SOURCE, or one at another revision: one line, before TARGET is touched
    shown = sys.stderr.isatty()

    def progress(table: str, done: int, total: int) -> None:
        if shown:
            print(f"\rcopying {table}: {done:,} of {total:,} rows\033[K", end="", file=sys.stderr, flush=True)

    digests = copy(source_wh.url, target_wh.url, progress=progress)
    if shown:
        print("\r\033[K", end="", file=sys.stderr)
    typer.echo(f"copied {source_wh.name} to {target_wh.name}: {sum(d.rows for d in digests.values()):,} rows "
               f"in {len(digests)} tables, each the same on both (rows and checksums)", err=True)


@app.command("archive")
def archive_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The SQLite file to write; refused if it exists, unless --force.")],
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
) -> None:
    """Freeze the warehouse for the archive: one compact SQLite file, its checksum beside it.

    OUT is in rollback-journal mode, so every read command answers from it on a read-only
    mount or under another account with nothing written; OUT.sha256 holds its SHA-256
    (`sha256sum -c OUT.sha256` checks it). From PostgreSQL the warehouse is copied as `db copy`
    copies it. Nothing is written to the warehouse itself.

    Examples:

    \b
      warehouse db archive sweep-2026-12.db
      warehouse db archive sweep.db --force && sha256sum -c sweep.db.sha256
    """
    from warehouse.db.archive import archive

    st = state(ctx)
    digest = archive(st.url, out, force=force)
    typer.echo(f"archived {redact(st.url)} to {out} (sha256 {digest[:16]}…, in {out}.sha256)", err=True)
