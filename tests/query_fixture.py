"""A small warehouse for the query-surface tests (canned queries, sql, search, show), loaded
through the real ingest writer, with every number the tests expect derivable by hand.

run-a (agent terminus, model m1; source fixture-a, and one trial also in fixture-b)
  task1  5 attempts, rewards 1, 0, 1, 0, 0        tokens in 10..50, out 1..5, cached 0, 5, 10 (the
                                                  first three); cost $0.01, 0.02, none, 0.04, 0.05;
                                                  started 10:00..14:00
  task2  3 attempts, rewards 0.5, none (AgentTimeoutError), 0
  task3  2 attempts, rewards 1, 1                 (the first is named "shared")
  task4  1 attempt, incomplete: no reward, no episodes
run-b (agent terminus; model m2, task3 on m1; source fixture-b)
  task1  4 attempts, rewards 0, 0, 0, 0           (the first has verifier output with "error")
  task2  3 attempts, rewards 1, 0, none (RuntimeError)   (the first has 2 episodes, see below)
  task3  2 attempts, rewards 1, 0
run-c (agent openhands, model m1; source fixture-a)
  task1  1 attempt "shared", reward 1; 2 episodes; tokens in 100, out 10, cached 40; cost $0.25
  (none) 1 attempt "c2", reward 1; a message holding NUL; tokens in 300; cost $0.5

Every other trial has one episode: user "do it", assistant "done" (2 turns, 9 characters).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import forked_cli
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer

DEFAULT_TURNS = [("user", "do it"), ("assistant", "done")]

B_TASK2_EP0 = [("user", "Fix parser"), ("assistant", "Found an ERROR here")]
B_TASK2_EP1 = B_TASK2_EP0 + [("user", "run tests"), ("assistant", "tests pass")]  # 4 turns, 48 chars
C1_EP0 = [("user", "hello"), ("assistant", "hi")]
C1_EP1 = C1_EP0 + [("user", "Déjà vu: ÉCOLE 100% done"), ("assistant", "1000 items")]  # 4 turns, 41 chars
NUL_TEXT = "binary\x00data with needle-xyz inside"
C2_TURNS = [("user", NUL_TEXT), ("assistant", "ok")]  # 2 turns, 36 chars
VERIFIER_B = "FAILED: AssertionError: expected error"
TIMEOUT_MESSAGE = "Agent execution timed out after 540.0 seconds"
T0 = datetime(2024, 1, 1, 10, 0, tzinfo=timezone.utc)


def _episodes(*conversations: list[tuple[str, str]]) -> list[Episode]:
    return [Episode(episode_index=i, turns=[Turn(role, text) for role, text in conv])
            for i, conv in enumerate(conversations)]


def _trial(run: str, name: str, task: str | None, reward: float | None, *, exc: str | None = None,
           status: str = "complete", agent: str = "terminus", model: str = "m1",
           episodes: list[Episode] | None = None, **fields) -> Trial:
    result = exc if exc else (None if reward is None else str(reward))
    return Trial(run_key=run, trial_name=name, task_name=task, reward=reward, result=result,
                 exception_type=exc, status=status, agent=agent, model=model,
                 episodes=_episodes(DEFAULT_TURNS) if episodes is None else episodes, **fields)


def run_a() -> list[Trial]:
    trials = [
        _trial("run-a", f"task1__a{i}", "task1", r, n_input_tokens=10 * (i + 1), n_output_tokens=i + 1,
               n_cache_tokens=5 * i if i < 3 else None, cost_usd=None if i == 2 else (i + 1) / 100,
               started_at=T0 + timedelta(hours=i))
        for i, r in enumerate([1.0, 0.0, 1.0, 0.0, 0.0])
    ]
    trials += [
        _trial("run-a", "task2__a0", "task2", 0.5),
        _trial("run-a", "task2__a1", "task2", None, exc="AgentTimeoutError", exception_message=TIMEOUT_MESSAGE),
        _trial("run-a", "task2__a2", "task2", 0.0),
        _trial("run-a", "shared", "task3", 1.0),
        _trial("run-a", "task3__a1", "task3", 1.0),
        _trial("run-a", "task4__a0", "task4", None, status="incomplete", episodes=[]),
    ]
    return trials


def run_b() -> list[Trial]:
    trials = [_trial("run-b", "task1__b0", "task1", 0.0, model="m2", verifier_output=VERIFIER_B)]
    trials += [_trial("run-b", f"task1__b{i}", "task1", 0.0, model="m2") for i in (1, 2, 3)]
    trials += [
        _trial("run-b", "task2__b0", "task2", 1.0, model="m2", episodes=_episodes(B_TASK2_EP0, B_TASK2_EP1)),
        _trial("run-b", "task2__b1", "task2", 0.0, model="m2"),
        _trial("run-b", "task2__b2", "task2", None, model="m2", exc="RuntimeError"),
        _trial("run-b", "task3__b0", "task3", 1.0, model="m1"),
        _trial("run-b", "task3__b1", "task3", 0.0, model="m1"),
    ]
    return trials


def run_c() -> list[Trial]:
    return [
        _trial("run-c", "shared", "task1", 1.0, agent="openhands", episodes=_episodes(C1_EP0, C1_EP1),
               n_input_tokens=100, n_output_tokens=10, n_cache_tokens=40, cost_usd=0.25),
        _trial("run-c", "c2", None, 1.0, agent="openhands", episodes=_episodes(C2_TURNS), n_input_tokens=300,
               cost_usd=0.5),
    ]


def build(engine, keep: Callable[[Trial], bool] = lambda trial: True) -> None:
    """Load the three runs as three units from two sources (only the trials `keep` keeps: a
    warehouse of what a filter selects, which the filter tests compare against)."""
    source_a = writer.ensure_source(engine, "parquet", "/fixture/a", "fixture-a")
    source_b = writer.ensure_source(engine, "parquet", "/fixture/b", "fixture-b")
    a_trials = run_a()
    # The same run-a trial again, from a second source: provenance only, no new rows.
    for source, unit, trials in ((source_a, "unit-a", a_trials), (source_a, "unit-c", run_c()),
                                 (source_b, "unit-b", run_b() + [a_trials[0]])):
        kept = [trial for trial in _numbered(trials) if keep(trial)]
        if kept:
            with writer.unit(engine, source, unit, f"hash-{unit[-1]}") as u:
                u.add_trials(kept)


def _numbered(trials: list[Trial]) -> list[Trial]:
    """The trials with each episode's row number in its unit as the writer numbers a whole
    unit's rows (in order, from 0), so that a unit of fewer trials keeps the others' numbers."""
    number, out = 0, []
    for trial in trials:
        episodes = []
        for episode in trial.episodes:
            episodes.append(replace(episode, row_number=number))
            number += 1
        out.append(replace(trial, episodes=episodes))
    return out


def cli(db_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return forked_cli.run(["--db", db_url, *args], input=stdin, timeout=120)
