"""Output formats, declared once: every command that prints rows goes through write_rows."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import IO, Annotated, Any

import typer


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


# The --format option of every command that prints rows.
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(_jsonable(value))


def write_rows(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fmt: Format = Format.table,
    out: IO[str] | None = None,
    *,
    title: str | None = None,
) -> None:
    out = out or sys.stdout
    if fmt is Format.json:
        # Streamed: one object per row as it comes, so a large result never sits in memory.
        n = 0
        for n, row in enumerate(rows, 1):
            out.write("[\n " if n == 1 else ",\n ")
            out.write(json.dumps(dict(zip(columns, map(_jsonable, row))), ensure_ascii=False))
        out.write("\n]\n" if n else "[]\n")
    elif fmt is Format.jsonl:
        for row in rows:
            out.write(json.dumps(dict(zip(columns, map(_jsonable, row))), ensure_ascii=False) + "\n")
    elif fmt is Format.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if v is None else _jsonable(v) for v in row])
    else:
        _write_table(columns, rows, out, title)


def _write_table(columns, rows, out, title) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        # Text(), not a str: stored data such as "arr[i]" or "[bold]" must print as it is, not
        # be read as rich markup.
        table.add_row(*(Text(_cell(v)) for v in row))
    Console(file=out, width=None if out.isatty() else 200).print(table)
