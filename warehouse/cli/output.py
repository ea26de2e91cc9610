"""Output formats, declared once: every command that prints rows goes through write_rows.

Rows are written as they come, in every format, so a result never has to sit in memory whole.
What reaches a terminal has its control characters made visible (warehouse.display.printable):
a table always, being for reading; CSV and JSON only when stdout is a terminal, so that to a pipe
or a file they stay exact.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from itertools import chain, islice
from typing import IO, Annotated, Any

import typer

from warehouse.display import printable
from warehouse.errors import WarehouseError


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


# The --format option of every command that prints rows.
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]

# A table's column widths come from its first rows; later rows fold to the same widths.
_SAMPLE_ROWS = 100
_PIPE_WIDTH = 200  # a table's width when stdout is not a terminal


def echo_err(message: str) -> None:
    """A line for the terminal on stderr (errors, notes), its control characters made visible:
    a file name or a database's message may hold escape sequences."""
    typer.echo(printable(message), err=True)


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


def _size(value: Any) -> int:
    """A value's size in bytes as stored (UTF-8 for text), for the cell limit."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (bytes, memoryview)):
        return len(value)
    return 0


def write_rows(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fmt: Format = Format.table,
    out: IO[str] | None = None,
    *,
    max_cell_bytes: int | None = None,
) -> None:
    """Write rows as they come. A value over `max_cell_bytes` is cut, with a note, in a table;
    in CSV and JSON, which must be exact, it is refused (WarehouseError naming its row and column)."""
    out = out or sys.stdout
    if max_cell_bytes and fmt is not Format.table:
        # The first row is read before anything is written: a refusal there leaves no output.
        rows = iter(_limited(columns, rows, max_cell_bytes))
        first = next(rows, None)
        rows = chain([first], rows) if first is not None else iter(())
    terminal = out.isatty()
    if fmt is Format.table:
        _write_table(columns, rows, out, terminal, max_cell_bytes)
        return
    show = _visible if terminal else _jsonable
    if fmt is Format.json:
        n = 0
        for n, row in enumerate(rows, 1):
            out.write("[\n " if n == 1 else ",\n ")
            out.write(json.dumps(dict(zip(columns, map(show, row))), ensure_ascii=False))
        out.write("\n]\n" if n else "[]\n")
    elif fmt is Format.jsonl:
        for row in rows:
            out.write(json.dumps(dict(zip(columns, map(show, row))), ensure_ascii=False) + "\n")
    else:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([printable(c) for c in columns] if terminal else columns)
        for row in rows:
            writer.writerow(["" if v is None else show(v) for v in row])


def _visible(value: Any) -> Any:
    value = _jsonable(value)
    return printable(value) if isinstance(value, str) else value


def _limited(columns: Sequence[str], rows: Iterable[Sequence[Any]], limit: int):
    for n, row in enumerate(rows, 1):
        for name, value in zip(columns, row):
            if _size(value) > limit:
                raise WarehouseError(
                    f"row {n}, column {name}: a value of {_size(value):,} bytes is over the cell limit "
                    f"({limit:,} bytes): raise --max-cell-bytes, or cut it in SQL (substr)")
        yield row


def _write_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str], terminal: bool,
                 max_cell_bytes: int | None) -> None:
    """A plain table, streamed: widths from the first rows, every cell folded to its column's
    width, so printing costs time in proportion to what is printed."""
    rows = iter(rows)
    sample = list(islice(rows, _SAMPLE_ROWS))

    def texts(row: Sequence[Any]) -> list[str]:
        cells = []
        for value in row:
            cell = _cell(value)
            if max_cell_bytes and _size(value) > max_cell_bytes:
                cell = f"{cell[:max_cell_bytes]}… (cut: {_size(value):,} bytes, over --max-cell-bytes)"
            cells.append(printable(cell).replace("\t", " "))
        return cells

    header = [printable(c) for c in columns]
    sampled = [texts(r) for r in sample]
    total = (shutil.get_terminal_size().columns if terminal else _PIPE_WIDTH) - 3 * (len(columns) - 1)
    widths = _widths(header, sampled, max(total, len(columns)))
    _write_line(out, header, widths)
    out.write("─┼─".join("─" * w for w in widths) + "\n")
    for cells in sampled:
        _write_line(out, cells, widths)
    for row in rows:
        _write_line(out, texts(row), widths)


def _widths(header: list[str], rows: list[list[str]], total: int) -> list[int]:
    """Each column as wide as its widest line in `rows` (its header at least); the widest ones
    narrowed to one common width until all fit in `total`."""
    widths = [min(total, max([len(h), 1] + [len(line) for r in rows for line in r[i].split("\n")]))
              for i, h in enumerate(header)]
    cap = max(widths, default=1)
    while cap > 1 and sum(min(w, cap) for w in widths) > total:
        cap -= 1
    return [min(w, cap) for w in widths]


def _write_line(out: IO[str], cells: list[str], widths: list[int]) -> None:
    """One row, each cell folded to its width: as many lines as its tallest cell."""
    folded = [_fold(cell, width) for cell, width in zip(cells, widths)]
    for i in range(max(len(f) for f in folded)):
        parts = [(f[i] if i < len(f) else "").ljust(w) for f, w in zip(folded, widths)]
        out.write(" │ ".join(parts).rstrip() + "\n")


def _fold(text: str, width: int) -> list[str]:
    lines = []
    for line in text.split("\n"):
        lines.extend(line[i:i + width] for i in range(0, max(len(line), 1), width))
    return lines
