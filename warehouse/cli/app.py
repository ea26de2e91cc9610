"""The `warehouse` command: a thin layer over the library. Data goes to stdout; progress,
logs and errors to stderr. Exit 0 on success, 1 on a runtime or data error (one line, no
traceback), 2 on a usage error.

A command's module is imported only when that command runs (or its own --help is asked for):
`warehouse --help` imports none, and `warehouse query runs` does not pay for the ingest
pipeline, pyarrow or the ORM models (tests/test_startup.py checks what each imports)."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from warehouse.cli import shared
from warehouse.db import ENV_VAR
from warehouse.display import printable
from warehouse.errors import WarehouseError, database_error

# Each top-level command: the module that registers it on `app` when imported, and the short
# help `warehouse --help` shows without importing it (tests/test_startup.py checks that these
# match the commands' own). A new command module gets a line here.
COMMANDS = {
    "ingest": ("warehouse.cli.ingest", "Load sources into the warehouse, idempotently: units already loaded are skipped."),
    "search": ("warehouse.cli.search", "Find TEXT in turn texts, verifier output and exception messages, with a snippet."),
    "show": ("warehouse.cli.show", "Show one trial: run, task, agent, model, reward, status, an episode's turns, verifier output."),
    "sql": ("warehouse.cli.sql", "Run one read-only SQL query and print its rows."),
    "db": ("warehouse.cli.db", "Create, upgrade and check the warehouse schema."),
    "query": ("warehouse.cli.query", "Canned cross-run queries: `warehouse query list` shows them."),
    "runs": ("warehouse.cli.runs", "The runs: key, name, labels, trials, pass rate, sources."),
    "sources": ("warehouse.cli.ledger", "The ledger by source: units loaded, rows, episodes new and duplicate, trials, runs, first and last load, rows rejected, conflicts."),
    "loads": ("warehouse.cli.ledger", "The ledger by unit: each load (a shard, a trial folder) with its content hash, rows, trials, episodes, turns, bytes, rejections, conflicts, start, duration, and the code that loaded it."),
    "index": ("warehouse.cli.search", "The optional trigram index that speeds up `warehouse search`."),
    "export": ("warehouse.cli.export", "Write warehouse contents out as Parquet."),
    "lake": ("warehouse.cli.lake", "Keep a lake of Parquet files current with the warehouse."),
    "serve": ("warehouse.cli.serve", "Browse the warehouse in a web browser: runs, trials, trajectories, diffs, queries, search."),
    "report": ("warehouse.cli.report", "Write an HTML report of the sweep: runs, pass rate with its interval, solve matrix, failures and lengths."),
}


class _Group(TyperGroup):
    """The root group. Its commands are loaded on demand (see COMMANDS); each gets the shared --db
    option and help rendering (cli/shared.py) as it is reached; and database errors a user can
    act on (a server that does not answer, SQL that does not parse, a file that is not a
    database) become WarehouseErrors, which main() prints as one line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shared.prepare(self, self._db_option(), root=True)

    def _db_option(self):
        return next(p for p in self.params if p.name == "db")

    def list_commands(self, ctx):
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            importlib.import_module(COMMANDS[name][0])  # registers the command on `app`
            self.commands[name] = typer.main.get_group(app).commands[name]
        return super().get_command(ctx, name)

    def resolve_command(self, ctx, args):
        if args and args[0] not in COMMANDS:
            # Not one of ours: its usage error suggests the nearest names, drawn from every command.
            for name in COMMANDS:
                self.get_command(ctx, name)
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            shared.prepare(command, self._db_option())
        return name, command, rest

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, COMMANDS[name][1] if name in COMMANDS else self.commands[name].get_short_help_str())
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # Only a command that imported SQLAlchemy can raise its errors.
            exc_module = sys.modules.get("sqlalchemy.exc")
            if exc_module is not None and isinstance(exc, exc_module.DBAPIError):
                raise database_error(exc) from None
            raise


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # -h as well, as gh and git's subcommands take it (every command's context inherits it).
    context_settings={"help_option_names": ["-h", "--help"]},
    # Plain help, as Click writes it: Rich would cost its import on every --help.
    rich_markup_mode=None,
    help="""The trajectory warehouse: agent trajectories from Harbor runs and Hub datasets, in SQL.

    Examples:

    \b
      warehouse ingest examples/sample && warehouse query runs
      warehouse query pass-rate --by model --db team.db
      warehouse sql "SELECT count(*) AS trials FROM trials"
    """,
)


def _version(value: bool) -> None:
    if value:
        from warehouse.version import __version__

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
    from warehouse.cli.context import State  # SQLAlchemy: not for `--help`

    # By name: Typer may bring a Click of its own, whose ParameterSource is another class.
    typed = getattr(ctx.get_parameter_source("db"), "name", None) == "COMMANDLINE"
    ctx.obj = State(db=db, db_typed=typed)


def _register() -> None:
    """Every command's module imported, for what walks the whole command tree (the tests); a
    run of one command imports only its own (_Group.get_command)."""
    for module, _ in COMMANDS.values():
        importlib.import_module(module)


def main() -> None:
    try:
        app()
    except WarehouseError as exc:
        # Made visible: a message may quote a file name or stored text holding escape sequences.
        print(printable(f"Error: {exc}"), file=sys.stderr)
        sys.exit(1)
