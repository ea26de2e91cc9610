"""Tables that fit the terminal (warehouse/cli/output.py), CSV/JSON that keep every value, and
canned results without float noise; the README's first command at 80 columns."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

import query_fixture
from warehouse.cli.output import NULL, Format, write_rows
from warehouse.queries import QUERIES, run_canned

REPO = Path(__file__).resolve().parent.parent
KEY = "9f8c2915-4688-461a-8cba-3901225a1cb2"
COLUMNS = ["run_key", "n", "rate", "started", "note", "empty"]
ROW = (KEY, 18, 0.2777777777777778, datetime(2026, 3, 30, 6, 22, 24, 469880, tzinfo=timezone.utc),
       None, "")


def table(rows, columns=COLUMNS, width: int | None = 80, **kwargs) -> str:
    out = io.StringIO()
    if width is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = str(width)
    try:
        write_rows(columns, rows, Format.table, out, **kwargs)
    finally:
        os.environ.pop("COLUMNS", None)
    return out.getvalue()


def test_a_fitted_table_shows_values_for_reading():
    lines = table([ROW], width=100).splitlines()
    assert lines[0].split() == COLUMNS
    cells = lines[2].split("  ")
    cells = [c.strip() for c in cells if c.strip()]
    assert cells == [KEY, "18", "0.2778", "2026-03-30 06:22:24", NULL]  # the empty string stays empty
    assert lines[2].rstrip() == lines[2]


def test_timestamps_as_text_and_other_zones_show_in_utc_to_the_second():
    rows = [("2026-03-30T06:22:24.469880+00:00",), ("2026-03-30 08:22:24+02:00",), ("2026-03-30T06:22:24",)]
    assert table(rows, ["t"]).splitlines()[2:] == ["2026-03-30 06:22:24"] * 3


def test_floats_to_four_significant_digits():
    rows = [(0.39999999999999997,), (12345.678,), (2.0,), (0.000012345,), (Decimal("0.125"),)]
    assert table(rows, ["x"]).splitlines()[2:] == ["0.4", "12346", "2", "1.234e-05", "0.125"]


def test_long_keys_lose_their_middle_and_prose_its_end_to_fit():
    rows = [(KEY, "word " * 30, "x" * 5)] * 3
    lines = table(rows, ["key", "prose", "tail"], width=40).splitlines()
    assert all(len(line) <= 40 for line in lines)
    key, prose, tail = [c for c in lines[2].split("  ") if c]
    assert key.startswith(KEY[:8]) and key.endswith("…" + KEY[-4:])
    assert prose.startswith("word word") and prose.endswith("…")
    assert tail == "xxxxx"


def test_numbers_are_never_cut_columns_that_do_not_fit_are_left_out(capsys):
    big = 123456789012345
    rows = [(big, big + 1, big + 2, "text")]
    lines = table(rows, ["a", "b", "c", "d"], width=34).splitlines()
    assert lines[0].split() == ["a", "b"] and lines[2].split() == [str(big), str(big + 1)]
    err = capsys.readouterr().err
    # The note wraps at the width (COLUMNS), between words, its later lines indented.
    assert "(2 more columns not shown at this width: c, d; --wide shows them" in " ".join(err.split())
    assert all(len(line) <= 34 for line in err.splitlines()) and err.count("\n") > 1


def test_a_kept_column_is_never_left_out(capsys):
    # What the command exists for (compare-test's verdict, search's snippet) stays when the table
    # is too narrow for every column: the others go, from the right, and it keeps _MIN_KEPT (30).
    big = 123456789012345
    verdict = "no significant difference (paired t-test on the tasks' success shares)"
    rows = [(big, big + 1, big + 2, verdict)]
    lines = table(rows, ["a", "b", "c", "verdict"], width=60, keep=("verdict",)).splitlines()
    assert lines[0].split() == ["a", "verdict"]
    assert lines[2].startswith(f"{big}  no significant difference (paired t") and len(lines[2]) <= 60
    assert "(2 more columns not shown at this width: b, c;" in " ".join(capsys.readouterr().err.split())
    # Without keep, the verdict is the first to go (the old way), which is what keep is for.
    assert table(rows, ["a", "b", "c", "verdict"], width=60).splitlines()[0].split() == ["a", "b", "c"]
    # A column's own way of cutting (search's: around the hit).
    cut = table([("x" * 50, "the hit is at the end: HIT")], ["key", "snippet"], width=40, keep=("snippet",),
                shorten={"snippet": lambda text, width: "…" + text[-(width - 1):]})
    snippet = cut.splitlines()[2].split("  ")[-1]
    assert snippet.startswith("…") and snippet.endswith("at the end: HIT")


def test_notes_wrap_at_the_terminal_width_and_stay_whole_to_a_pipe(capsys):
    from warehouse.cli.output import echo_err

    note = "note: " + " ".join(f"word{i}" for i in range(40)) + " " + KEY
    os.environ["COLUMNS"] = "50"
    try:
        echo_err(note, wrap=True)
        error = "Error: " + " ".join(f"word{i}" for i in range(40))
        echo_err(error)  # an error (or a report line) is not a note: whole on its line, to copy
        assert capsys.readouterr().err.endswith("\n" + error + "\n")
        echo_err(note, wrap=True)
    finally:
        os.environ.pop("COLUMNS", None)
    err = capsys.readouterr().err
    assert " ".join(err.split()) == note and err.count("\n") > 4
    # Wrapped between words, never within one (a run key stays whole to copy), nothing cut.
    assert all(len(line) <= 50 for line in err.splitlines()) and KEY in err
    echo_err(note, wrap=True)  # to a pipe, COLUMNS unset: one line, as scripts read it
    assert capsys.readouterr().err == note + "\n"


def test_later_rows_are_cut_to_the_sampled_widths_but_not_their_numbers():
    rows = [("s" * 13, 1)] * 200 + [("abcdefghijklmnopqrstuvwxyz", 10 ** 12)]
    lines = table(rows, ["text", "n"]).splitlines()
    assert len(lines) == 2 + 201
    assert lines[-1] == "abcdefgh…wxyz  1000000000000"  # the text cut to 13, the number whole


def test_a_newline_in_a_fitted_cell_shows_as_a_mark():
    assert table([("two\nlines",)], ["t"]).splitlines()[2] == "two↵lines"


def test_wide_and_pipes_show_every_value_in_full():
    wide = table([ROW], wide=True).splitlines()
    to_pipe = table([ROW], width=None).splitlines()
    assert wide == to_pipe
    assert wide[2].split() == [KEY, "18", "0.2777777777777778", "2026-03-30T06:22:24.469880+00:00", NULL]
    assert table([("two\nlines", 1)], ["t", "n"], width=None).splitlines()[2:] == ["two    1", "lines"]


def test_the_table_streams():
    """Rows are printed as they come: by the time row 300 is read, the first 200 are out."""
    out = io.StringIO()

    def rows():
        for n in range(1000):
            if n == 300:
                assert out.getvalue().count("\n") >= 2 + 200
            yield (n, "x")

    os.environ["COLUMNS"] = "80"
    try:
        write_rows(["n", "s"], rows(), Format.table, out)
    finally:
        os.environ.pop("COLUMNS")
    assert out.getvalue().count("\n") == 2 + 1000


@pytest.mark.parametrize("fmt", [Format.csv, Format.json, Format.jsonl])
def test_csv_and_json_keep_full_values(fmt):
    out = io.StringIO()
    os.environ["COLUMNS"] = "20"
    try:
        write_rows(COLUMNS, [ROW], fmt, out)
    finally:
        os.environ.pop("COLUMNS")
    text = out.getvalue()
    assert KEY in text and "0.2777777777777778" in text and "2026-03-30T06:22:24.469880+00:00" in text


# --- canned results: no float noise ----------------------------------------------------------

@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


def test_computed_ratios_carry_no_float_noise(url):
    """run-a's task1: 5 attempts, 2 successes. pass@1 = 1 - (1 - 1/4)(1 - 1/5) is
    0.3999999999999999 in floats; the answer is 0.4, in the library and in JSON and CSV."""
    result = run_canned(url, QUERIES["pass-at-k"], {"k": "1,2", "per_task": True})
    rows = {(r[0], r[1]): dict(zip(result.columns, r)) for r in result.rows}
    assert rows[("run-a", "task1")]["pass@1"] == 0.4 and rows[("run-a", "task1")]["pass@2"] == 0.7
    done = query_fixture.cli(url, "query", "pass-at-k", "--k", "1", "--per-task", "-f", "jsonl")
    values = [json.loads(line)["pass@1"] for line in done.stdout.splitlines()]
    assert 0.4 in values and all(v is None or len(repr(v)) <= 14 for v in values), values
    as_csv = query_fixture.cli(url, "query", "pass-rate", "-f", "csv")
    numbers = [cell for line in as_csv.stdout.splitlines()[1:] for cell in line.split(",")[1:] if cell]
    long = [cell for cell in numbers if len(cell.lstrip("-0.").replace(".", "")) > 12]
    assert numbers and not long, long  # 12 digits at most


# --- the README's first command ----------------------------------------------------------------

def test_the_readme_first_command_fits_80_columns(tmp_path):
    """`warehouse ingest examples/sample && warehouse query runs` at COLUMNS=80: every line fits,
    every number is whole (as JSON has it, to 4 significant digits), and each run key's
    8-character prefix can be copied from the table."""
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("WAREHOUSE_DB", None)
    (tmp_path / "examples").symlink_to(REPO / "examples")

    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "warehouse", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    cli("ingest", "examples/sample")
    shown = cli("query", "runs").stdout.splitlines()
    assert all(len(line) <= 80 for line in shown), shown
    header = shown[0].split()
    rows = json.loads(cli("query", "runs", "-f", "json").stdout)
    assert len(shown) == 2 + len(rows)
    for line, row in zip(shown[2:], rows):
        cells = line.split()
        assert cells[0].startswith(row["run_key"][:8]) and re.fullmatch(r"[0-9a-f-]+…[0-9a-f]{4}", cells[0])
        for name, cell in zip(header[1:], cells[1:]):
            value = row[name]
            assert cell == (f"{value:.4g}" if isinstance(value, float) else str(value)), (name, cell, value)
