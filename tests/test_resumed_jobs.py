"""A resumed job counts what Harbor counts, on SQLite and PostgreSQL. `harbor jobs resume` deletes
the folder of every trial without a result.json and runs the trial again under a new name: the
unfinished trial the warehouse stored while it ran is removed on the next ingest of the job's
folder (trials, provenance, summaries, messages and tasks as if it had never been loaded), and a
finished trial, a trial of another job or of a job whose folder is gone, is never removed. And
the task a running trial was guessed under leaves `tasks` when the trial finishes under another."""

from __future__ import annotations

import json
import random
import shutil
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from canonical import differences, dump
from helpers import hub_row, write_shard
from ingest.pipeline import ingest
from test_summaries import assert_exact
from test_trial_finishes import clean_engine  # noqa: F401 (a fixture: a second fresh warehouse)
from trace_trees import make_trial
from warehouse.queries import QUERIES, run_canned

JOB_ID = str(uuid.UUID(int=25))
OTHER_JOB_ID = str(uuid.UUID(int=26))
A, B, C, D = "t-a__AAAAAAA", "t-b__BBBBBBB", "t-c__CCCCCCC", "t-b__DDDDDDD"
REWARDS = {A: 1.0, C: 0.0, D: 1.0}
REMOVED = "trials: 1 removed (an unfinished trial the job deleted)"


def add_trial(job: Path, name: str, *, job_id: str = JOB_ID, reward: float = 1.0, running: bool = False) -> Path:
    """A trial of the job, its task `demo/<t-x>`; its config.json names the task without the
    dataset (`<t-x>`), as pinchbench's do, so a running trial's task (guessed from config.json)
    is not the finished one's. `running`: no result.json nor verifier output yet."""
    trial = make_trial(job / name, random.Random(name), task=f"demo/{name.split('__')[0]}", job_id=job_id,
                       n_agent_steps=3, words=12)
    config = json.loads((trial / "config.json").read_text())
    config["task"] = {"name": name.split("__")[0]}
    (trial / "config.json").write_text(json.dumps(config, indent=2))
    result = json.loads((trial / "result.json").read_text())
    result["config"] = config
    result["verifier_result"] = {"rewards": {"reward": reward}}
    (trial / "result.json").write_text(json.dumps(result, indent=2))
    (trial / "verifier" / "reward.txt").write_text(f"{reward}\n")
    if running:
        (trial / "result.json").unlink()
        shutil.rmtree(trial / "verifier")
    return trial


def write_job(job: Path, done: dict[str, float], *, job_id: str = JOB_ID, finished: bool, n_total: int = 3) -> None:
    """The job's config.json and result.json as Harbor keeps them: every finished trial listed
    under its reward."""
    job.mkdir(parents=True, exist_ok=True)
    (job / "config.json").write_text(json.dumps({"job_name": job.name, "n_attempts": 1}))
    by_reward: dict[str, list[str]] = {}
    for name, reward in done.items():
        by_reward.setdefault(str(reward), []).append(name)
    (job / "result.json").write_text(json.dumps({
        "id": job_id, "started_at": "2026-05-27T13:00:00.000000",
        "finished_at": "2026-05-28T14:00:00.000000" if finished else None, "n_total_trials": n_total,
        "stats": {"n_completed_trials": len(done), "n_errored_trials": 0, "evals": {"terminus-2__gpt-4o__adhoc": {
            "n_trials": len(done), "n_errors": 0, "reward_stats": {"reward": by_reward}, "exception_stats": {}}}}}))


def running_job(root: Path) -> Path:
    """root/job-a while B runs: A and C finished."""
    job = root / "job-a"
    write_job(job, {A: REWARDS[A], C: REWARDS[C]}, finished=False)
    for name in (A, C):
        add_trial(job, name, reward=REWARDS[name])
    add_trial(job, B, running=True)
    return job


def resume(job: Path) -> None:
    """`harbor jobs resume`: B's folder deleted, B run again as D, the job finished."""
    shutil.rmtree(job / B)
    add_trial(job, D, reward=REWARDS[D])
    write_job(job, REWARDS, finished=True)


def trial_names(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT trial_name, status FROM trials")).all())


def task_names(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT name FROM tasks")).scalars())


def query(url: str, name: str) -> list[dict]:
    result = run_canned(url, QUERIES[name], {})
    return [dict(zip(result.columns, row)) for row in result.rows]


def test_a_resumed_job_counts_what_harbor_counts(db_url, engine, clean_engine, tmp_path):  # noqa: F811
    root = tmp_path / "jobs"
    job = running_job(root)
    first = ingest(engine, [str(root)])
    assert first.errors == [] and first.trials_incomplete == 1 and REMOVED not in first.lines()
    assert trial_names(engine) == {A: "complete", B: "incomplete", C: "complete"}
    assert "t-b" in task_names(engine)  # B's task, guessed from its config.json

    resume(job)
    summary = ingest(engine, [str(root)])
    assert summary.errors == [] and summary.trials_removed == 1
    assert REMOVED in summary.lines()
    assert trial_names(engine) == {A: "complete", C: "complete", D: "complete"}  # Harbor's 3, not 4
    [row] = query(db_url, "runs")
    assert (row["trials"], row["complete"], row["incomplete"], row["pass_rate"]) == (3, 3, 0, pytest.approx(2 / 3))
    [row] = query(db_url, "pass-rate")
    assert (row["trials"], row["successes"], row["pass_rate"]) == (3, 2, pytest.approx(2 / 3))
    assert_exact(engine)

    # What a warehouse that only ever saw the resumed job holds, provenance and all; the ledger
    # adds one unit, named for the job's folder, that says what it removed. B's own unit is gone.
    assert ingest(clean_engine, [str(root)]).errors == []
    ours, clean = dump(engine, order_independent=True), dump(clean_engine, order_independent=True)
    ledger, clean_ledger = ours.pop("loads"), clean.pop("loads")
    assert differences(ours, clean) == []
    [removal] = [json.loads(row) for row in set(ledger) - set(clean_ledger)]
    assert set(clean_ledger) < set(ledger)
    assert (removal["unit"], removal["detail"], removal["n_trials"]) == ("job-a", {"removed_trials": [B]}, 0)
    assert "t-b" not in task_names(engine)

    # Ingested again: nothing changes, nothing is reported removed.
    before = dump(engine)
    again = ingest(engine, [str(root)])
    assert (again.units_loaded, again.trials_removed, again.errors) == (0, 0, [])
    assert dump(engine) == before


@pytest.mark.parametrize("task_known", [True, False], ids=["task", "no-task"])
def test_removed_before_the_trial_runs_again(engine, tmp_path, task_known):
    """B's folder deleted and D not started yet: no trial folder changed, B goes all the same
    (its summary rows too, under its task or, its config.json naming none, under no task)."""
    root = tmp_path / "jobs"
    job = running_job(root)
    if not task_known:
        config = json.loads((job / B / "config.json").read_text())
        del config["task"]
        (job / B / "config.json").write_text(json.dumps(config))
    assert ingest(engine, [str(root)]).errors == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run_task_outcomes WHERE task_id IS NULL")).scalar() == (
            0 if task_known else 1)
    shutil.rmtree(job / B)
    summary = ingest(engine, [str(root)])
    assert (summary.errors, summary.units_skipped, summary.trials_removed) == ([], 2, 1)
    assert trial_names(engine) == {A: "complete", C: "complete"}
    assert_exact(engine)


def test_a_finished_trial_is_never_removed(engine, tmp_path):
    """Archives delete trial folders once they are ingested: A's folder gone keeps A. And B,
    finished after the warehouse saw it run, then archived before it was ingested again: the
    job's result.json counts it, so it is kept (as the warehouse last saw it)."""
    root = tmp_path / "jobs"
    job = running_job(root)
    assert ingest(engine, [str(root)]).errors == []
    shutil.rmtree(job / A)
    shutil.rmtree(job / B)
    write_job(job, {A: 1.0, B: 0.0, C: 0.0}, finished=True)
    summary = ingest(engine, [str(root)])
    assert (summary.errors, summary.trials_removed) == ([], 0)
    assert trial_names(engine) == {A: "complete", B: "incomplete", C: "complete"}


def test_nothing_removed_when_the_job_folder_is_gone(engine, tmp_path):
    root = tmp_path / "jobs"
    running_job(root)
    other = root / "job-b"
    write_job(other, {"t-e__EEEEEEE": 1.0}, job_id=OTHER_JOB_ID, finished=True, n_total=1)
    add_trial(other, "t-e__EEEEEEE", job_id=OTHER_JOB_ID)
    assert ingest(engine, [str(root)]).errors == []
    shutil.rmtree(root / "job-a")  # archived whole
    summary = ingest(engine, [str(root)])
    assert (summary.errors, summary.trials_removed) == ([], 0)
    gone = ingest(engine, [str(root / "job-a")])
    assert gone.trials_removed == 0 and len(gone.errors) == 1
    assert trial_names(engine) == {A: "complete", B: "incomplete", C: "complete", "t-e__EEEEEEE": "complete"}


def test_a_trial_of_another_job_is_never_touched(engine, tmp_path):
    """job-b's running trial F is deleted too; an ingest of job-a alone removes job-a's B only,
    and an ingest of one of job-a's trial folders (not the whole job) removes nothing."""
    root = tmp_path / "jobs"
    job = running_job(root)
    other = root / "job-b"
    write_job(other, {}, job_id=OTHER_JOB_ID, finished=False, n_total=1)
    add_trial(other, "t-f__FFFFFFF", job_id=OTHER_JOB_ID, running=True)
    assert ingest(engine, [str(root)]).errors == []
    shutil.rmtree(other / "t-f__FFFFFFF")
    shutil.rmtree(job / B)

    one_trial = ingest(engine, [str(job / A)])
    assert (one_trial.errors, one_trial.trials_removed) == ([], 0)
    assert set(trial_names(engine)) == {A, B, C, "t-f__FFFFFFF"}

    summary = ingest(engine, [str(job)])
    assert (summary.errors, summary.trials_removed) == ([], 1)
    assert trial_names(engine) == {A: "complete", C: "complete", "t-f__FFFFFFF": "incomplete"}
    assert_exact(engine)


@pytest.mark.parametrize("hub_first", [True, False], ids=["hub-first", "folder-first"])
def test_a_trial_a_hub_dataset_holds_is_kept(engine, tmp_path, hub_first):
    """B, stored while it ran and also held by a Hub dataset (which has only finished trials):
    finished, so its folder gone removes nothing, whichever came first."""
    root = tmp_path / "jobs"
    job = running_job(root)
    shard = write_shard(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet", [
        hub_row(B, 0, [("user", "solve t-b"), ("assistant", "done")], run_id=JOB_ID, task="demo/t-b", result="0.0")])
    for source in ([shard.parent.parent, root] if hub_first else [root, shard.parent.parent]):
        assert ingest(engine, [str(source)]).errors == []
    resume(job)
    summary = ingest(engine, [str(root)])
    assert (summary.errors, summary.trials_removed) == ([], 0)
    assert trial_names(engine) == {A: "complete", B: "complete", C: "complete", D: "complete"}


def test_the_guessed_task_goes_when_the_trial_finishes(engine, clean_engine, tmp_path):  # noqa: F811
    """B, ingested while it ran, was guessed to be of task `t-b` (its config.json); finished, it
    is of `demo/t-b`, and `t-b` leaves `tasks`: the warehouse is the one a single ingest of the
    finished job gives."""
    root = tmp_path / "jobs"
    running_job(root)
    finished = tmp_path / "finished"
    shutil.copytree(root, finished)
    shutil.rmtree(finished / "job-a" / B)
    add_trial(finished / "job-a", B, reward=1.0)
    write_job(finished / "job-a", {A: 1.0, B: 1.0, C: 0.0}, finished=True)
    assert ingest(engine, [str(root)]).errors == []
    assert "t-b" in task_names(engine)

    shutil.rmtree(root)
    shutil.copytree(finished, root)
    assert ingest(engine, [str(root)]).errors == []
    assert "t-b" not in task_names(engine)
    assert ingest(clean_engine, [str(root)]).errors == []
    ours, clean = dump(engine, order_independent=True), dump(clean_engine, order_independent=True)
    for provenance in ("loads", "trial_loads", "episode_loads"):
        ours.pop(provenance), clean.pop(provenance)
    assert differences(ours, clean) == []
    assert_exact(engine)


def test_a_guessed_task_another_trial_is_of_stays(engine, tmp_path):
    """Another job's finished trial is of task `t-b` (its result.json says so): when B finishes
    as `demo/t-b`, `t-b` stays, and so does that trial's summary row."""
    other = tmp_path / "other" / "job-b"
    write_job(other, {"t-b__GGGGGGG": 1.0}, job_id=OTHER_JOB_ID, finished=True, n_total=1)
    add_trial(other, "t-b__GGGGGGG", job_id=OTHER_JOB_ID)
    result = json.loads((other / "t-b__GGGGGGG" / "result.json").read_text())
    result["task_name"] = "t-b"
    (other / "t-b__GGGGGGG" / "result.json").write_text(json.dumps(result))
    root = tmp_path / "jobs"
    job = running_job(root)
    for source in (other.parent, root):
        assert ingest(engine, [str(source)]).errors == []
    shutil.rmtree(job / B)
    add_trial(job, B, reward=1.0)
    assert ingest(engine, [str(root)]).errors == []
    assert {"t-b", "demo/t-b"} <= task_names(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT t.trial_name FROM trials t JOIN tasks k ON k.id = t.task_id "
                                 "WHERE k.name = 't-b'")).scalars().all() == ["t-b__GGGGGGG"]
    assert_exact(engine)


def test_a_trial_a_copy_still_holds_is_kept(engine, tmp_path):
    """B was loaded from a copy of the running job too, and that copy still has B's folder: the
    copy holds it, so the resumed job's ingest keeps it (in whichever order the two come)."""
    root = tmp_path / "jobs"
    job = running_job(root)
    shutil.copytree(root, tmp_path / "copy")
    for source in (root, tmp_path / "copy"):
        assert ingest(engine, [str(source)]).errors == []
    resume(job)
    summary = ingest(engine, [str(root)])
    assert (summary.errors, summary.trials_removed) == ([], 0)
    assert trial_names(engine) == {A: "complete", B: "incomplete", C: "complete", D: "complete"}


def test_an_unreadable_job_result_removes_nothing(engine, tmp_path):
    """Whether the job counts B cannot be told: nothing is removed, and the job's result.json is
    named in one line."""
    root = tmp_path / "jobs"
    job = running_job(root)
    assert ingest(engine, [str(root)]).errors == []
    shutil.rmtree(job / B)
    (job / "result.json").write_text('{"id": "')
    summary = ingest(engine, [str(root)])
    assert summary.trials_removed == 0 and summary.errors
    assert all(str(job / "result.json") in error and "\n" not in error for error in summary.errors)
    assert trial_names(engine) == {A: "complete", B: "incomplete", C: "complete"}
