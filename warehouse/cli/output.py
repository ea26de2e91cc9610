"""Output formats, declared once: every command that prints rows takes FormatOption and
WideOption and goes through write_rows.

Rows are written as they come, in every format, so a result never has to sit in memory whole.
CSV, JSON and JSONL carry every value in full. A table is for reading (see _write_table): it fits
the terminal, shortening long texts in the middle, showing timestamps to the second and floats
to 4 significant digits, NULL as ∅; `--wide` shows every value in full at any width.
What reaches a terminal has its control characters made visible (warehouse.display.printable):
a table always, being for reading; CSV and JSON only when stdout is a terminal, so that to a pipe
or a file they stay exact.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timezone
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


# The output options of every command that prints rows.
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
WideOption = Annotated[bool, typer.Option(
    "--wide", help="A table shows every value in full, however wide (no shortening, no rounding).")]

# A table's column widths come from its first rows; later rows are cut to the same widths.
_SAMPLE_ROWS = 200
_GAP = "  "  # between columns
NULL = "∅"  # a NULL in a table (an empty string stays empty)
# The narrowest a shortened text gets: an 8-character prefix (enough to name a run), "…", the
# last 4 characters.
_MIN_TEXT = 13
# The narrowest a column the command exists for gets (write_rows' keep) before others are left out.
_MIN_KEPT = 30
_TAIL = 4
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}(:?\d{2})?)?")


def echo_err(message: str, *, wrap: bool = False) -> None:
    """A line for the terminal on stderr (errors, notes), its control characters made visible:
    a file name or a database's message may hold escape sequences. `wrap`: a note's or a
    warning's prose, wrapped (see wrapped). Errors and reports are not wrapped: one line each,
    a path or a value in them whole on its line, to copy."""
    message = printable(message)
    typer.echo(wrapped(message) if wrap else message, err=True)


def wrapped(note: str) -> str:
    """A note for stderr, fitted to the reader's width: on a terminal (or with COLUMNS set) a
    long line is wrapped at that width between words, its later lines indented, rather than
    broken mid-word by the terminal; to a pipe or a file it stays one line, as scripts and logs
    read it."""
    width = _note_width()
    if not width or len(note) <= width:
        return note
    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False) for line in note.split("\n"))


def _note_width() -> int | None:
    """The width stderr's notes wrap at: COLUMNS when set, else the terminal's, else none."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stderr.isatty() else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return _iso(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


def _iso(value: date) -> str:
    """A timestamp in ISO 8601, one with a zone in UTC (`2026-06-04T13:19:21.912314+00:00`), as
    both backends give it."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.isoformat()


def _decimal(value: Decimal) -> int | float:
    """PostgreSQL's numeric as SQLite's arithmetic gives it: a whole one (a sum of integers) an
    int, any other a float."""
    if value.is_finite() and value.as_tuple().exponent >= 0:
        return int(value)
    return float(value)


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
    wide: bool = False,
    keep: Sequence[str] = (),
    shorten: Mapping[str, Callable[[str, int], str]] | None = None,
) -> None:
    """Write rows as they come. A value over `max_cell_bytes` is cut, with a note, in a table;
    in CSV and JSON, which must be exact, it is refused (WarehouseError naming its row and column).
    `wide`: a table shows every value in full (CSV and JSON always do). `keep`: the columns a
    table fitting the terminal never leaves out (what the command exists for: a verdict, a
    snippet). `shorten`: how a table cuts a column's texts to a width (a snippet around its hit)."""
    out = out or sys.stdout
    if max_cell_bytes and fmt is not Format.table:
        # The first row is read before anything is written: a refusal there leaves no output.
        rows = iter(_limited(columns, rows, max_cell_bytes))
        first = next(rows, None)
        rows = chain([first], rows) if first is not None else iter(())
    terminal = out.isatty()
    if fmt is Format.table:
        _write_table(columns, rows, out, None if wide else _table_width(out), max_cell_bytes, keep, shorten or {})
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
            writer.writerow(["" if v is None else _text(show(v)) for v in row])


def _text(value: Any) -> Any:
    """A CSV cell: a JSON column's value (PostgreSQL's jsonb arrives parsed) as JSON text."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value


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




# --- tables ------------------------------------------------------------------------------------

def _table_width(out: IO[str]) -> int | None:
    """The width a table must fit: COLUMNS when set, else the terminal's. Written to a pipe or a
    file with COLUMNS unset, a table has no width to fit and is printed as --wide prints it, so
    that `| grep` and `> file` see every value whole."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if out.isatty() else None


def _write_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str], width: int | None,
                 max_cell_bytes: int | None, keep: Sequence[str] = (),
                 shorten: Mapping[str, Callable[[str, int], str]] | None = None) -> None:
    """A plain table, streamed: widths from the first rows, later rows cut to the same widths, so
    printing costs time in proportion to what is printed.

    With a `width` to fit: each row is one line (a newline in a text shows as ↵), texts too
    long for their column are shortened in the middle (`9f8c2915…1cb2`: the prefix stays
    copyable), and a number or timestamp is never cut: its column is as wide as the widest
    one sampled (a wider one later pushes its row out), and columns that do not fit at all are
    left out, the rightmost first but never one of `keep`, named in a note on stderr; a column
    of `shorten` is cut its own way. With no width (--wide, or not a terminal), every value in
    full, a text's lines on lines of their own."""
    fit = width is not None
    rows = iter(rows)

    def cells(row: Sequence[Any]) -> list[tuple[str, bool]]:
        out_cells = []
        for value in row:
            text, atomic = _cell(value, fit)
            if max_cell_bytes and _size(value) > max_cell_bytes:
                text = f"{text[:max_cell_bytes]}… (cut: {_size(value):,} bytes, over --max-cell-bytes)"
            text = printable(text).replace("\t", " ")
            out_cells.append((text.replace("\n", "↵") if fit else text, atomic))
        return out_cells

    header = [printable(c).replace("\n", " ") for c in columns]
    sampled = [cells(r) for r in islice(rows, _SAMPLE_ROWS)]
    if fit:
        shown, widths = _fit(header, sampled, width, {i for i, c in enumerate(columns) if c in keep})
    else:
        shown = list(range(len(header)))
        widths = [max([len(h)] + [len(line) for r in sampled for line in r[i][0].split("\n")])
                  for i, h in enumerate(header)]
    cutters = [(shorten or {}).get(columns[i], _shorten) for i in shown]
    _write_line(out, [_shorten(header[i], w) for i, w in zip(shown, widths)], widths)
    out.write(_GAP.join("─" * w for w in widths) + "\n")
    for row in chain(sampled, map(cells, rows)):
        texts = [row[i][0] if row[i][1] or not fit else cut(row[i][0], w)
                 for i, w, cut in zip(shown, widths, cutters)]
        _write_line(out, texts, widths)
    if len(shown) < len(header):
        left_out = [h for i, h in enumerate(header) if i not in set(shown)]
        out.flush()  # the table first, where stdout and stderr meet (a terminal, 2>&1)
        echo_err(f"({len(left_out)} more column{'s' * (len(left_out) > 1)} not shown at this width: "
                 f"{', '.join(left_out)}; --wide shows them, as do --format csv and json)", wrap=True)


def _fit(header: list[str], rows: list[list[tuple[str, bool]]], width: int, keep: set[int] = frozenset()
         ) -> tuple[list[int], list[int]]:
    """The columns shown and their widths within `width`: every column when they fit, each as
    wide as its header and its widest sampled value; a text column narrowed (to _MIN_TEXT at
    least, a kept one to _MIN_KEPT) when they do not all fit, a number or timestamp column
    never; and when even that is too wide, columns left out from the right, skipping the kept
    ones (`keep`: their indexes)."""
    natural, least = [], []
    for i, name in enumerate(header):
        values = [r[i] for r in rows if r[i][0] != NULL]
        wide = max([len(name)] + [len(text) for text, _ in values])
        atomic = bool(values) and all(is_atomic for _, is_atomic in values)
        natural.append(wide)
        least.append(wide if atomic else min(wide, _MIN_KEPT if i in keep else _MIN_TEXT))
    shown = list(range(len(header)))

    def needed(columns: list[int]) -> int:
        return sum(least[i] for i in columns) + len(_GAP) * (len(columns) - 1)

    for i in reversed(range(len(header))):
        if needed(shown) <= width:
            break
        if i not in keep:
            shown.remove(i)
    if not shown or needed(shown) > width and len(shown) == 1:
        # Not even one column fits (or only a kept one is left): it gets what there is.
        first = shown[0] if shown else 0
        return [first], [max(1, min(least[first], width))]
    room = width - len(_GAP) * (len(shown) - 1)
    # The widest columns come down to one common cap, no lower than each one's least width.
    cap = max(natural[i] for i in shown)
    while cap > 1 and sum(max(least[i], min(natural[i], cap)) for i in shown) > room:
        cap -= 1
    return shown, [max(least[i], min(natural[i], cap)) for i in shown]


def _shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters. A key (no spaces: a run key, a trial name, a path)
    loses its middle, so its prefix stays copyable (a unique prefix names a run) and its end
    tells it from its neighbours; prose keeps its beginning."""
    if len(text) <= width:
        return text
    if width < 2:
        return "…"[:width]
    if " " in text:
        return text[:width - 1] + "…"
    tail = min(_TAIL, (width - 1) // 3)
    return text[:width - 1 - tail] + "…" + (text[len(text) - tail:] if tail else "")


def _cell(value: Any, fit: bool) -> tuple[str, bool]:
    """A value as a table shows it, and whether it is atomic (a number or a timestamp: never
    cut). Fitted: timestamps to the second in UTC, floats to 4 significant digits."""
    if value is None:
        return NULL, False
    if isinstance(value, (bool, int)):
        return str(value), True
    if isinstance(value, Decimal):
        value = _decimal(value)
        if isinstance(value, int):
            return str(value), True
    if isinstance(value, float):
        return (_number(value) if fit else str(value)), True
    if isinstance(value, (datetime, date)):
        return (_second(value) if fit else _iso(value)), True
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False), False
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex(), False
    text = str(value)
    if fit and len(text) <= 40 and _TIMESTAMP.fullmatch(text):
        try:
            return _second(datetime.fromisoformat(text)), True
        except ValueError:
            pass
    return text, False


def _number(value: float) -> str:
    """4 significant digits, without an exponent between 0.0001 and 10^15 (12345.6 is 12346)."""
    if 1e4 <= abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.4g}"


def _second(value: date) -> str:
    if not isinstance(value, datetime):
        return value.isoformat()
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _write_line(out: IO[str], cells: list[str], widths: list[int]) -> None:
    """One row: as many lines as its tallest cell (only an unfitted table has cells of several)."""
    split = [cell.split("\n") for cell in cells]
    for i in range(max(len(lines) for lines in split)):
        parts = [(lines[i] if i < len(lines) else "").ljust(w) for lines, w in zip(split, widths)]
        out.write(_GAP.join(parts).rstrip() + "\n")
