"""What a trace directory holds beyond Harbor's rows is kept, and what Harbor's rows hold comes
back: observations no conversation turn carries, later steps and subagent / continuation refs
(kept in turn and episode extra, shown by `show --all`, never exported), on both backends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import text

from ingest.pipeline import ingest
from ingest.read.traces import discover, read_trial, run_key_for
from order_sources import SUMMARY_REF, agent_step, subagent_trial
from order_sources import write_json as _write
from query_fixture import cli
from warehouse.export import export_hub
from warehouse.filters import Filters
from warehouse.queries import QUERIES, run_canned
from warehouse.show import load_trajectory, to_text

FIXTURE_JOB = Path(__file__).parent / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
FIXTURE_JOB_UUID = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"



def _simple_trial(path: Path, *, model: str, reward: float = 1.0, job_id: str | None = None,
                  **result_extra) -> Path:
    """A finished one-episode trial directory whose agent ran `model`."""
    config = {"trial_name": path.name, "job_id": job_id, "agent": {"name": "terminus-2", "model_name": model}}
    _write(path / "config.json", config)
    _write(path / "result.json", {
        "task_name": "demo/" + path.name.split("__")[0], "trial_name": path.name, "config": config,
        "agent_info": {"name": "terminus-2", "model_info": {"name": model, "provider": None}},
        "verifier_result": {"rewards": {"reward": reward}}, "started_at": "2026-02-01T10:00:00Z", **result_extra})
    _write(path / "agent" / "trajectory.json", {
        "schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "terminus-2", "version": "2"},
        "steps": [{"step_id": 1, "source": "user", "message": "Do it"}, agent_step(2, "done", None)]})
    return path


def _rows(engine, sql: str, **params) -> list:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def _trial(root: Path) -> Path:
    """A trial whose trajectory has all that Harbor's export leaves out: a system step's
    observation (the summarization's subagent ref), an observation with no content, the last agent
    step's observation, a step after it, and a continuation file."""
    trial = subagent_trial(root / "job")
    main = json.loads((trial / "agent" / "trajectory.json").read_text())
    main["steps"].append({"step_id": 6, "source": "user", "message": "LATER-USER-STEP"})
    _write(trial / "agent" / "trajectory.json", main)
    return trial


def test_what_no_row_holds_is_kept_shown_and_not_exported(engine, db_url, tmp_path):
    trial = _trial(tmp_path / "traces")
    unit = next(u for u in discover(trial) if u.kind == "trial")
    rendered = read_trial(unit, run_key_for(unit))
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []

    t = load_trajectory(engine, "keep__1234567", all_episodes=True)
    main = [e for e in t["episodes"] if e["trace_source"] == "main"]
    assert [e["episode_index"] for e in main] == [0, 1, 2, 3]
    by_text = {turn["content"]: turn["extra"] for turn in main[2]["turns"]}
    # The system step's observation (a subagent ref, no text) stays on its turn.
    assert by_text["Performed context summarization"]["observation"] == {"results": [{"subagent_trajectory_ref": SUMMARY_REF}]}
    # An agent step's observation that has no content is no turn: kept on the step's turn.
    second = next(extra for text, extra in by_text.items() if text.startswith("second"))
    assert second["observation"]["results"][0]["subagent_trajectory_ref"] == SUMMARY_REF
    # The last agent step's observation of each file, and the steps after it.
    third = next(extra for text, extra in by_text.items() if text.startswith("third"))
    assert third["observation"] == {"results": [{"source_call_id": "c5", "content": "FINAL-OBSERVATION"}]}
    assert [s["message"] for s in main[2]["extra"]["later_steps"]] == ["LATER-USER-STEP"]
    assert main[0]["extra"]["continued_trajectory_ref"] == "trajectory.cont-1.json"
    fourth = next(turn["extra"] for turn in main[3]["turns"] if turn["content"].startswith("fourth"))
    assert fourth["observation"]["results"][0]["content"] == "CONT-FINAL"
    # Tool calls stay beside them.
    assert third["tool_calls"][0]["function_name"] == "bash"

    shown = cli(db_url, "show", "keep__1234567", "--all")
    assert shown.returncode == 0, shown.stderr
    for text in ("FINAL-OBSERVATION", "CONT-FINAL", "LATER-USER-STEP",
                 "→ subagent trajectory.summarization-1-summary.json", "(continued in trajectory.cont-1.json)"):
        assert text in shown.stdout, text
    assert "FINAL-OBSERVATION" in to_text(t)

    # export hub writes Harbor's rows: exactly the rendered conversations, none of the kept extras.
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "traces")])
    rows = pq.read_table(info.files[0]).to_pylist()
    assert [(r["trace_source"], r["episode"]) for r in rows] == [
        (e.trace_source, f"episode-{e.episode_index}") for e in rendered.episodes]
    assert [r["conversations"] for r in rows] == [
        [{"content": turn.content, "role": turn.role} for turn in e.turns] for e in rendered.episodes]
    exported = json.dumps(rows)
    for text in ("FINAL-OBSERVATION", "CONT-FINAL", "LATER-USER-STEP", "summarization-1-summary.json"):
        assert text not in exported, text
    # Re-ingesting adds nothing.
    again = ingest(engine, [str(tmp_path / "traces")])
    assert (again.errors, again.episodes_new, again.units_skipped) == ([], 0, 1)


# --- smaller truths --------------------------------------------------------------------------


def test_a_naive_occurred_at_is_read_as_utc_and_flagged(engine, tmp_path):
    timeout = {"exception_type": "AgentTimeoutError", "exception_message": "timed out", "occurred_at": "2026-02-01T18:04:00.5"}
    aware = {"exception_type": "AgentTimeoutError", "exception_message": "timed out", "occurred_at": "2026-02-01T20:04:00+02:00"}
    _simple_trial(tmp_path / "traces" / "naive__1111111", model="m", exception_info=timeout)
    _simple_trial(tmp_path / "traces" / "aware__2222222", model="m", exception_info=aware)
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []
    details = {name: json.loads(d) if isinstance(d, str) else d
               for name, d in _rows(engine, "SELECT trial_name, detail FROM trials")}
    naive, tz = details["naive__1111111"], details["aware__2222222"]
    assert naive["exception"]["occurred_at"] == "2026-02-01T18:04:00.5"  # as written
    assert naive["exception"]["occurred_at_utc"] == "2026-02-01T18:04:00.500000+00:00"
    assert naive["exception"]["naive_occurred_at"] is True and naive["naive_timestamps"] is True
    assert tz["exception"]["occurred_at_utc"] == "2026-02-01T18:04:00+00:00"
    assert "naive_occurred_at" not in tz["exception"] and "naive_timestamps" not in tz


def test_a_folder_without_job_files_names_its_run(engine, db_url, tmp_path):
    # The fixture's trials name their job's UUID, but the folder holds no job files.
    jobs = tmp_path / "jobs"
    shutil.copytree(FIXTURE_JOB, jobs / FIXTURE_JOB.name)
    _simple_trial(tmp_path / "rl-exp-7" / "trace_jobs" / "a__1234567", model="m")
    assert ingest(engine, [str(jobs), str(tmp_path / "rl-exp-7")]).errors == []
    assert _rows(engine, "SELECT run_key, name FROM runs ORDER BY run_key") == [
        (FIXTURE_JOB_UUID, "pinchbench-147-kimi2.6"), ("rl-exp-7", "rl-exp-7")]
    listed = run_canned(db_url, QUERIES["runs"], {})
    assert [row[listed.columns.index("name")] for row in listed.rows] == ["pinchbench-147-kimi2.6", "rl-exp-7"]
    # The name selects the run, as a job's does.
    info = export_hub(engine, tmp_path / "out", Filters(runs=("pinchbench-147-kimi2.6",)))
    assert {r["run_id"] for r in pq.read_table(info.files[0]).to_pylist()} == {FIXTURE_JOB_UUID}
    # Re-ingesting the fixture adds nothing.
    again = ingest(engine, [str(jobs)])
    assert (again.errors, again.episodes_new, again.units_skipped) == ([], 0, 2)


def test_pass_rate_by_model_groups_a_model_across_providers(engine, db_url, tmp_path):
    root = tmp_path / "sweep"
    _simple_trial(root / "a__0000001", model="anthropic/kimi-k2.6", reward=1.0)
    _simple_trial(root / "b__0000002", model="kimi-k2.6", reward=0.0)
    _simple_trial(root / "c__0000003", model="openrouter/anthropic/claude-sonnet-4", reward=1.0)
    _simple_trial(root / "d__0000004", model="hosted_vllm/Qwen/Qwen3-8B", reward=1.0)
    assert ingest(engine, [str(root)]).errors == []
    assert _rows(engine, "SELECT model, model_name FROM trials ORDER BY trial_name") == [
        ("anthropic/kimi-k2.6", "kimi-k2.6"), ("kimi-k2.6", "kimi-k2.6"),
        ("openrouter/anthropic/claude-sonnet-4", "claude-sonnet-4"), ("hosted_vllm/Qwen/Qwen3-8B", "Qwen3-8B")]
    expected = [("Qwen3-8B", 1, 1), ("claude-sonnet-4", 1, 1), ("kimi-k2.6", 2, 1)]
    # From the summary tables (the default threshold) and from the trials (any other).
    for params in ({"by": "model"}, {"by": "model", "threshold": 0.5}):
        result = run_canned(db_url, QUERIES["pass-rate"], params)
        assert sorted(tuple(row[:3]) for row in result.rows) == expected, params
    # The raw string is what the export writes.
    info = export_hub(engine, tmp_path / "out", sources=[str(root)])
    assert sorted(r["model"] for r in pq.read_table(info.files[0]).to_pylist()) == [
        "anthropic/kimi-k2.6", "hosted_vllm/Qwen/Qwen3-8B", "kimi-k2.6", "openrouter/anthropic/claude-sonnet-4"]


def test_a_continuation_with_no_agent_step_of_its_own_is_kept(engine, db_url, tmp_path):
    """A continuation file that only speaks to the agent ends no episode: its steps are in no
    conversation, and are kept whole with the episode before them, shown and in no exported
    conversation (Harbor's `instruction` may still quote it: the lexically first trajectory file)."""
    trial = _simple_trial(tmp_path / "traces" / "job" / "cont__1234567", model="openai/gpt-4o")
    main = json.loads((trial / "agent" / "trajectory.json").read_text())
    main["continued_trajectory_ref"] = "trajectory.cont-1.json"
    _write(trial / "agent" / "trajectory.json", main)
    _write(trial / "agent" / "trajectory.cont-1.json", {
        "schema_version": "ATIF-v1.6", "session_id": "s", "agent": {"name": "terminus-2", "version": "2"},
        "steps": [{"step_id": 1, "source": "user", "message": "CONTINUATION-ONLY-USER-STEP"}]})
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []

    t = load_trajectory(engine, "cont__1234567", all_episodes=True)
    kept = t["episodes"][-1]["extra"]["stepless_files"]
    assert kept == [{"trajectory_file": "agent/trajectory.cont-1.json",
                     "steps": [{"step_id": 1, "source": "user", "message": "CONTINUATION-ONLY-USER-STEP"}]}]
    shown = cli(db_url, "show", "cont__1234567", "--all")
    assert shown.returncode == 0 and "CONTINUATION-ONLY-USER-STEP" in shown.stdout
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "traces")])
    conversations = [row["conversations"] for row in pq.read_table(info.files[0]).to_pylist()]
    assert "CONTINUATION-ONLY-USER-STEP" not in json.dumps(conversations)
