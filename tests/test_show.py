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
    assert obj["episodes"][0]["turns"][0] == {"idx": 0, "role": "user", "content": NUL_TEXT, "extra": None}
    verifier = cli(url, "show", "task1__b0")
    assert "verifier output" in verifier.stdout and "AssertionError" in verifier.stdout
    ambiguous = cli(url, "show", "shared")
    assert ambiguous.returncode == 1 and ambiguous.stderr.startswith("Error: trial 'shared' is in 2 runs")
    assert cli(url, "show", "task2__b0", "--episode", "0", "--all").returncode == 2
    assert cli(url, "show", "task2__b0", "--format", "csv").returncode == 2
