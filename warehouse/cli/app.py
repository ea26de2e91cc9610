"""The `warehouse` command: a thin layer over the library. Data goes to stdout; progress,
logs and errors to stderr. Exit 0 on success, 1 on a runtime or data error (one line, no
traceback), 2 on a usage error."""

from __future__ import annotations

from typing import Annotated, Optional

import sys

import typer
from sqlalchemy.exc import DBAPIError
from typer.core import TyperGroup

from warehouse import __version__
from warehouse.cli import db as db_cli
from warehouse.cli.context import State
from warehouse.db.engine import ENV_VAR
from warehouse.display import printable
from warehouse.errors import WarehouseError, first_line


class _Group(TyperGroup):
    """Database errors a user can act on (a server that does not answer, SQL that does not
    parse, a file that is not a database) become WarehouseErrors, which main() prints as one
    line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DBAPIError as exc:
            raise WarehouseError(f"database error: {first_line(exc.orig or exc)}") from None


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="The trajectory warehouse: agent trajectories from Harbor runs and Hub datasets, in SQL.",
)
app.add_typer(db_cli.app, name="db")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"warehouse {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    db: Annotated[
        Optional[str],
        typer.Option(
            "--db",
            envvar=ENV_VAR,
            help="SQLAlchemy URL (sqlite:///…, postgresql+psycopg://…) or a SQLite file path. "
            "Default: ./warehouse.db",
            show_envvar=True,
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = State(db=db)


def _register() -> None:
    # Command modules are imported here so `app` exists before they attach to it.
    from warehouse.cli import ingest as _ingest  # noqa: F401
    from warehouse.cli import query as _query  # noqa: F401
    from warehouse.cli import runs as _runs  # noqa: F401
    from warehouse.cli import search as _search  # noqa: F401
    from warehouse.cli import show as _show  # noqa: F401
    from warehouse.cli import sql as _sql  # noqa: F401
    from warehouse.cli import export as _export  # noqa: F401
    from warehouse.cli import report as _report  # noqa: F401


def main() -> None:
    _register()
    try:
        app()
    except WarehouseError as exc:
        # Made visible: a message may quote a file name or stored text holding escape sequences.
        print(printable(f"Error: {exc}"), file=sys.stderr)
        sys.exit(1)
