"""What a trace directory holds beyond Harbor's rows is kept, and what Harbor's rows hold comes
back: observations no conversation turn carries, later steps and subagent / continuation refs
(kept in turn and episode extra, shown by `show --all`, never exported), on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from ingest.pipeline import ingest
from ingest.traces import discover, read_trial, run_key_for
from query_fixture import cli
from warehouse.export import export_hub
from warehouse.show import load_trajectory, to_text

JOB_UUID = "0b1c2d3e-0000-4000-8000-0000000000f1"
SUMMARY_REF = [{"trajectory_path": "trajectory.summarization-1-summary.json", "session_id": "s1"}]


def _write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def _agent(step_id: int, message: str, observation: dict | None) -> dict:
    step = {"step_id": step_id, "source": "agent", "message": message,
            "tool_calls": [{"tool_call_id": f"c{step_id}", "function_name": "bash", "arguments": {"cmd": "ls"}}]}
    if observation is not None:
        step["observation"] = observation
    return step


def _trial(root: Path) -> Path:
    """A trial whose trajectory has all that Harbor's export leaves out: a system step's
    observation (the summarization's subagent ref), an observation with no content, the last agent
    step's observation, a step after it, and a continuation file."""
    trial = root / "job" / "keep__1234567"
    config = {"trial_name": trial.name, "job_id": JOB_UUID, "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}}
    _write(trial / "config.json", config)
    _write(trial / "result.json", {
        "task_name": "demo/keep", "trial_name": trial.name, "config": config,
        "agent_info": {"name": "terminus-2", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "verifier_result": {"rewards": {"reward": 1.0}}, "started_at": "2026-02-01T10:00:00Z"})
    main = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "continued_trajectory_ref": "trajectory.cont-1.json", "steps": [
                {"step_id": 1, "source": "user", "message": "Do the task"},
                _agent(2, "first", {"results": [{"source_call_id": "c2", "content": "out-2"}]}),
                {"step_id": 3, "source": "system", "message": "Performed context summarization",
                 "observation": {"results": [{"subagent_trajectory_ref": SUMMARY_REF}]}},
                _agent(4, "second", {"results": [{"source_call_id": "c4", "subagent_trajectory_ref": SUMMARY_REF}]}),
                _agent(5, "third", {"results": [{"source_call_id": "c5", "content": "FINAL-OBSERVATION"}]}),
                {"step_id": 6, "source": "user", "message": "LATER-USER-STEP"},
            ]}
    cont = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "steps": [{"step_id": 1, "source": "user", "message": "Do the task", "is_copied_context": True},
                      _agent(2, "fourth", {"results": [{"source_call_id": "c2", "content": "CONT-FINAL"}]})]}
    _write(trial / "agent" / "trajectory.json", main)
    _write(trial / "agent" / "trajectory.cont-1.json", cont)
    _write(trial / "agent" / "trajectory.summarization-1-summary.json", {
        "schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2-summarization", "version": "2"},
        "steps": [{"step_id": 1, "source": "user", "message": "Summarize"}, _agent(2, "summary", None)]})
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
