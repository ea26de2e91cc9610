"""--errors fail|exclude and --metric KEY (warehouse.queries.outcome), on both backends.

The rule: `--errors exclude` answers as a warehouse where the trials with an exception and no
reward were never loaded; `--metric KEY` as a warehouse whose reward was rewards[KEY]. Both
warehouses are loaded by the real writer, and their plain answers come from the summary tables,
so the base statements the choices take are held to the summaries too."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from conftest import another_warehouse
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from query_fixture import cli
from warehouse.db.engine import make_engine, resolve_url
from warehouse.errors import WarehouseError
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.outcome import DEFAULT_NOTE

KEY = "clawbench.accuracy"  # dotted: one key, not a path
ODD = 'odd "key\\'  # a quote and a backslash
QUERIED = ("pass-rate", "leaderboard", "solve-matrix", "pass-at-k", "compare", "compare-test")


def _trials() -> list[Trial]:
    """Two runs over 12 tasks, 3 attempts each: rewards with KEY (sometimes missing), ODD, and
    errored trials, some without a reward (the ones --errors exclude leaves out)."""
    rng = random.Random(7)
    trials = []
    for run in ("run-a", "run-b"):
        for task in range(12):
            for attempt in range(3):
                reward = rng.choice([0.0, 0.5, 1.0])
                rewards: dict[str, float] | None = {"reward": reward, ODD: 1.0 - reward}
                if rng.random() < 0.8:
                    rewards[KEY] = rng.choice([0.0, 0.25, 1.0])
                exc = None
                if rng.random() < 0.25:  # an exception: mostly with no reward at all
                    exc = "AgentTimeoutError"
                    if rng.random() < 0.7:
                        reward, rewards = None, None
                trials.append(Trial(run_key=run, trial_name=f"{run}-t{task}-{attempt}", task_name=f"task{task}",
                                    reward=reward, rewards=rewards, exception_type=exc, agent="terminus",
                                    model="m1", result=exc or str(reward),
                                    episodes=[Episode(episode_index=0, turns=[Turn("user", "do it")])]))
    return trials


def _load(engine, trials: list[Trial]) -> None:
    source = writer.ensure_source(engine, "parquet", "/fixture/outcome", "outcome")
    for run in ("run-a", "run-b"):
        with writer.unit(engine, source, f"unit-{run}", f"hash-{run}") as u:
            u.add_trials([t for t in trials if t.run_key == run])


def _given(name: str, **more: Any) -> dict[str, Any]:
    return {"a": "run-a", "b": "run-b", **more} if name in ("compare", "compare-test") else dict(more)


def _rows(url: str, name: str, **given: Any) -> tuple[list[str], list[tuple]]:
    result = run_canned(url, QUERIES[name], _given(name, **given))
    return result.columns, result.rows


def _same(got: tuple[list[str], list[tuple]], want: tuple[list[str], list[tuple]]) -> None:
    assert got[0] == want[0]
    assert got[1] == [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in want[1]]


def _errored(trial: Trial) -> bool:
    return trial.exception_type is not None and trial.reward is None


@pytest.fixture
def whole(db_url, engine) -> str:
    _load(engine, _trials())
    return db_url


@pytest.mark.parametrize("name", QUERIED)
def test_errors_exclude_answers_as_if_the_errored_trials_were_never_loaded(name, whole, backend, tmp_path, request):
    kept = [t for t in _trials() if not _errored(t)]
    assert len(kept) < len(_trials())
    with another_warehouse(backend, tmp_path / "kept", request, lambda engine: _load(engine, kept)) as url:
        for more in ({}, {"threshold": 0.5}):
            _same(_rows(whole, name, errors="exclude", **more), _rows(url, name, **more))
        # The default counts them as failed attempts: a different answer.
        assert _rows(whole, name)[1] != _rows(url, name)[1]


def _as_metric(trial: Trial, key: str) -> Trial:
    value = (trial.rewards or {}).get(key)
    return dataclasses.replace(trial, reward=value, result=trial.exception_type or str(value))


@pytest.mark.parametrize("name", QUERIED)
@pytest.mark.parametrize("key", [KEY, ODD])
def test_metric_answers_as_if_the_key_were_the_reward(name, key, whole, backend, tmp_path, request):
    metric = [_as_metric(t, key) for t in _trials()]
    with another_warehouse(backend, tmp_path / "metric", request, lambda engine: _load(engine, metric)) as url:
        for more in ({}, {"threshold": 0.25}, {"errors": "exclude"}):
            _same(_rows(whole, name, metric=key, **more), _rows(url, name, **more))
        assert _rows(whole, name, metric=key)[1] != _rows(whole, name)[1]



def test_the_note_states_the_choice(whole):
    n = sum(map(_errored, _trials()))
    for name in QUERIED:
        note = run_canned(whole, QUERIES[name], _given(name, errors="exclude")).note
        assert note == f"errors: excluded ({n} trials with an exception and no reward left out)", name
        note = run_canned(whole, QUERIES[name], _given(name, metric=KEY)).note
        assert note.splitlines() == [f"metric: rewards[{KEY!r}] >= threshold (a trial without the key has no value)",
                                     DEFAULT_NOTE], name
        # The default is said too: what counts as an attempt is never left unsaid.
        assert run_canned(whole, QUERIES[name], _given(name)).note == DEFAULT_NOTE, name
    # Narrowed, the count is the selection's.
    from warehouse.filters import Filters
    in_a = sum(1 for t in _trials() if _errored(t) and t.run_key == "run-a")
    note = run_canned(whole, QUERIES["pass-rate"], {"errors": "exclude"}, filters=Filters.of(run="run-a")).note
    assert f"({in_a} trials" in note


def test_an_unknown_key_is_one_line_naming_it_and_the_known_keys(whole):
    with pytest.raises(WarehouseError, match=r"--metric 'clawbench': no trial has that reward key \(keys: .*'reward'"):
        run_canned(whole, QUERIES["pass-rate"], {"metric": "clawbench"})
    for name in QUERIED:
        done = cli(whole, "query", name, *(["run-a", "run-b"] if name.startswith("compare") else []),
                   "--metric", "nope")
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            f"Error: --metric 'nope': no trial has that reward key (keys: 'clawbench.accuracy', "
            f"{ODD!r}, 'reward')"], done.stderr


def test_cli_prints_the_choice_as_note_lines(whole):
    done = cli(whole, "query", "pass-rate", "--metric", KEY, "--errors", "exclude", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"note: metric: rewards[{KEY!r}] >= threshold (a trial without the key has no value)"
    assert done.stderr.splitlines()[1].startswith("note: errors: excluded (")
    bad = cli(whole, "query", "pass-rate", "--errors", "drop")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_report_draws_the_chosen_outcome_and_says_so(whole, tmp_path):
    from warehouse import report

    engine = make_engine(resolve_url(whole))
    try:
        data = report.gather(engine, errors="exclude", metric=KEY)
    finally:
        engine.dispose()
    for name, got in (("pass-rate", data.pass_rate), ("leaderboard", data.leaderboard),
                      ("solve-matrix", data.solve_matrix)):
        assert got.rows == run_canned(whole, QUERIES[name], {"errors": "exclude", "metric": KEY}).rows, name
        assert got.rows != run_canned(whole, QUERIES[name]).rows, name
    out = tmp_path / "r.html"
    done = cli(whole, "report", str(out), "--errors", "exclude", "--metric", KEY)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[:2] == [
        f"note: metric: rewards[{KEY!r}] >= threshold (a trial without the key has no value)",
        f"note: errors: excluded ({sum(map(_errored, _trials()))} trials with an exception and no value left out)"]
    assert f"success on rewards[{KEY!r}]" in out.read_text(encoding="utf-8").replace("&#x27;", "'")
    bad = cli(whole, "report", str(tmp_path / "bad.html"), "--metric", "nope")
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1 and not (tmp_path / "bad.html").exists()
