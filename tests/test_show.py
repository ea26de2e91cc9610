"""`warehouse show`: one trajectory as terminal text and as exact JSON."""

from __future__ import annotations

import json

import pytest

import query_fixture
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from query_fixture import B_TASK2_EP0, B_TASK2_EP1, NUL_TEXT, cli
from warehouse.errors import WarehouseError
from warehouse.show import load_trajectory, to_json, to_text


@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


def turns_of(episode):
    return [(t["role"], t["content"]) for t in episode["turns"]]


def test_default_is_the_longest_main_episode(url, engine):
    t = load_trajectory(engine, "task2__b0")
    assert (t["run_key"], t["task"], t["trial_name"], t["reward"], t["result"], t["status"]) == (
        "run-b", "task2", "task2__b0", 1.0, "1.0", "complete")
    assert t["n_episodes"] == 2
    assert [(e["episode_index"], turns_of(e)) for e in t["episodes"]] == [(1, B_TASK2_EP1)]
    assert [turns_of(e) for e in load_trajectory(engine, "task2__b0", episode=0)["episodes"]] == [B_TASK2_EP0]
    assert [e["episode_index"] for e in load_trajectory(engine, "task2__b0", all_episodes=True)["episodes"]] == [0, 1]
    with pytest.raises(WarehouseError, match="no episode 7"):
        load_trajectory(engine, "task2__b0", episode=7)


def test_trial_references(url, engine):
    with pytest.raises(WarehouseError, match=r"'shared' is in 2 runs \(run-a, run-c\)"):
        load_trajectory(engine, "shared")
    by_run = load_trajectory(engine, "run-c/shared")
    assert (by_run["run_key"], by_run["task"]) == ("run-c", "task1")
    assert load_trajectory(engine, str(by_run["id"]))["run_key"] == "run-c"
    with pytest.raises(WarehouseError, match="no trial 'nope'"):
        load_trajectory(engine, "nope")
    # A run key may itself hold a slash (Hub dataset names): RUN/TRIAL splits at the last one.
    source = writer.ensure_source(engine, "parquet", "/fixture/hub", "hub")
    with writer.unit(engine, source, "unit-hub", "hash-hub") as u:
        u.add_trials([Trial(run_key="org/dataset", trial_name="shared", reward=0.0, result="0.0",
                            episodes=[Episode(0, [Turn("user", "x")])])])
    assert load_trajectory(engine, "org/dataset/shared")["run_key"] == "org/dataset"


def test_exact_texts_in_json(url, engine):
    source = writer.ensure_source(engine, "parquet", "/fixture/odd", "odd")
    odd = "lone \ud800 surrogate and NUL \x00 and ESC \x1b[31m"
    with writer.unit(engine, source, "unit-odd", "hash-odd") as u:
        u.add_trials([Trial(run_key="run-odd", trial_name="odd__0", task_name="task1", reward=None,
                            result="ValueError", exception_type="ValueError", exception_message="bad\x00",
                            verifier_output="out\x00put", episodes=[Episode(0, [Turn("user", odd)])])])
    t = load_trajectory(engine, "odd__0")
    assert turns_of(t["episodes"][0]) == [("user", odd)]
    assert (t["verifier_output"], t["exception_message"]) == ("out\x00put", "bad\x00")
    assert json.loads(to_json(t))["episodes"][0]["turns"][0]["content"] == odd
    shown = to_text(t)
    shown.encode("utf-8")  # printable: no lone surrogate left
    assert "\x1b" not in shown and "\x00" not in shown and "␛[31m" in shown


def test_cli_table_and_json(url):
    table = cli(url, "show", "task2__b0")
    assert table.returncode == 0, table.stderr
    for expected in ("run-b", "task2", "terminus", "m2", "[3] assistant", "tests pass", "episode 1 (main)"):
        assert expected in table.stdout
    as_json = cli(url, "show", "run-c/c2", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    obj = json.loads(as_json.stdout)
    assert isinstance(obj, dict)
    assert (obj["run_key"], obj["trial_name"], obj["task"], obj["n_input_tokens"]) == ("run-c", "c2", None, 300)
    assert obj["episodes"][0]["turns"][0] == {"idx": 0, "number": 0, "role": "user", "content": NUL_TEXT,
                                              "extra": None}
    verifier = cli(url, "show", "task1__b0")
    assert "verifier output" in verifier.stdout and "AssertionError" in verifier.stdout
    ambiguous = cli(url, "show", "shared")
    assert ambiguous.returncode == 1 and ambiguous.stderr.startswith("Error: trial 'shared' is in 2 runs")
    assert cli(url, "show", "task2__b0", "--episode", "0", "--all").returncode == 2
    assert cli(url, "show", "task2__b0", "--format", "csv").returncode == 2


# --- a multi-step trial, prefixes, turns (issue 28) -----------------------------------------------

CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
SETUP_EP0 = [("user", "set up"), ("assistant", "<think>where am I</think>\nLooking.\n" + CALL)]
SETUP_EP1 = SETUP_EP0 + [("user", "total 0"), ("assistant", "set up done")]
BUILD = [("user", "build it"), ("assistant", "built"), ("user", "thanks")]
SUMMARY = [("user", "summarize"), ("assistant", "summary")]


def multi_step(engine):
    """Trial ms__x1 of run-ms (named "ms-job"): steps "setup" then "build" (not in name order), the
    setup step's conversation exported as 2 episodes, a subagent of the build step; and trials
    whose names hold LIKE's wildcards."""
    from sqlalchemy import text

    steps = [{"name": "setup", "rewards": {"reward": 1.0}, "exception": None},
             {"name": "build", "rewards": {"reward": 0.0, "speed": 0.5},
              "exception": {"type": "BuildError", "message": "make failed"}}]
    episodes = [Episode(0, [Turn(r, c) for r, c in SETUP_EP0], "step:setup"),
                Episode(1, [Turn(r, c) for r, c in SETUP_EP1], "step:setup"),
                Episode(0, [Turn(r, c) for r, c in BUILD], "step:build"),
                Episode(0, [Turn(r, c) for r, c in SUMMARY], "step:build/summarization-1-summary")]
    source = writer.ensure_source(engine, "parquet", "/fixture/ms", "ms")
    with writer.unit(engine, source, "unit-ms", "hash-ms") as u:
        u.add_trials([Trial(run_key="run-ms", trial_name="ms__x1", task_name="task1", reward=0.0, result="0.0",
                            detail={"multi_step": True, "steps": steps}, episodes=episodes),
                      Trial(run_key="run-ms", trial_name="50%_off", reward=1.0, result="1.0",
                            episodes=[Episode(0, [Turn("user", "x")])]),
                      Trial(run_key="run-ms", trial_name="50xyoff", reward=1.0, result="1.0",
                            episodes=[Episode(0, [Turn("user", "y")])])])
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'ms-job' WHERE run_key = 'run-ms'"))


def test_every_step_its_longest_episode_in_step_order(url, engine):
    multi_step(engine)
    t = load_trajectory(engine, "ms__x1")
    assert (t["run_key"], t["run_name"], t["multi_step"]) == ("run-ms", "ms-job", True)
    assert [(e["trace_source"], e["episode_index"], e["step"], e["rewards"]) for e in t["episodes"]] == [
        ("step:setup", 1, "setup", {"reward": 1.0}), ("step:build", 0, "build", {"reward": 0.0, "speed": 0.5})]
    assert [turns_of(e) for e in t["episodes"]] == [SETUP_EP1, BUILD]
    assert t["episodes"][1]["exception"] == {"type": "BuildError", "message": "make failed"}
    assert t["others"] == [{"trace_source": "step:setup", "episode_index": 0, "n_turns": 2},
                           {"trace_source": "step:build/summarization-1-summary", "episode_index": 0, "n_turns": 2}]
    # Turns are numbered on across the steps, as the web page's #turn-N anchors.
    assert [turn["number"] for e in t["episodes"] for turn in e["turns"]] == list(range(7))
    # A single-step trial: the main trace, as before, and nothing else.
    single = load_trajectory(engine, "task2__b0")
    assert (single["multi_step"], single["run_name"], single["episodes"][0]["step"]) == (False, None, None)
    assert single["others"] == [{"trace_source": "main", "episode_index": 0, "n_turns": 2}]
    # --trace picks any trace source (a subagent's); --episode an index of it; --all every one.
    sub = load_trajectory(engine, "ms__x1", trace="step:build/summarization-1-summary")
    assert [(turns_of(e), e["rewards"]) for e in sub["episodes"]] == [(SUMMARY, None)]
    assert turns_of(load_trajectory(engine, "ms__x1", trace="step:setup", episode=0)["episodes"][0]) == SETUP_EP0
    assert [e["trace_source"] for e in load_trajectory(engine, "ms__x1", all_episodes=True)["episodes"]] == [
        "step:setup", "step:setup", "step:build", "step:build/summarization-1-summary"]
    with pytest.raises(WarehouseError, match="no trace 'step:nope' in this trial"):
        load_trajectory(engine, "ms__x1", trace="step:nope")


def test_turns_slice_the_shown_turns(url, engine):
    multi_step(engine)
    t = load_trajectory(engine, "ms__x1", turns="3:5")
    assert [[(turn["number"], turn["content"]) for turn in e["turns"]] for e in t["episodes"]] == [
        [(3, "set up done")], [(4, "build it")]]
    assert t["turn_range"] == {"start": 3, "stop": 5, "of": 7}
    assert [turn["number"] for e in load_trajectory(engine, "ms__x1", turns="-2:")["episodes"]
            for turn in e["turns"]] == [5, 6]
    assert [turn["number"] for e in load_trajectory(engine, "ms__x1", turns="6")["episodes"]
            for turn in e["turns"]] == [6]
    shown = to_text(t)
    assert "[3] assistant" in shown and "[4] user" in shown and "[2] user" not in shown and "[5]" not in shown
    for bad in ("a:b", "1:2:3", "", "x"):
        with pytest.raises(WarehouseError, match="--turns is A:B"):
            load_trajectory(engine, "ms__x1", turns=bad)


def test_a_unique_start_of_a_trial_name(url, engine):
    multi_step(engine)
    assert load_trajectory(engine, "ms__")["trial_name"] == "ms__x1"
    with pytest.raises(WarehouseError, match=r"^trial 'task2__b' is ambiguous: it could be task2__b0, task2__b1, "
                                             r"task2__b2$"):
        load_trajectory(engine, "task2__b")
    # A name in several runs is listed as RUN/TRIAL; more than five candidates end in "…".
    with pytest.raises(WarehouseError, match=r"^trial 'sha' is ambiguous: it could be run-a/shared, run-c/shared$"):
        load_trajectory(engine, "sha")
    with pytest.raises(WarehouseError, match=r"task1__a0, task1__a1, task1__a2, task1__a3, task1__a4, …$"):
        load_trajectory(engine, "task1__")
    # Literal: % and _ are no wildcards (LIKE would take "50%" for 50xyoff too, and "t_sk" for task…).
    assert load_trajectory(engine, "50%")["trial_name"] == "50%_off"
    assert load_trajectory(engine, "50x")["trial_name"] == "50xyoff"
    with pytest.raises(WarehouseError, match="no trial 't_sk'"):
        load_trajectory(engine, "t_sk")
    with pytest.raises(WarehouseError, match="no trial 'TASK2'"):  # case counts, on both backends
        load_trajectory(engine, "TASK2")
    # Exact names first: "shared" is a name and (in run-c) the start of nothing else.
    assert load_trajectory(engine, "run-c/shared")["run_key"] == "run-c"
    # RUN/PREFIX: a start of a name within that run.
    assert load_trajectory(engine, "run-b/task2__b2")["trial_name"] == "task2__b2"
    assert load_trajectory(engine, "run-ms/ms")["trial_name"] == "ms__x1"
    assert load_trajectory(engine, "ms-job/50x")["trial_name"] == "50xyoff"
    # A name as a fitted table cuts it (start…end) names it too.
    assert load_trajectory(engine, "task1__…a3")["trial_name"] == "task1__a3"
    assert load_trajectory(engine, "run-b/task1…b1")["trial_name"] == "task1__b1"
    with pytest.raises(WarehouseError, match=r"'ta…b1' is ambiguous: it could be task1__b1, task2__b1, task3__b1$"):
        load_trajectory(engine, "ta…b1")
    with pytest.raises(WarehouseError, match="no trial 'task1__a…a3'"):  # start and end may not overlap
        load_trajectory(engine, "task1__a…a3")


def test_read_in_a_read_only_session(url, engine):
    # The web app reads a trajectory on a warehouse.readonly session's connection, under its limits.
    from warehouse.readonly import readonly_session
    from warehouse.show import trajectory_on

    multi_step(engine)
    with readonly_session(url, timeout=10) as session:
        t = trajectory_on(session.connection, "ms__x", turns="1:2")
    assert t == load_trajectory(engine, "ms__x1", turns="1:2")
    assert [turn["content"] for e in t["episodes"] for turn in e["turns"]] == [SETUP_EP1[1][1]]


# --- on a terminal: the pager ------------------------------------------------------------------

def on_terminal(db_url, tmp_path, *args, pager: str | None = "record", env: dict | None = None):
    """`warehouse show ARGS` with stdout on a pseudo-terminal (the pty module), PAGER a script that
    records what it got (its stdin, and LESS) in tmp_path/paged (`record`), reads 10 bytes and
    leaves as a user pressing q does (`quit`), or the given command. Returns (exit code, what
    reached the terminal, stderr, what the pager recorded or None)."""
    import os
    import pty
    import subprocess
    import sys

    from helpers import read_terminal

    script = tmp_path / "pager.sh"
    paged = tmp_path / "paged"
    script.write_text({"record": f'#!/bin/sh\necho "LESS=$LESS" > {paged}\ncat >> {paged}\n',
                       "quit": f'#!/bin/sh\nhead -c 10 > {paged}\n'}.get(pager, ""))
    script.chmod(0o755)
    child_env = {k: v for k, v in os.environ.items() if k not in ("PAGER", "LESS", "NO_COLOR")}
    child_env["TERM"] = "xterm"
    if pager is not None:
        child_env["PAGER"] = str(script) if pager in ("record", "quit") else pager
    child_env.update(env or {})
    master, slave = pty.openpty()
    reader, screen = read_terminal(master)
    proc = subprocess.run([sys.executable, "-m", "warehouse", "--db", db_url, "show", *args], stdout=slave,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env, timeout=120)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    recorded = paged.read_bytes().decode() if paged.exists() else None
    return proc.returncode, screen.decode(errors="replace"), proc.stderr.decode(), recorded


def test_a_terminal_pages_through_pager(url, engine, tmp_path):
    multi_step(engine)
    code, screen, err, paged = on_terminal(url, tmp_path, "ms__x1")
    assert code == 0, err
    # The pager got the whole text (LESS=FRX set, as git sets it), the terminal none of it.
    assert paged.startswith("LESS=FRX\n")
    assert "── step build · reward 0.0 · 3 turns ──\nrewards   reward 0.0 · speed 0.5" in paged
    assert "→ call bash(cmd=\"ls -la\")" in paged and "other episodes" in paged
    assert "step build" not in screen
    # Colour on a terminal: thinking dimmed (less -R passes it on).
    assert "\x1b[2m    [thinking]\x1b[0m" in paged
    # A LESS of the user's own is kept.
    assert on_terminal(url, tmp_path, "ms__x1", env={"LESS": "-S"})[3].startswith("LESS=-S\n")
    # NO_COLOR: no escapes.
    assert "\x1b" not in on_terminal(url, tmp_path, "ms__x1", env={"NO_COLOR": "1"})[3]


@pytest.mark.parametrize("how", ["--no-pager", "PAGER=cat", "PAGER=", "pipe"])
def test_no_pager(url, engine, tmp_path, how):
    multi_step(engine)
    if how == "pipe":  # not a terminal: no pager whatever PAGER says, and no colour
        proc = cli(url, "show", "ms__x1")
        assert proc.returncode == 0 and "── step setup" in proc.stdout and "\x1b" not in proc.stdout
        return
    pager = how[len("PAGER="):] if how.startswith("PAGER=") else "record"
    code, screen, err, paged = on_terminal(url, tmp_path, "ms__x1", *(["--no-pager"] if how == "--no-pager" else []),
                                           pager=pager)
    assert code == 0, err
    assert paged is None and "── step setup" in screen


def test_a_pager_left_early_is_no_error(url, engine, tmp_path):
    source = writer.ensure_source(engine, "parquet", "/fixture/long", "long")
    with writer.unit(engine, source, "unit-long", "hash-long") as u:
        u.add_trials([Trial(run_key="run-long", trial_name="long__0", reward=1.0, result="1.0", episodes=[
            Episode(0, [Turn("user" if i % 2 else "assistant", f"line {i}\n" * 200) for i in range(200)])])])
    code, screen, err, paged = on_terminal(url, tmp_path, "long__0", pager="quit")
    # The pager read 10 bytes of some 2 MB and left: the rest is dropped without a word.
    assert code == 0 and err == "" and paged == "trial     "
    # A pager that is not installed: the text is written to the terminal instead.
    code, screen, err, _ = on_terminal(url, tmp_path, "task2__b0", pager="no-such-pager-xyz -R")
    assert code == 0 and "tests pass" in screen, err


def test_cli_prefix_trace_and_turns(url, engine):
    multi_step(engine)
    proc = cli(url, "show", "ms__", "--turns", "3:5")
    assert proc.returncode == 0, proc.stderr
    assert "[3] assistant" in proc.stdout and "[4] user" in proc.stdout and "[5]" not in proc.stdout
    assert "turns     3:5 of 7 (--turns)" in proc.stdout
    assert "── step setup · reward 1.0 · 4 turns ──\n" in proc.stdout  # its turn 3 is shown, turns 0 to 2 not
    assert "── step build · reward 0.0 · 3 turns ──\nrewards   reward 0.0 · speed 0.5\n" in proc.stdout
    sub = cli(url, "show", "ms__x1", "--trace", "step:build/summarization-1-summary", "--format", "json")
    assert [e["trace_source"] for e in json.loads(sub.stdout)["episodes"]] == ["step:build/summarization-1-summary"]
    bad = cli(url, "show", "ms__x1", "--turns", "1:x")
    assert bad.returncode == 1 and bad.stderr == "Error: --turns is A:B (turn numbers, as a Python slice), not '1:x'\n"
    assert cli(url, "show", "ms__x1", "--all", "--trace", "main").returncode == 2
    ambiguous = cli(url, "show", "task1__")
    assert ambiguous.returncode == 1 and ambiguous.stderr.count("\n") == 1, ambiguous.stderr
