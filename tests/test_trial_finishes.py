"""A trial ingested while it ran (no result.json, part of its agent files) and again once it
finished leaves, on SQLite and PostgreSQL, exactly what one ingest of the finished trial leaves:
every trial column, detail whole, and the summaries; a snapshot of it running ingested after
that changes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from conftest import _fresh_pg
from ingest.pipeline import ingest
from test_summaries import assert_exact
from trace_trees import FIXTURE_JOBS, make_trace_tree
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url

CHAIN = Path("fixtures") / "pinchbench-147-kimi2.6" / "task-session-chain-analysis__UGpJKzs"


@pytest.fixture
def clean_engine(backend, tmp_path, request) -> Iterator:
    """A second fresh warehouse on the same backend, for the single clean ingest."""
    @contextmanager
    def url() -> Iterator[str]:
        if backend == "sqlite":
            yield f"sqlite:///{tmp_path / 'clean.db'}"
        else:
            yield from _fresh_pg(request.getfixturevalue("pg_template"))

    with url() as clean_url:
        engine = make_engine(resolve_url(clean_url))
        schema.upgrade(engine)
        yield engine
        engine.dispose()


def finished_tree(root: Path) -> Path:
    """A job of three single-step trials, an RL trial with no job, and the fixture job (a
    single-step and a 4-step trial), every trial finished."""
    make_trace_tree(root, seed=11, job_trials=3, rl_trials=1)
    return root


def make_running(trial: Path) -> None:
    """The trial as it was while it ran: no result.json nor verifier output, and only the
    first agent steps of its trajectory (a multi-step trial: its last step not started)."""
    (trial / "result.json").unlink()
    steps = trial / "steps"
    if steps.is_dir():
        shutil.rmtree(sorted(steps.iterdir())[0])  # final-summary, the last step run
        return
    shutil.rmtree(trial / "verifier")
    path = trial / "agent" / "trajectory.json"
    data = json.loads(path.read_text())
    data["steps"] = data["steps"][:4]  # system, user, two agent steps
    path.write_text(json.dumps(data, indent=2))


def everything(engine) -> dict[str, Any]:
    """Every trial column and summary row, keyed by natural keys (ids differ between warehouses)."""
    with engine.connect() as conn:
        def rows(sql: str) -> dict[tuple, dict]:
            result = conn.execute(text(sql)).mappings().all()
            return {tuple(r[k] for k in r if k.startswith("key_")): {k: v for k, v in r.items()
                                                                       if not k.startswith("key_")}
                    for r in result}

        trials = rows("""
            SELECT r.run_key AS key_run, t.trial_name AS key_trial, k.name AS task,
                   m.content_hash AS instruction, t.* FROM trials t
            JOIN runs r ON r.id = t.run_id LEFT JOIN tasks k ON k.id = t.task_id
            LEFT JOIN messages m ON m.id = t.instruction_id""")
        for row in trials.values():
            for column in ("id", "run_id", "task_id", "instruction_id", "created_at"):  # the warehouse's own
                row.pop(column)
            for column in ("detail", "rewards"):  # JSON, read as text by a plain SQL statement
                if isinstance(row[column], str):
                    row[column] = json.loads(row[column])
        return {
            "trials": trials,
            "trial_lengths": rows("""
                SELECT r.run_key AS key_run, t.trial_name AS key_trial, l.turns, l.chars, l.input_tokens,
                       l.output_tokens FROM trial_lengths l JOIN trials t ON t.id = l.trial_id
                JOIN runs r ON r.id = l.run_id"""),
            "run_task_outcomes": rows("""
                SELECT r.run_key AS key_run, k.name AS key_task, o.* FROM run_task_outcomes o
                JOIN runs r ON r.id = o.run_id LEFT JOIN tasks k ON k.id = o.task_id"""),
            "run_task_breakdown": rows("""
                SELECT r.run_key AS key_run, k.name AS key_task, b.agent AS key_agent, b.model AS key_model,
                       b.exception_type AS key_exception, b.* FROM run_task_breakdown b
                JOIN runs r ON r.id = b.run_id LEFT JOIN tasks k ON k.id = b.task_id"""),
        }


def without_ids(state: dict[str, Any]) -> dict[str, Any]:
    return {table: {key: {c: v for c, v in row.items() if c not in ("id", "run_id", "task_id")}
                    for key, row in rows.items()} for table, rows in state.items()}


def test_a_finished_trial_replaces_what_was_known_while_it_ran(engine, clean_engine, tmp_path):
    finished = finished_tree(tmp_path / "finished")
    running_trials = [sorted((finished / "job-a").glob("task-*"))[0], finished / CHAIN]
    live = shutil.copytree(finished, tmp_path / "live")
    for trial in running_trials:
        make_running(live / trial.relative_to(finished))

    assert ingest(clean_engine, [str(finished)]).errors == []
    clean = without_ids(everything(clean_engine))

    assert ingest(engine, [str(live)]).errors == []
    while_running = without_ids(everything(engine))
    for trial in running_trials:
        key = next(k for k in clean["trials"] if k[1] == trial.name)
        assert while_running["trials"][key]["status"] == "incomplete"
        # The running version really differs where the finished one has more to say.
        differing = {c for c, v in while_running["trials"][key].items() if clean["trials"][key][c] != v}
        assert {"status", "detail", "reward", "result", "finished_at"} <= differing
        assert set(while_running["trials"][key]["detail"]) != set(clean["trials"][key]["detail"])
        if trial.parent.name == "job-a":
            # Its phase timings, reward source and provider fallback were those of a running trial.
            assert while_running["trials"][key]["detail"]["hub_fallbacks"] == {"model_provider": "unknown-provider"}
            assert "rewards_source" not in while_running["trials"][key]["detail"]
            assert clean["trials"][key]["detail"]["rewards_source"] == "result.json"
        else:  # its task was the one config.json names; result.json names another
            assert (while_running["trials"][key]["task"], clean["trials"][key]["task"]) == (
                "task-session-chain-analysis", "pinchbench/task-session-chain-analysis")

    for trial in running_trials:  # the trials finish: their final files are written
        shutil.rmtree(live / trial.relative_to(finished))
        shutil.copytree(trial, live / trial.relative_to(finished))
    summary = ingest(engine, [str(live)])
    assert summary.errors == [] and summary.units_loaded == 2
    after = without_ids(everything(engine))
    for table in after:
        for key in clean[table]:
            assert after[table].get(key) == clean[table][key], (table, key)
        assert after[table].keys() == clean[table].keys(), (table, after[table].keys() ^ clean[table].keys())
    assert_exact(engine)
    assert sum(row["n_incomplete"] for row in after["run_task_outcomes"].values()) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM conflicts")).scalar() == 0
    assert ingest(engine, [str(live)]).units_loaded == 0  # and a re-ingest adds nothing

    # A copy of a running snapshot, ingested after the finished trial: nothing changes.
    stale = shutil.copytree(finished, tmp_path / "stale" / "copy")
    for trial in running_trials:
        make_running(stale / trial.relative_to(finished))
    assert ingest(engine, [str(stale)]).errors == []
    assert without_ids(everything(engine)) == clean
    assert_exact(engine)
