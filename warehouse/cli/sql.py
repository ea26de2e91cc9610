"""`warehouse sql QUERY`: ad-hoc SQL, read-only on both backends (see warehouse.readonly)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from warehouse.arguments import MAX_INT
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import Format, FormatOption, WideOption, echo_err, write_rows
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.readonly import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, check_timeout, too_long

DEFAULT_MAX_CELL_BYTES = 10_000_000
# The largest row read, all its values together (a table's values up to TABLE_READ_FACTOR times
# the cell limit each).
DEFAULT_MAX_ROW_BYTES = 200_000_000
# A table shows a value over the cell limit cut; values up to this many times the limit are read
# to be cut (a larger one is refused by the database as it is built or read, which bounds memory).
TABLE_READ_FACTOR = 10
# The watchdog's margin past --timeout: the database's own limits report first, with a clean
# message; the watchdog only ends a process stuck where no limit is looked at (one long step in
# the database, a stalled pipe).
_WATCHDOG_GRACE = 0.5


class _PairOptionCommand(TyperCommand):
    """Typer cannot declare an option that takes two values and repeats (`-p NAME VALUE`,
    any number of times); the underlying click option can, so set its arity here."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.name == "param":
                param.nargs = 2


def _timeout(value: float) -> float:
    try:
        check_timeout(value)
    except WarehouseError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _watchdog(timeout: float) -> None:
    """End the whole process once `timeout` (and a margin) has passed, whatever it is doing."""
    message = printable(f"Error: {too_long(timeout)}\n")

    def stop() -> None:
        os.write(2, message.encode())
        os._exit(1)

    timer = threading.Timer(timeout + _WATCHDOG_GRACE, stop)
    timer.daemon = True
    timer.start()


@app.command("sql", cls=_PairOptionCommand)
def sql(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="One SQL statement, or - to read it from stdin.")],
    param: Annotated[Optional[list[str]], typer.Option(
        "-p", "--param", parser=lambda pair: pair,
        help="Bind :NAME in the SQL to VALUE (text; CAST it in SQL for numbers). Repeatable.")] = None,
    fmt: FormatOption = Format.table,
    wide: WideOption = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", callback=_timeout,
        help="Stop after this many seconds (the whole command, printing included).")] = DEFAULT_TIMEOUT,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, max=MAX_INT, help="Print at most this many rows.")] = DEFAULT_MAX_ROWS,
    max_cell_bytes: Annotated[int, typer.Option(
        "--max-cell-bytes", min=1, max=MAX_INT,
        help="Largest value printed: a table cuts a larger one, CSV and JSON refuse it.")] = DEFAULT_MAX_CELL_BYTES,
    max_row_bytes: Annotated[int, typer.Option(
        "--max-row-bytes", min=1, max=MAX_INT,
        help="Largest row read (its values together): a larger one is refused.")] = DEFAULT_MAX_ROW_BYTES,
) -> None:
    """Run one read-only SQL query and print its rows.

    One query only (SELECT, WITH, VALUES, TABLE, or EXPLAIN of one), as the database's own
    grammar reads it; anything else, a second statement, and functions that reach beyond the
    warehouse's tables are refused before anything runs. Writes are refused by the connection
    itself as well.

    Examples:

    \b
      warehouse sql "SELECT trial_name, reward FROM trials ORDER BY reward DESC"
      warehouse sql "SELECT * FROM runs WHERE name = :n" -p n sample-9f8c2915
      echo "SELECT name FROM tasks" | warehouse sql - --format csv
    """
    text = sys.stdin.read() if query == "-" else query
    _watchdog(timeout)
    read_limit = min(max_cell_bytes * (TABLE_READ_FACTOR if fmt is Format.table else 1), MAX_INT)
    with state(ctx).warehouse.sql_stream(text, dict(param or []), timeout=timeout, max_rows=max_rows,
                                         max_value_bytes=read_limit, max_row_bytes=max_row_bytes) as rows:
        write_rows(rows.columns, rows, fmt, max_cell_bytes=max_cell_bytes, wide=wide)
        sys.stdout.flush()  # inside the time limit
    if rows.truncated:
        echo_err(f"(stopped at {max_rows} rows: there are more; raise --max-rows or narrow the query)", wrap=True)
