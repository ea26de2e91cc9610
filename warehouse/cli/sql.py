"""`warehouse sql QUERY`: ad-hoc SQL, read-only on both backends (see warehouse.readonly)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import Format, FormatOption, write_rows
from warehouse.readonly import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, run_readonly


class _PairOptionCommand(TyperCommand):
    """Typer cannot declare an option that takes two values and repeats (`-p NAME VALUE`,
    any number of times); the underlying click option can, so set its arity here."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.name == "param":
                param.nargs = 2


@app.command("sql", cls=_PairOptionCommand)
def sql(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="One SQL statement, or - to read it from stdin.")],
    param: Annotated[Optional[list[str]], typer.Option(
        "-p", "--param", metavar="NAME VALUE", parser=lambda pair: pair,
        help="Bind :NAME in the SQL to VALUE (text; CAST it in SQL for numbers). Repeatable.")] = None,
    fmt: FormatOption = Format.table,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop the query after this many seconds.")] = DEFAULT_TIMEOUT,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Print at most this many rows.")] = DEFAULT_MAX_ROWS,
) -> None:
    # Typer keeps a docstring's line breaks in --help, so each paragraph is one line.
    """Run one read-only SQL statement and print its rows.

    Writes of any kind (INSERT, UPDATE, DELETE, DDL, ATTACH, PRAGMAs that set something, writes inside WITH) are refused by the database connection itself; text holding more than one statement is refused before anything runs."""
    text = sys.stdin.read() if query == "-" else query
    engine = state(ctx).read_engine()
    result = run_readonly(engine.url, text, dict(param or []), timeout=timeout, max_rows=max_rows)
    write_rows(result.columns, result.rows, fmt)
    if result.truncated:
        typer.echo(f"(stopped at {max_rows} rows: there are more; raise --max-rows or narrow the query)", err=True)
