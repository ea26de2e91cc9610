"""Progress over the whole ingest: on a terminal (a pseudo-terminal, the real CLI), one line
counts every unit of every source against one total, names the source and file, and never
starts again; to a pipe there is none. The summary names the database either way."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from procs import CLI, run_cli, units
from tools.generate import generate_dataset
from warehouse.cli.progress import ProgressLine
from warehouse.db.engine import redact, resolve_url

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
FRAME = re.compile(r"^(\d+)/(\d+) units")
COLUMNS = 120


def _run_on_terminal(db_url: str, *args: str) -> tuple[int, str]:
    """The CLI with its stderr on a pseudo-terminal COLUMNS wide: (exit code, what it wrote there)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    proc = subprocess.Popen([*CLI, "--db", db_url, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    written = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    return proc.wait(timeout=180), written.decode()


def _frames(screen: str) -> list[str]:
    """Every progress line drawn: the text after each carriage return, up to its erase-to-end."""
    return [part.split("\x1b[K")[0] for part in screen.split("\r") if FRAME.match(part)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny-four"
    generate_dataset(out, profile="tiny", shards=4)
    return out


def test_one_line_counts_every_unit_of_every_source_and_never_restarts(empty_db_url, shards):
    code, screen = _run_on_terminal(empty_db_url, "ingest", str(shards), str(SAMPLE))
    assert code == 0, screen
    frames = _frames(screen)
    counts = [tuple(map(int, FRAME.match(f).groups())) for f in frames]
    assert counts and {total for _, total in counts} == {5}  # 4 shards and 1, one total
    done = [d for d, _ in counts]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 5
    assert "tiny-four train-00000-of-00004.parquet" in frames[0] and "ETA" in frames[0]
    assert re.search(r" kB/\d+ kB", frames[0]) and "done in" in frames[-1]
    assert all(len(f) < COLUMNS for f in frames)
    summary = screen[screen.rindex(frames[-1]):]
    assert f"database: {redact(resolve_url(empty_db_url))}" in summary
    assert "units: 5 loaded, 0 skipped (already loaded), 0 failed" in summary


def test_an_error_is_printed_on_a_line_of_its_own_and_the_count_goes_on(empty_db_url, shards, tmp_path):
    code, screen = _run_on_terminal(empty_db_url, "ingest", str(SAMPLE), str(tmp_path / "missing"), str(shards))
    assert code == 1
    line = next(line for line in screen.split("\n") if "Error:" in line)
    # The line was taken off the screen first: the error starts where the bar was.
    assert re.search(r"\x1b\[KError: \S*missing: no such file", line)
    assert "units" not in line.split("Error:")[1]
    counts = [tuple(map(int, FRAME.match(f).groups())) for f in _frames(screen)]
    assert counts[-1] == (5, 5) and [d for d, _ in counts] == sorted(d for d, _ in counts)


def test_a_pipe_gets_no_progress_and_the_summary_names_the_database(empty_db_url, shards):
    done = run_cli(empty_db_url, "ingest", str(shards))
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "\x1b" not in done.stderr and " units · " not in done.stderr
    assert units(done.stderr) == (4, 0, 0)
    assert done.stderr.splitlines()[-1] == f"database: {redact(resolve_url(empty_db_url))}"
    again = run_cli(empty_db_url, "ingest", str(shards))
    assert units(again.stderr) == (0, 4, 0) and again.stderr.splitlines()[-1].startswith("database: ")


def test_trial_directories_count_as_units(empty_db_url, tmp_path):
    from trace_trees import make_trace_tree  # a Harbor job of 3 trials and 2 RL trials

    root = make_trace_tree(tmp_path / "traces", seed=1, job_trials=3, rl_trials=2, with_fixtures=False)
    code, screen = _run_on_terminal(empty_db_url, "ingest", str(root))
    assert code == 0, screen
    counts = [tuple(map(int, FRAME.match(f).groups())) for f in _frames(screen)]
    assert counts[-1] == (5, 5) and {total for _, total in counts} == {5}
    assert " MB" not in screen and " kB" not in screen  # trial directories have no byte total


def test_the_line_fits_the_terminal_cutting_the_file_name_in_the_middle():
    out = io.StringIO()  # no terminal behind it: 80 columns
    line = ProgressLine(out)
    line.plan(2, 2_000_000)
    line.unit("org/dataset", "train-" + "x" * 100 + "-00001.parquet", 1_000_000)
    line.rows(500, 1000)
    line.close()
    frames = _frames(out.getvalue())
    assert frames[0].startswith("0/2 units · 0.0 MB/2.0 MB · ") and len(frames[0]) == 79
    assert "org/dataset train-" in frames[0] and "…" in frames[0] and frames[0].endswith("-00001.parquet")
    assert frames[-1].startswith("1/2 units · 1.0 MB/2.0 MB · ") and "done in 0:00" in frames[-1]
    assert out.getvalue().endswith("\n")
