"""Help that teaches: every command's --help, rendered by the real CLI on the lowest and the
highest Typer the pyproject allows, has real examples, renders flags as flags and rewraps its
paragraphs; and every example in it runs, against a warehouse loaded from examples/sample.

The lowest Typer is installed by .ci/run into .ci/typer-lowest (see there; locally:
`python3 -m pip install --no-deps --target .ci/typer-lowest 'typer==X' 'click==Y'` with the
versions .ci/run names). Without that folder its half is skipped locally and fails under CI."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

import cli_tree
import forked_cli

REPO = Path(__file__).resolve().parent.parent
LOWEST = REPO / ".ci" / "typer-lowest"
REQUIRE_LOWEST = bool(os.environ.get("CI") or os.environ.get("WAREHOUSE_REQUIRE_TYPER_LOWEST"))
# What Typer's own renderers leak on some version: a type where a metavar belongs.
MARKERS = ("<bool>", "<str>", "<list[", "<int>", "<float>", "<path>", "<table|", "{")
WIDTH = 78  # Click's help width at 80 columns


def _typer_range() -> tuple[str, str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if d.startswith("typer")]
    low, high = re.fullmatch(r"typer>=([\d.]+),<([\d.]+)", spec).groups()
    return low, high


def _env(typer: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    paths = [str(REPO)]
    if typer == "lowest":
        if not LOWEST.is_dir():
            message = f"the lowest Typer is not installed in {LOWEST} (.ci/run installs it)"
            if REQUIRE_LOWEST:
                pytest.fail(message)
            pytest.skip(message)
        paths.insert(0, str(LOWEST))
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return env


def _version(typer: str) -> tuple[int, ...]:
    done = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('typer'))"],
                          env=_env(typer), capture_output=True, text=True, check=True)
    return tuple(int(p) for p in done.stdout.strip().split("."))


def _as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@pytest.mark.parametrize("typer", ["installed", "lowest"])
def test_the_typers_tested_are_the_ends_of_the_range(typer):
    low, high = _typer_range()
    version = _version(typer)
    if typer == "lowest":
        assert version == _as_tuple(low), f"{LOWEST} holds Typer {version}, the pyproject's lowest is {low}"
    else:
        assert _as_tuple(low) <= version < _as_tuple(high)


def _help(typer: str, path: tuple[str, ...]) -> str:
    done = forked_cli.run([*path, "--help"], env=_env(typer), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _description(text: str) -> list[list[str]]:
    """The paragraphs of prose between the usage line and the Examples (or the parameters)."""
    lines = text.splitlines()
    body = []
    for line in lines[2:]:
        if line.strip() in ("Examples:", "Arguments:", "Options:", "Commands:"):
            break
        body.append(line)
    paragraphs, current = [], []
    for line in body + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(current)
            current = []
    return paragraphs


@pytest.mark.parametrize("typer", ["installed", "lowest"])
@pytest.mark.parametrize("path", list(cli_tree.commands()), ids=lambda p: " ".join(p) or "warehouse")
def test_help_renders_the_same_way_on_every_typer(typer, path):
    text = _help(typer, path)
    for marker in MARKERS:
        assert marker not in text, f"{marker!r} in the help of {path}:\n{text}"
    # Examples: at least one real command line.
    _, found, block = text.partition("\n  Examples:\n")
    assert found, text
    assert any(line.strip().startswith("warehouse ") for line in block.splitlines()), text
    # Paragraphs are rewrapped: a line ends only where the next word would not have fitted
    # (a docstring's own line breaks would end lines early).
    for paragraph in _description(text):
        for line, after in zip(paragraph, paragraph[1:]):
            assert len("  " + line) + 1 + len(after.split()[0]) > WIDTH, (line, after, text)
    # Flags as flags, values with a metavar: every option of the command, as declared.
    command = cli_tree.commands()[path]
    for param in command.params:
        if getattr(param, "hidden", False):  # an old spelling kept for scripts (compare --a)
            continue
        long = max(getattr(param, "opts", None) or [""], key=len)
        if param.param_type_name == "argument":
            assert param.name.upper() in text.splitlines()[0], text
        elif getattr(param, "is_flag", False):
            assert re.search(rf"{re.escape(long)}( |$)", text, re.M), (long, text)
            assert not re.search(rf"{re.escape(long)} [A-Z\[]", text), (long, text)
        else:
            assert re.search(rf"{re.escape(long)} [A-Z\[]", text), (long, text)


def test_ingest_help_reads_as_click_help():
    text = _help("installed", ("ingest",))
    assert text.splitlines()[0].endswith("ingest [OPTIONS] SOURCES...")
    assert "  -k, --keep-going  " in text and "  SOURCES...  " in text and "--run NAME" not in text
    assert "\n  Examples:\n\n    warehouse ingest examples/sample\n" in text


# --- every example runs -------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory) -> Path:
    """A SQLite warehouse holding examples/sample, copied by each example's test."""
    where = tmp_path_factory.mktemp("sample") / "warehouse.db"
    done = subprocess.run([sys.executable, "-m", "warehouse", "--db", str(where), "ingest",
                           str(REPO / "examples" / "sample")], env=_env("installed"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return where


EXAMPLES = sorted({(path, line) for path in cli_tree.commands() for line in cli_tree.examples(path)})


@pytest.mark.parametrize(("path", "line"), EXAMPLES, ids=[line for _, line in EXAMPLES])
def test_every_example_runs(path, line, sample_warehouse, tmp_path):
    """Each example, as typed in a shell in a folder holding the sample as ./warehouse.db (and
    as team.db, which some examples name), with `warehouse` on the PATH."""
    for name in ("warehouse.db", "team.db"):
        shutil.copy(sample_warehouse, tmp_path / name)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "warehouse"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m warehouse "$@"\n')
    shim.chmod(0o755)
    env = _env("installed")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env.pop("WAREHOUSE_DB", None)
    if line.startswith("warehouse serve"):
        _serve_example(line, tmp_path, env)
        return
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    assert "Traceback" not in done.stderr


def _serve_example(line: str, cwd: Path, env: dict[str, str]) -> None:
    """A server runs until stopped: the example is started on a free port (a later --port wins),
    with a browser that opens nothing (--open), must answer its first page, and ends on Ctrl-C
    in one line."""
    env = {**env, "BROWSER": "true"}
    proc = subprocess.Popen(["bash", "-c", f"exec {line} --port 0"], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = []
        while not any(" at http://" in s for s in said):
            said.append(proc.stderr.readline())
            assert said[-1], f"{line}: ended without serving\n{''.join(said)}"
        port = re.search(r":(\d+)/ ", said[-1]).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0, f"{line}\n{''.join(said)}{rest}"
    assert rest.rstrip().endswith("Stopped.") and "Traceback" not in rest
