"""Help that teaches and reads well at 80 columns: every command's --help, rendered by the real
CLI at COLUMNS=80 on the lowest and the highest Typer the pyproject allows, has real examples
that fit and destroy nothing, renders flags as flags and values as what they are (one metavar
per option, everywhere), rewraps its paragraphs, and lists its commands with whole summaries;
every example in it runs, against a warehouse loaded from examples/sample; and the notes the
commands print on stderr wrap at the terminal's width.

The lowest Typer is installed by .ci/run into .ci/typer-lowest (see there; locally:
`python3 -m pip install --no-deps --target .ci/typer-lowest 'typer==X' 'click==Y'` with the
versions .ci/run names). Without that folder its half is skipped locally and fails under CI."""

from __future__ import annotations

import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
from functools import lru_cache
from pathlib import Path

import pytest

import cli_tree
import forked_cli
from helpers import next_line

REPO = Path(__file__).resolve().parent.parent
LOWEST = REPO / ".ci" / "typer-lowest"
REQUIRE_LOWEST = bool(os.environ.get("CI") or os.environ.get("WAREHOUSE_REQUIRE_TYPER_LOWEST"))
# What Typer's own renderers leak on some version: a type where a metavar belongs.
MARKERS = ("<bool>", "<str>", "<list[", "<int>", "<float>", "<path>", "<table|", "{")
WIDTH = 78  # Click's help width at 80 columns
# What Click calls a value by its type, where no metavar says what it is.
TYPE_NAMES = {"TEXT", "INTEGER", "FLOAT", "BOOLEAN", "PATH", "FILENAME", "FILE", "DIRECTORY", "UUID", "DATETIME",
              "INT", "STR", "BOOL", "LIST", "TUPLE", "CHOICE", "RANGE"}
# Options whose own name is the right word for their value (--run RUN): any other option's name
# in capitals (--threshold THRESHOLD, --remove REMOVE) names the option, not what it takes.
NAMES_ITS_VALUE = {"--run", "--task", "--model", "--agent", "--source", "--role", "--port"}


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


@lru_cache(maxsize=None)
def _help(typer: str, path: tuple[str, ...]) -> str:
    """The command's --help as an 80-column terminal shows it."""
    done = forked_cli.run([*path, "--help"], env={**_env(typer), "COLUMNS": "80"}, timeout=120)
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


def _section(text: str, title: str) -> list[tuple[str, str]]:
    """The rows of a section (Options:, Commands:) as (first column, second column), a row's
    continuation lines joined to it."""
    _, found, rest = text.partition(f"\n{title}:\n")
    rows: list[tuple[str, str]] = []
    for line in rest.splitlines() if found else []:
        if not line.strip():
            break
        if line.startswith("   "):  # the row's text, continued (or begun below a long first column)
            first, second = rows[-1]
            rows[-1] = (first, f"{second} {line.strip()}".strip())
        else:
            first, _, second = line.strip().partition("  ")
            rows.append((first, second.strip()))
    return rows


def _metavars(typer: str, path: tuple[str, ...]) -> dict[str, str]:
    """What each option that takes a value shows for it, by its longest name, as rendered."""
    shown = {}
    for param in cli_tree.commands()[path].params:
        if param.param_type_name != "option" or getattr(param, "hidden", False) or param.is_flag or param.count:
            continue
        long = max(param.opts, key=len)
        [names] = [first for first, _ in _section(_help(typer, path), "Options")
                   if re.search(rf"(^|, ){re.escape(long)} ", first)]
        shown[long] = names.partition(long + " ")[2]
    return shown


PATHS = list(cli_tree.commands())
GROUPS = [path for path in PATHS if getattr(cli_tree.commands()[path], "commands", None)]


@pytest.mark.parametrize("typer", ["installed", "lowest"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "warehouse")
def test_help_renders_the_same_way_on_every_typer(typer, path):
    text = _help(typer, path)
    # Nothing wider than the help's width at 80 columns: the terminal would break it.
    for line in text.splitlines():
        assert len(line) <= WIDTH, f"{len(line)} characters in the help of {path}:\n{line}"
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


@pytest.mark.parametrize("typer", ["installed", "lowest"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "warehouse")
def test_each_value_is_shown_as_what_it_is(typer, path):
    """--run RUN, --timeout SECONDS, --format [table|csv|…]: never the parameter's name in the
    code (FILTER_RUN), a type (FLOAT), or the option's own name where that is not what the value
    is (--threshold THRESHOLD, --remove REMOVE)."""
    for long, metavar in _metavars(typer, path).items():
        where = f"`{long} {metavar}` in the help of {path}"
        assert metavar, where
        if metavar.startswith("["):  # the values it takes
            assert re.fullmatch(r"\[[\w:.-]+(\|[\w:.-]+)*\]", metavar), where
            continue
        assert re.fullmatch(r"[A-Z][A-Z0-9]*([=:, ][A-Z]+|,…)*", metavar), where  # capitals: a placeholder
        assert "_" not in metavar and metavar not in TYPE_NAMES, where
        assert metavar != long.lstrip("-").upper().replace("-", "_") or long in NAMES_ITS_VALUE, where


@pytest.mark.parametrize("typer", ["installed", "lowest"])
def test_an_option_shows_its_value_the_same_way_everywhere(typer):
    """--timeout is SECONDS wherever it appears, --task TASK, --label KEY=VALUE; an option of
    choices lists them everywhere (its choices may differ: show's --format has two)."""
    seen: dict[str, dict[str, list[tuple[str, ...]]]] = {}
    for path in PATHS:
        for long, metavar in _metavars(typer, path).items():
            kind = "choices" if metavar.startswith("[") else metavar
            seen.setdefault(long, {}).setdefault(kind, []).append(path)
    differ = {long: kinds for long, kinds in seen.items() if len(kinds) > 1}
    assert not differ, differ
    assert seen["--timeout"].keys() == {"SECONDS"} and seen["--run"].keys() == {"RUN"}


# Options whose help says what they do in their own command, each for the reason given; every
# other option that several commands take has one help, one type and one metavar everywhere.
OWN_HELP = {
    "--db": "the root's declares the variable and the forms; the others defer to it",
    "--timeout": "says what it stops (a query, each query of the report, a page's reads, a pick)",
    "--format": "show's two formats are not the tables' four",
    "--force": "what a command replaces differs (a file, or the files an export writes)",
    "--yes": "says what it does without asking",
    "--confidence": "power's is its test's level, the others' their intervals'",
    "--by": "what is grouped differs (search: hits by trial)",
    "--max-rows": "what is capped differs (a page, the output)",
}
# The same name for different things in one command each, which its own help says (so their
# type, metavar and help differ).
OWN_TYPE = {
    "--per-task": "pass-at-k's is a flag, export hub's picks one trial per task",
    "--tasks": "compare-test's lists tasks, power's counts them",
    "--by": "search groups by turn or trial, the queries by run, model, agent or label",
}
# ingest names the runs it writes and labels them; every other command selects by them.
WRITES = {("ingest",): ("--run", "--label")}


def _declared(param) -> tuple:
    """What Click knows of an option's value: its type (with its choices), whether it repeats,
    whether it is a flag."""
    kind = param.type
    return (type(kind).__name__, tuple(getattr(kind, "choices", ()) or ()), param.multiple, param.is_flag)


def test_an_option_is_the_same_option_everywhere():
    """Read from Click's own metadata: an option that several commands take has the same type,
    metavar and help in each (but those OWN_HELP and OWN_TYPE name); the filters (--run, --task,
    --model, --agent, --label, --since, --until) in every command that selects trials."""
    seen: dict[str, dict[str, dict[tuple, list]]] = {}
    for path, command in cli_tree.commands().items():
        for param in command.params:
            if param.param_type_name != "option" or getattr(param, "hidden", False):
                continue
            long = max(param.opts, key=len)
            if long in WRITES.get(path, ()):
                continue
            facts = seen.setdefault(long, {"type": {}, "metavar": {}, "help": {}})
            facts["type"].setdefault(_declared(param), []).append(path)
            facts["metavar"].setdefault((param.metavar,), []).append(path)
            facts["help"].setdefault((param.help,), []).append(path)
    differ = {(long, what): list(ways.values()) for long, facts in seen.items() for what, ways in facts.items()
              if len(ways) > 1 and long not in OWN_TYPE and not (what == "help" and long in OWN_HELP)
              and not (what == "type" and long == "--format")}  # show's choices are two of the four
    assert not differ, differ
    filters = ("--run", "--task", "--model", "--agent", "--label", "--since", "--until")
    selecting = [path for path, command in cli_tree.commands().items()
                 if any("--run" in p.opts for p in command.params) and path not in WRITES]
    for path in selecting:
        opts = {o for p in cli_tree.commands()[path].params for o in p.opts}
        assert set(filters) <= opts, (path, set(filters) - opts)
    # The commands that select trials, each named: a command that should and does not fails above.
    assert {("search",), ("runs",), ("report",), ("export", "hub"), ("query", "pass-rate")} <= set(selecting)


@pytest.mark.parametrize("typer", ["installed", "lowest"])
def test_dash_h_is_help_everywhere(typer):
    """-h is --help on every command and group (gh's and git's subcommands take it too)."""
    for path in PATHS:
        short = forked_cli.run([*path, "-h"], env={**_env(typer), "COLUMNS": "80"}, timeout=120)
        assert short.returncode == 0 and short.stdout == _help(typer, path), path
        assert "-h, --help" in short.stdout, path


@pytest.mark.parametrize("typer", ["installed", "lowest"])
@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "warehouse")
def test_a_group_lists_each_command_with_its_whole_summary(typer, path):
    """Each command with the first paragraph its own help opens with, whole (Click would cut it
    to what fits beside the name, ending in "..."), wrapped under it."""
    listed = dict(_section(_help(typer, path), "Commands"))
    assert set(listed) == set(cli_tree.commands()[path].commands), listed
    for name, text in listed.items():
        own = " ".join(_description(_help(typer, (*path, name)))[0])
        assert text == own and not text.endswith("...") and text[-1] in ".?", (name, text, own)


@pytest.mark.parametrize("line", sorted({line for path in PATHS for line in cli_tree.examples(path)}))
def test_no_example_destroys_without_asking(line):
    """A command that deletes asks first (on a terminal; tests/test_delete.py, test_migrations.py):
    its examples show it asking, never `--yes`, and no downgrade to base (every table gone)."""
    assert not re.search(r"(^| )--yes( |$)", line), line
    assert not re.search(r"downgrade +base\b", line), line


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
    """Each example, as typed in a shell on a terminal in a folder holding the sample as
    ./warehouse.db (and as team.db, which some examples name), with `warehouse` on the PATH,
    answering yes where a command asks (a delete, a downgrade that deletes data)."""
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
    if " --watch " in line:
        _watch_example(line, tmp_path, env)
        return
    done = _on_a_terminal(["bash", "-c", line], "y\n", cwd=tmp_path, env=env)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    assert "Traceback" not in done.stderr


def _on_a_terminal(args: list[str], answer: str, **kwargs) -> subprocess.CompletedProcess:
    """`args` run with a pseudo-terminal as stdin, on which `answer` is already typed (the
    answer to a question, if one is asked); stdout and stderr captured."""
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode())
        return subprocess.run(args, stdin=slave, capture_output=True, text=True, timeout=300, **kwargs)
    finally:
        os.close(slave)
        os.close(master)


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


def _watch_example(line: str, cwd: Path, env: dict[str, str]) -> None:
    """A watch runs until stopped: the example is started with the folder it names holding a
    real Harbor job, must say it is watching and load the job's trials, and ends on Ctrl-C in
    one line."""
    folder = next(word for word in line.split()[3:] if not word.startswith("-"))
    shutil.copytree(REPO / "tests" / "fixtures" / "harbor" / "jobs", cwd / folder)
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = [next_line(proc)]
        assert said[0].startswith("watching "), f"{line}: {said[0]}"
        while not said[-1].startswith("loaded:"):
            said.append(next_line(proc))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        proc.reader.join(5)
        rest = "".join(proc.lines.queue)
    finally:
        proc.kill()
    assert proc.returncode == 0, f"{line}\n{''.join(said)}{rest}"
    assert rest.rstrip().splitlines()[-1].startswith("Stopped: ") and "Traceback" not in rest, rest


# --- notes on stderr ------------------------------------------------------------------------

# Filters that each match nothing in the sample, and the note they give, written out by hand
# (warehouse.filters.Filters.unmatched): longer than a terminal of 80 columns.
MISSING = ("--task", "nope", "--model", "nope", "--agent", "nope", "--label", "a=b")
MISSING_NOTE = ("note: --task 'nope' matches no task; --model 'nope' matches no trial's model; "
                "--agent 'nope' matches no trial's agent; --label a=b is on no run")
SERVE_WARNING = ("warning: serving on 0.0.0.0: anyone who can reach this machine on the network, on any of its "
                 "addresses can read this warehouse (no login)")


def _note(stderr: str, start: str) -> list[str]:
    """The lines of the note that begins with `start`: its first, and those indented under it."""
    lines = stderr.splitlines()
    [first] = [i for i, line in enumerate(lines) if line.startswith(start)]
    note = [lines[first]]
    for line in lines[first + 1:]:
        if not line.startswith("  "):
            break
        note.append(line)
    return note


def _fits(note: list[str], text: str) -> None:
    """`note` says `text` whole, over more than one line of at most 80 characters."""
    assert " ".join(" ".join(note).split()) == text, note
    assert len(note) > 1 and all(len(line) <= 80 for line in note), note


@pytest.mark.parametrize("command", [("query", "runs"), ("query", "pass-rate"), ("export", "hub", "{out}"),
                                     ("report", "{out}.html")],
                         ids=lambda command: " ".join(a for a in command if "{" not in a))
def test_notes_on_stderr_wrap_at_the_terminal_width(db_url, tmp_path, command):
    """On an 80-column terminal (COLUMNS=80) a note longer than that is wrapped between words,
    its later lines indented; to a pipe (no COLUMNS) it is one line, as scripts read it."""
    from procs import run_cli

    assert run_cli(db_url, "ingest", str(REPO / "examples" / "sample")).returncode == 0
    at_80 = forked_cli.run(["--db", db_url, *(a.format(out=tmp_path / "at-80") for a in command), *MISSING],
                           env={**os.environ, "COLUMNS": "80"})
    assert at_80.returncode == 0, at_80.stderr
    _fits(_note(at_80.stderr, "note: --task"), MISSING_NOTE)
    for line in at_80.stderr.splitlines():  # the rest too (a report line, naming OUT, may be wider)
        assert len(line) <= 80 or line.startswith(f"wrote {tmp_path}"), at_80.stderr
    piped = forked_cli.run(["--db", db_url, *(a.format(out=tmp_path / "piped") for a in command), *MISSING])
    assert piped.returncode == 0 and MISSING_NOTE in piped.stderr.splitlines(), piped.stderr


def test_the_warning_of_a_server_others_can_reach_wraps(db_url):
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.Popen([*forked_cli.CLI, "--db", db_url, "serve", "--host", "0.0.0.0", "--port", "0"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = []
        while not any(" at http://" in line for line in said):
            said.append(proc.stderr.readline())
            assert said[-1], "".join(said)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    _fits(_note("".join(said), "warning:"), SERVE_WARNING)


def test_a_question_wraps_at_the_terminal_width(db_url):
    """A delete's question, on a terminal of 80 columns: what will go, wrapped, then [y/N]."""
    from procs import run_cli

    assert run_cli(db_url, "ingest", str(REPO / "examples" / "sample")).returncode == 0
    done = _on_a_terminal([*forked_cli.CLI, "--db", db_url, "runs", "delete", "9f8c2915"], "n\n",
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 1 and "Error: delete cancelled: nothing done" in done.stderr, done.stderr
    question = done.stderr.partition(" [y/N]:")[0].splitlines()
    assert question[0].startswith("delete run 9f8c2915-4688-461a-8cba-3901225a1cb2 (sample-9f8c2915): 18 trials")
    assert len(question) > 1 and all(len(line) <= 80 for line in question), question
