"""The Harbor trace-directory reader (ingest.read.traces, ingest.read.atif): no database involved.

Expected numbers for the real fixtures were read off the fixture files by hand:
tests/fixtures/harbor/jobs/pinchbench-147-kimi2.6/<trial>/result.json and the trajectories.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

import ingest.read.trace_files as trace_files
import ingest.read.traces as traces
from ingest.read.traces import (
    TraceError,
    TraceUnit,
    discover,
    hash_trial_dir,
    load_result_json,
    read_job,
    read_trial,
    run_key_for,
)

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
CORPUS = Path(__file__).parent / "corpus"
JOB = FIXTURES / "jobs" / "pinchbench-147-kimi2.6"
CALENDAR = JOB / "task-calendar__8A83BnJ"
CHAIN = JOB / "task-session-chain-analysis__UGpJKzs"
JOB_UUID = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def write_json(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def trial_config(name: str, *, job_id=None, agent="terminus-2", model="openai/gpt-4o", **extra) -> dict:
    cfg = {
        "task": {"path": f"datasets/demo/{name.split('__')[0]}", "source": "demo"},
        "trial_name": name,
        "trials_dir": "jobs/x",
        "agent": {"name": agent, "model_name": model, "kwargs": {}, "env": {}},
        "environment": {"type": "docker"},
        "verifier": {},
        "job_id": job_id,
    }
    cfg.update(extra)
    return cfg


def trial_result(name: str, *, task="demo/task", rewards=None, exception=None, job_id=None, **extra) -> dict:
    res = {
        "id": "11111111-2222-3333-4444-555555555555",
        "task_name": task,
        "trial_name": name,
        "trial_uri": f"file:///jobs/x/{name}",
        "task_id": {"path": "datasets/demo/task"},
        "source": "demo",
        "task_checksum": "abc123",
        "config": trial_config(name, job_id=job_id),
        "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "agent_result": {"n_input_tokens": 10, "n_cache_tokens": 2, "n_output_tokens": 5, "cost_usd": 0.5, "metadata": None},
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "exception_info": exception,
        "started_at": "2026-02-01T10:00:00.000001Z",
        "finished_at": "2026-02-01T10:05:00Z",
        "environment_setup": None,
        "agent_setup": None,
        "agent_execution": {"started_at": "2026-02-01T10:01:00Z", "finished_at": "2026-02-01T10:04:00Z"},
        "verifier": None,
        "step_results": None,
    }
    res.update(extra)
    return res


def step(step_id, source, message="", **extra) -> dict:
    return {"step_id": step_id, "source": source, "message": message, **extra}


def agent_step(step_id, message, obs=None, calls=None, **extra) -> dict:
    s = step(step_id, "agent", message, **extra)
    if calls:
        s["tool_calls"] = [
            {"tool_call_id": f"c{step_id}_{i}", "function_name": fn, "arguments": args} for i, (fn, args) in enumerate(calls)
        ]
    if obs is not None:
        s["observation"] = {"results": [{"source_call_id": f"c{step_id}_0", "content": obs}]}
    return s


def trajectory(steps, **extra) -> dict:
    t = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2.0.0"}, "steps": steps}
    t.update(extra)
    return t


def make_trial(dirpath: Path, *, result=None, config=None, traj=None, files: dict | None = None) -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    name = dirpath.name
    if result is not False:
        write_json(dirpath / "result.json", result if result is not None else trial_result(name, rewards={"reward": 1.0}))
    if config is not False:
        write_json(dirpath / "config.json", config if config is not None else trial_config(name))
    if traj is not None:
        write_json(dirpath / "agent" / "trajectory.json", traj)
    for rel, content in (files or {}).items():
        p = dirpath / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, str):
            p.write_text(content, encoding="utf-8")
        else:
            p.write_text(json.dumps(content), encoding="utf-8")
    return dirpath


def only_trial(root: Path) -> TraceUnit:
    units = [u for u in discover(root) if u.kind == "trial"]
    assert len(units) == 1, units
    return units[0]


def read(path: Path, run_override=None):
    unit = only_trial(path)
    return read_trial(unit, run_key_for(unit, run_override))


SIMPLE_TRAJ = trajectory(
    [
        step(1, "user", "Do the task"),
        agent_step(2, "first", obs="out-1", calls=[("bash", {"cmd": "ls"})]),
        agent_step(3, "second", obs="out-2"),
    ]
)


# ------------------------------------------------------------------------------------------
# real fixtures
# ------------------------------------------------------------------------------------------


def test_calendar_trial():
    unit = only_trial(CALENDAR)
    assert unit.path == CALENDAR and unit.job_dir is None
    assert run_key_for(unit, None) == JOB_UUID
    assert run_key_for(unit, "override-loses-to-job-uuid") == JOB_UUID
    t = read_trial(unit, JOB_UUID)

    assert t.status == "complete"
    assert t.run_key == JOB_UUID and t.source_run_id == JOB_UUID
    assert t.trial_name == "task-calendar__8A83BnJ"
    assert t.task_name == "pinchbench/task-calendar"
    assert t.agent == "openclaw"
    assert t.agent_version == "OpenClaw 2026.5.22 (a374c3a)"
    assert t.model == "anthropic/kimi-k2.6"  # trajectory agent.model_name wins
    assert t.model_provider == "anthropic"
    assert t.rewards == {
        "reward": 0.0,
        "automated": 0.0,
        "automated.file_created": 0.0,
        "automated.date_correct": 0.0,
        "automated.time_correct": 0.0,
        "automated.attendee_present": 0.0,
        "automated.title_correct": 0.0,
        "automated.description_present": 0.0,
    }
    assert t.reward == 0.0
    assert t.result == "0.0"
    assert t.exception_type is None and t.exception_message is None
    assert (t.n_input_tokens, t.n_cache_tokens, t.n_output_tokens, t.cost_usd) == (1160, 45056, 424, None)
    assert t.started_at == datetime(2026, 5, 27, 13, 0, 36, 531019, tzinfo=timezone.utc)
    assert t.finished_at == datetime(2026, 5, 27, 13, 1, 46, 572764, tzinfo=timezone.utc)
    assert t.date_raw == "2026-05-27T13:00:36.531019Z"
    assert t.task_checksum == "aac3f0428ada4c5d9c43d694b81865692abae86482e55f7fea2682e94dd87344"
    assert t.verifier_output.startswith('{\n  "reward": 0.0,\n  "automated": 0.0,')
    assert t.instruction.startswith("You do not have access to real calendars.")

    d = t.detail
    assert d["trial_id"] == "96c9156f-078f-4ad7-ac38-e990172a5bc3"
    assert d["timings"]["agent_execution"] == {
        "started_at": "2026-05-27T13:01:13.408455Z",
        "finished_at": "2026-05-27T13:01:44.026917Z",
    }
    assert d["agent_info"]["model_info"] == {"name": "kimi-k2.6", "provider": "anthropic"}
    assert d["source"] == "pinchbench" and d["task_id"] == {"path": "datasets/pinchbench/task-calendar"}
    assert d["config"]["agent"]["env"] == {
        "ANTHROPIC_API_KEY": "${ANTHROPIC_API_KEY}",
        "ANTHROPIC_BASE_URL": "${ANTHROPIC_BASE_URL}",
    }
    assert d["config"]["verifier"]["env"]["MODEL_NAME"] == "<redacted>"
    assert "naive_timestamps" not in d and "no_trajectory" not in d and d["multi_step"] is False

    # 6 steps: user, then 5 agent steps (2 with tool calls, 3 and 5 tool results with observations)
    assert [e.trace_source for e in t.episodes] == ["main"] * 5
    assert [e.episode_index for e in t.episodes] == [0, 1, 2, 3, 4]
    assert [e.row_number for e in t.episodes] == [0, 1, 2, 3, 4]
    assert [len(e.turns) for e in t.episodes] == [2, 3, 5, 6, 8]
    last = t.episodes[-1].turns
    assert [x.role for x in last] == ["user", "assistant", "assistant", "user", "assistant", "assistant", "user", "assistant"]
    assert last[1].content == (
        '<tool_call>\n{"name": "exec", "arguments": {"command": "date -d \\"next Tuesday\\" +\\"%Y-%m-%d\\" 2>/dev/null '
        '|| date -v+tue +\\"%Y-%m-%d\\" 2>/dev/null"}}\n</tool_call>'
    )
    assert last[1].extra["step_id"] == 2 and last[1].extra["metrics"]["prompt_tokens"] == 416
    assert last[1].extra["tool_calls"][0]["function_name"] == "exec"
    assert last[3].content == "2026-06-02" and last[3].extra["observation_of_step"] == 3
    assert t.episodes[0].extra["model"] == "anthropic/kimi-k2.6"


def test_multi_step_trial():
    t = read(CHAIN)
    assert t.status == "complete"
    assert t.trial_name == "task-session-chain-analysis__UGpJKzs"
    assert t.rewards == {
        "reward": 0.4523809523809524,
        "automated": 0.4523809523809524,
        "automated.chain_map_stages": 0.3333333333333333,
        "automated.evidence_index": 1.0,
        "automated.function_references": 0.0,
        "automated.design_targeting_e2": 0.3333333333333333,
        "automated.code_evidence": 0.0,
        "automated.traceability": 1.0,
        "automated.json_validity": 0.5,
    }
    assert t.reward == 0.4523809523809524
    assert t.result == "0.4523809523809524"
    assert t.agent == "openclaw"
    assert t.model == "kimi-k2.6"  # step trajectories carry no model_name: agent_info.model_info.name
    assert t.model_provider == "anthropic"
    # only structured-ingest reports tokens; the other steps are all null
    assert (t.n_input_tokens, t.n_cache_tokens, t.n_output_tokens, t.cost_usd) == (80315, 553472, 1634, None)
    assert t.exception_type is None

    steps = t.detail["steps"]
    assert [s["name"] for s in steps] == ["structured-ingest", "fixed-design", "review-evidence-pack", "final-summary"]
    assert [s["rewards"]["reward"] for s in steps] == [1.0, 1.0, 1.0, 0.4523809523809524]
    assert [s["has_trajectory"] for s in steps] == [False, True, False, True]
    assert [s["verifier_output"] == "" for s in steps] == [True, True, True, False]
    assert "rollout_details" not in json.dumps(steps)
    assert t.detail["multi_step"] is True
    assert t.detail["timings"]["agent_execution"] is None
    assert t.verifier_output == (CHAIN / "steps/final-summary/verifier/test-stdout.txt").read_text()

    # fixed-design: 21 steps = user + 20 agent steps; final-summary: user + 1 agent step
    sources = [e.trace_source for e in t.episodes]
    assert sources == ["step:fixed-design"] * 20 + ["step:final-summary"]
    assert [e.episode_index for e in t.episodes] == list(range(20)) + [0]
    assert [e.row_number for e in t.episodes] == list(range(21))
    assert len(t.episodes[19].turns) == 32
    assert len(t.episodes[20].turns) == 2


def test_fixture_job_folder_has_no_job_files():
    units = list(discover(JOB))
    assert [u.path.name for u in units] == ["task-calendar__8A83BnJ", "task-session-chain-analysis__UGpJKzs"]
    assert all(u.kind == "trial" and u.job_dir is None for u in units)
    # a step folder stands for its trial; nothing under steps/ is a unit of its own
    assert [u.path for u in discover(CHAIN / "steps" / "fixed-design")] == [CHAIN]


# ------------------------------------------------------------------------------------------
# golden pairs: episodes match Harbor's exported rows (keys, turn counts, roles)
# ------------------------------------------------------------------------------------------

GOLDEN = [
    ("terminus_2/hello-world-invalid-json", None),
    ("openhands/hello-world", {"name": "gpt-4o", "provider": "openai"}),
]


@pytest.mark.parametrize("name,model_info", GOLDEN)
def test_golden_pairs(tmp_path, name, model_info):
    traj = json.loads((FIXTURES / "golden" / f"{name}.trajectory.json").read_text())
    rows = json.loads((FIXTURES / "golden" / f"{name}.traces.json").read_text())
    result = trial_result("hello-world__AbCdEfG", task="harbor/hello-world", rewards={"reward": 1.0})
    result["agent_info"] = {"name": traj["agent"]["name"], "version": "x", "model_info": model_info or {"name": "gpt-4o", "provider": "openai"}}
    trial = make_trial(tmp_path / "hello-world__AbCdEfG", result=result, traj=traj)
    t = read(trial)

    assert [(e.trace_source, f"episode-{e.episode_index}") for e in t.episodes] == [
        (r.get("trace_source", "main"), r["episode"]) for r in rows
    ]
    for ep, row in zip(t.episodes, rows):
        assert [x.role for x in ep.turns] == [m["role"] for m in row["conversations"]]
    assert {t.model} == {r["model"] for r in rows}
    assert {t.model_provider} == {r["model_provider"] for r in rows}
    assert {t.result} == {r["result"] for r in rows}
    if name.startswith("openhands"):
        first = t.episodes[0].turns[0].content
        assert first.startswith("<tools>\n[\n  {") and "\n</tools>\n\nYou are OpenHands agent" in first
        assert json.loads(t.episodes[0].extra["tool_definitions"]) == traj["agent"]["tool_definitions"]
        # this pair comes from the same Harbor version: the texts match too
        for ep, row in zip(t.episodes, rows):
            assert [x.content for x in ep.turns] == [m["content"] for m in row["conversations"]]


# ------------------------------------------------------------------------------------------
# jobs, RL folders, run identity
# ------------------------------------------------------------------------------------------


def make_job(root: Path, job_id="0b1c2d3e-0000-4000-8000-000000000001") -> Path:
    job = root / "2026-02-01__10-00-00"
    write_json(job / "config.json", {"job_name": job.name, "jobs_dir": "jobs", "n_attempts": 1, "agents": [{"name": "terminus-2", "env": {"OPENAI_API_KEY": "sk-live-secret"}}]})
    write_json(
        job / "result.json",
        {
            "id": job_id,
            "started_at": "2026-02-01T18:00:00.123456",
            "updated_at": "2026-02-01T18:30:00",
            "finished_at": None,
            "n_total_trials": 3,
            "stats": {
                "n_completed_trials": 3,
                "n_errored_trials": 1,
                "evals": {
                    "terminus-2__gpt-4o__demo": {
                        "n_trials": 3,
                        "n_errors": 1,
                        "metrics": [{"mean": 0.5}],
                        "reward_stats": {"reward": {"1.0": ["a__1111111"], "0": ["b__2222222"]}},
                        "exception_stats": {"AgentTimeoutError": ["a__1111111"]},
                    }
                },
            },
            "trial_results": [],
        },
    )
    timeout = {"exception_type": "AgentTimeoutError", "exception_message": "timed out", "exception_traceback": "Traceback ...", "occurred_at": "2026-02-01T18:04:00.5"}
    make_trial(job / "a__1111111", result=trial_result("a__1111111", rewards={"reward": 1.0}, exception=timeout, job_id=job_id), config=trial_config("a__1111111", job_id=job_id), traj=SIMPLE_TRAJ)
    # the job says 0 for b although its own result says 1: the job-level lookup comes first (§4.5)
    make_trial(job / "b__2222222", result=trial_result("b__2222222", rewards={"reward": 1}, job_id=job_id), config=trial_config("b__2222222", job_id=job_id))
    # c is not in the job stats: per-trial fallback
    make_trial(job / "c__3333333", result=trial_result("c__3333333", rewards={"reward": 1}, job_id=job_id), config=trial_config("c__3333333", job_id=job_id))
    return job


def test_job_dir_run_identity_and_result_lookup(tmp_path):
    job_id = "0b1c2d3e-0000-4000-8000-000000000001"
    job = make_job(tmp_path)
    units = list(discover(tmp_path))
    assert [u.path.name for u in units] == ["a__1111111", "b__2222222", "c__3333333"]
    assert all(u.kind == "trial" and u.job_dir == job for u in units)
    assert {run_key_for(u, "ignored") for u in units} == {job_id}

    run = read_job(job)
    assert run.run_key == job_id and run.job_id == job_id and run.name == job.name
    assert run.started_at == datetime(2026, 2, 1, 18, 0, 0, 123456, tzinfo=timezone.utc)
    assert run.finished_at is None
    assert run.detail["naive_timestamps"] is True and run.detail["finished"] is False
    assert run.detail["n_completed_trials"] == 3 and run.detail["n_total_trials"] == 3
    assert "sk-live-secret" not in json.dumps(run.detail)

    a, b, c = (read_trial(u, job_id) for u in units)
    assert a.result == "AgentTimeoutError"  # the exception wins over the reward
    assert a.reward == 1.0 and a.rewards == {"reward": 1.0}
    assert (a.exception_type, a.exception_message) == ("AgentTimeoutError", "timed out")
    assert a.detail["exception"]["occurred_at"] == "2026-02-01T18:04:00.5"
    assert a.detail["result_source"].startswith("job result.json")
    assert b.result == "0.0" and b.reward == 1.0
    assert c.result == "1.0" and c.detail["result_source"] == "trial result.json"


def test_read_job_legacy_shapes(tmp_path):
    job = tmp_path / "old-job"
    write_json(job / "config.json", {"job_name": "old-job", "orchestrator": {"n_concurrent_trials": 4}})
    write_json(
        job / "result.json",
        {
            "id": "c0ffee00-0000-4000-8000-000000000000",
            "started_at": "2025-10-01T01:02:03",
            "finished_at": "2025-10-01T02:02:03",
            "n_total_trials": 2,
            "stats": {
                "n_trials": 2,
                "n_errors": 1,
                "evals": {"terminus-2": {"terminal-bench": {"n_trials": 2, "exception_stats": {"X": ["t__1"]}}}},
            },
        },
    )
    run = read_job(job)
    assert run.detail["n_completed_trials"] == 2 and run.detail["n_errored_trials"] == 1
    assert run.detail["evals_nested"] is True
    assert list(run.detail["evals"]) == ["terminus-2__terminal-bench"]
    assert run.finished_at == datetime(2025, 10, 1, 2, 2, 3, tzinfo=timezone.utc)
    # a nested (pre-2025-10-28) evals block never matches in Harbor's lookup: per-trial fallback
    make_trial(job / "t__1", result=trial_result("t__1", rewards={"reward": 0.5}))
    assert read(job / "t__1").result == "0.5"
    assert read_job(tmp_path / "nothing-here") is None
    # no result.json id: run_override, else the directory name
    write_json(tmp_path / "j2" / "config.json", {"job_name": "j2"})
    assert read_job(tmp_path / "j2").run_key == "j2"
    assert read_job(tmp_path / "j2", "sweep-9").run_key == "sweep-9"


def test_rl_trace_jobs_folder(tmp_path):
    tj = tmp_path / "rl-exp-42" / "trace_jobs"
    for name in ("task-a__aaaaaaa", "task-b__bbbbbbb"):
        make_trial(tj / name, traj=SIMPLE_TRAJ)
    units = list(discover(tmp_path / "rl-exp-42"))
    assert [u.path.name for u in units] == ["task-a__aaaaaaa", "task-b__bbbbbbb"]
    assert all(u.job_dir is None for u in units)
    assert {run_key_for(u, None) for u in units} == {"rl-exp-42"}
    assert {run_key_for(u, "my-run") for u in units} == {"my-run"}
    t = read_trial(units[0], "rl-exp-42")
    assert t.source_run_id is None and t.result == "1.0"
    # a plain folder of trials (not named trace_jobs): the folder's own name
    make_trial(tmp_path / "loose" / "x__1234567")
    assert run_key_for(only_trial(tmp_path / "loose"), None) == "loose"


def test_incomplete_trial(tmp_path):
    trial = make_trial(
        tmp_path / "trace_jobs" / "task-z__zzzzzzz",
        result=False,
        config=trial_config("task-z__zzzzzzz", model="hosted_vllm/Qwen3-8B"),
        traj=SIMPLE_TRAJ,
        files={"verifier/reward.txt": "0.75\n"},
    )
    unit = only_trial(tmp_path)
    assert unit.path == trial
    t = read_trial(unit, run_key_for(unit, None))
    assert t.status == "incomplete"
    assert t.run_key == tmp_path.name
    assert t.trial_name == "task-z__zzzzzzz" and t.task_name == "task-z"
    assert t.agent == "terminus-2" and t.model == "hosted_vllm/Qwen3-8B" and t.model_provider is None
    assert t.rewards == {"reward": 0.75} and t.reward == 0.75
    assert t.detail["rewards_source"] == "verifier/reward.txt"
    assert t.result is None and t.started_at is None and t.date_raw is None
    assert [len(e.turns) for e in t.episodes] == [2, 4]
    # discovered through agent/ alone (no result.json, no config.json)
    bare = tmp_path / "bare" / "only-agent__0000000"
    write_json(bare / "agent" / "trajectory.json", SIMPLE_TRAJ)
    t2 = read(tmp_path / "bare")
    assert t2.status == "incomplete" and t2.trial_name == "only-agent__0000000" and len(t2.episodes) == 2


# ------------------------------------------------------------------------------------------
# result.json field variants
# ------------------------------------------------------------------------------------------


def test_old_single_reward_schema_and_naive_timestamps(tmp_path):
    res = trial_result("old__1234567", started_at="2025-09-20T12:00:00.5", finished_at="2025-09-20T12:10:00")
    res["verifier_result"] = {"reward": 0.5}
    res["agent_result"] = {"n_input_tokens": 7, "n_output_tokens": 3, "input_token_ids": [1, 2, 3], "output_token_ids": [4], "output_token_mask": [1]}
    t = read(make_trial(tmp_path / "old__1234567", result=res))
    assert t.rewards == {"reward": 0.5} and t.reward == 0.5
    assert t.result is None  # Harbor's exporter only reads verifier_result.rewards
    assert t.started_at == datetime(2025, 9, 20, 12, 0, 0, 500000, tzinfo=timezone.utc)
    assert t.date_raw == "2025-09-20T12:00:00.5"
    assert t.detail["naive_timestamps"] is True
    assert (t.n_input_tokens, t.n_cache_tokens, t.n_output_tokens) == (7, None, 3)
    assert set(t.detail["large_fields"]) == {"agent_result.input_token_ids", "agent_result.output_token_ids", "agent_result.output_token_mask"}


def test_aware_timestamps(tmp_path):
    res = trial_result("tz__1234567", started_at="2026-03-01T08:00:00+08:00", finished_at="2026-03-01T00:30:00Z")
    t = read(make_trial(tmp_path / "tz__1234567", result=res))
    assert t.started_at == datetime(2026, 3, 1, 0, 0, tzinfo=timezone.utc)
    assert t.finished_at == datetime(2026, 3, 1, 0, 30, tzinfo=timezone.utc)
    assert "naive_timestamps" not in t.detail
    assert t.date_raw == "2026-03-01T08:00:00+08:00"


def test_model_naming_fallbacks(tmp_path):
    res = trial_result("m1__1234567", rewards={"reward": 1.0})
    res["agent_info"]["model_info"] = None
    res["config"]["agent"]["model_name"] = "hosted_vllm/Qwen3-8B"
    t = read(make_trial(tmp_path / "m1__1234567", result=res, config=res["config"]))
    assert (t.model, t.model_provider) == ("hosted_vllm/Qwen3-8B", None)
    assert t.detail["hub_fallbacks"] == {"model_provider": "unknown-provider"}

    res = trial_result("m2__1234567", rewards={"reward": 1.0})
    res["agent_info"]["model_info"] = {"name": "Qwen3-8B", "provider": None}
    t = read(make_trial(tmp_path / "m2__1234567", result=res))
    assert (t.model, t.model_provider) == ("Qwen3-8B", None)

    res = trial_result("m3__1234567", rewards={"reward": 1.0})
    res["agent_info"] = {"name": "oracle", "version": "1.0", "model_info": None}
    res["config"]["agent"] = {"name": "oracle", "model_name": None}
    t = read(make_trial(tmp_path / "m3__1234567", result=res, config=res["config"]))
    assert (t.agent, t.model, t.model_provider) == ("oracle", None, None)
    assert t.detail["hub_fallbacks"] == {"model": "unknown-model", "model_provider": "unknown-provider"}

    # a trajectory's agent.model_name comes first
    traj = dict(SIMPLE_TRAJ, agent={"name": "terminus-2", "version": "2", "model_name": "openai/gpt-4o-2024"})
    t = read(make_trial(tmp_path / "m4__1234567", traj=traj))
    assert t.model == "openai/gpt-4o-2024"


def test_reward_file_precedence(tmp_path):
    def trial(name, files):
        res = trial_result(name)
        res["verifier_result"] = None
        return read(make_trial(tmp_path / name, result=res, files=files))

    both = trial("both__1234567", {"verifier/reward.json": {"reward": 0.25, "llm_judge": 1}, "verifier/reward.txt": "1"})
    assert both.rewards == {"reward": 0.25, "llm_judge": 1} and both.reward == 0.25
    assert both.detail["rewards_source"] == "verifier/reward.json"
    assert both.detail["reward_files"]["reward.txt"] == "1"
    assert both.result is None  # nothing in result.json: Harbor's export has no result either

    txt = trial("txt__1234567", {"verifier/reward.txt": " 0.5\n"})
    assert txt.rewards == {"reward": 0.5} and txt.detail["rewards_source"] == "verifier/reward.txt"

    bad = trial("bad__1234567", {"verifier/reward.json": "{oops", "verifier/reward.txt": "1"})
    assert bad.rewards == {"reward": 1.0}
    assert "malformed JSON" in bad.detail["reward_files"]["reward.json_error"]

    multi = trial("multi__1234567", {"verifier/reward.json": {"automated": 0.3, "llm_judge": 0.2}})
    assert multi.reward is None  # several keys, none named "reward"
    single = trial("single__1234567", {"verifier/reward.json": {"score": 1}})
    assert single.reward == 1.0

    # rewards in result.json win over the files
    res = trial_result("res__1234567", rewards={"reward": 0.0})
    t = read(make_trial(tmp_path / "res__1234567", result=res, files={"verifier/reward.txt": "1"}))
    assert t.rewards == {"reward": 0.0} and t.detail["rewards_source"] == "result.json"


def test_verifier_output_and_exception_txt(tmp_path):
    t = read(make_trial(tmp_path / "v1__1234567", files={"verifier/test-stdout.txt": "out\n", "verifier/test-stderr.txt": "err\n"}))
    assert t.verifier_output == "out\nerr\n"
    t = read(make_trial(tmp_path / "v2__1234567", files={"verifier/test-stderr.txt": b"only stderr \xff\n"}))
    assert t.verifier_output == "only stderr \ufffd\n"
    t = read(make_trial(tmp_path / "v3__1234567"))
    assert t.verifier_output is None

    exc = {"exception_type": "NonZeroAgentExitCodeError", "exception_message": "exit 1", "exception_traceback": "Traceback (most recent call last):\n...", "occurred_at": "2026-02-01T18:04:00"}
    t = read(make_trial(tmp_path / "e__1234567", result=trial_result("e__1234567", exception=exc), files={"exception.txt": "Traceback (most recent call last):\n  boom\n"}))
    assert t.detail["exception_txt"] == "Traceback (most recent call last):\n  boom\n"
    assert t.exception_type == "NonZeroAgentExitCodeError" and t.result == "NonZeroAgentExitCodeError"


def test_multi_step_step_exception_and_missing_trajectory(tmp_path):
    steps = [
        {"step_name": "run", "agent_result": {"n_input_tokens": 5, "n_output_tokens": None, "cost_usd": 0.25}, "verifier_result": None,
         "exception_info": {"exception_type": "RuntimeError", "exception_message": "Step 'run' setup.sh exited with code 1", "occurred_at": "2026-05-01T00:00:00"},
         "agent_execution": None, "verifier": None},
        {"step_name": "check", "agent_result": {"n_input_tokens": 7, "n_output_tokens": 2, "cost_usd": None}, "verifier_result": {"rewards": {"reward": 0}},
         "exception_info": None, "agent_execution": None, "verifier": None},
    ]
    res = trial_result("ms__1234567", step_results=steps, agent_result=None)
    res["verifier_result"] = None
    trial = make_trial(
        tmp_path / "ms__1234567",
        result=res,
        files={
            "steps/run/verifier/test-stdout.txt": "run output",
            "steps/check/agent/aider.txt": "no trajectory here",
            "steps/check/verifier/reward.txt": "0",
        },
    )
    t = read(trial)
    assert (t.exception_type, t.exception_message) == ("RuntimeError", "Step 'run' setup.sh exited with code 1")
    assert t.detail["exception"]["source"].startswith("step_results[0]")
    assert t.result is None  # no top-level exception, no top-level reward (§4.5 case 3)
    assert (t.n_input_tokens, t.n_cache_tokens, t.n_output_tokens, t.cost_usd) == (12, None, 2, 0.25)
    assert t.rewards == {"reward": 0.0} and t.detail["rewards_source"] == "steps/check/verifier/reward.txt"
    assert t.verifier_output == "run output"  # the last step that has verifier output
    assert t.episodes == [] and t.detail["no_trajectory"] is True


def test_agent_without_trajectory(tmp_path):
    res = trial_result("aider__1234567", rewards={"reward": 1.0})
    res["agent_info"]["name"] = "aider"
    t = read(make_trial(tmp_path / "aider__1234567", result=res, files={"agent/aider.txt": "log"}))
    assert t.episodes == [] and t.detail["no_trajectory"] is True
    assert t.agent == "aider" and t.reward == 1.0 and t.status == "complete"


def test_config_secrets_are_redacted(tmp_path):
    cfg = trial_config("sec__1234567")
    cfg["agent"]["env"] = {"OPENAI_API_KEY": "sk-live-123", "TEMPLATED": "${TEMPLATED}", "WITH_DEFAULT": "${X:-literal}"}
    cfg["agent"]["kwargs"] = {"api_key": "sk-live-456", "max_tokens": 100}
    res = trial_result("sec__1234567", rewards={"reward": 1.0})
    res["config"] = cfg
    t = read(make_trial(tmp_path / "sec__1234567", result=res, config=cfg))
    dumped = json.dumps(t.detail)
    assert "sk-live" not in dumped and "literal" not in dumped
    assert t.detail["config"]["agent"]["env"]["TEMPLATED"] == "${TEMPLATED}"
    assert t.detail["config"]["agent"]["kwargs"]["max_tokens"] == 100


# ------------------------------------------------------------------------------------------
# ATIF rendering
# ------------------------------------------------------------------------------------------


def test_continuation_chain(tmp_path):
    main = trajectory(
        [
            step(1, "user", "Instruction A"),
            agent_step(2, "a1", obs="o1"),
            agent_step(3, "a2", obs="o2"),
        ],
        continued_trajectory_ref="trajectory.cont-1.json",
    )
    cont = trajectory(
        [
            step(1, "user", "Instruction A (copied)", is_copied_context=True),
            agent_step(2, "a1", obs="o1", is_copied_context=True),
            agent_step(3, "a2", obs="o2", is_copied_context=True),
            agent_step(4, "a3", obs="o3"),
            agent_step(5, "a4", obs="o4"),
        ]
    )
    trial = make_trial(tmp_path / "cont__1234567", traj=main, files={"agent/trajectory.cont-1.json": cont})
    t = read(trial)
    assert [e.episode_index for e in t.episodes] == [0, 1, 2, 3]
    assert [e.extra["trajectory_file"] for e in t.episodes] == ["agent/trajectory.json"] * 2 + ["agent/trajectory.cont-1.json"] * 2
    # episode 2 is the continuation file up to a3: copied steps are context, not episodes
    ep2 = t.episodes[2].turns
    assert [(x.role, x.content) for x in ep2] == [
        ("user", "Instruction A (copied)"),
        ("assistant", "a1"),
        ("user", "o1"),
        ("assistant", "a2"),
        ("user", "o2"),
        ("assistant", "a3"),
    ]
    assert ep2[0].extra["is_copied_context"] is True
    assert len(t.episodes[3].turns) == 8
    # Harbor takes the instruction from the lexically first trajectory*.json: the continuation
    assert t.instruction == "Instruction A (copied)"

    # a dangling continuation reference is noted, not fatal
    broken = dict(main, continued_trajectory_ref="trajectory.cont-9.json")
    t = read(make_trial(tmp_path / "cont2__1234567", traj=broken))
    assert len(t.episodes) == 2 and t.detail["missing_continuations"] == ["agent/trajectory.cont-9.json"]


def test_rendering_rules():
    from ingest.read.atif import RenderContext, TrajectoryFile, render_main_episodes

    traj = trajectory(
        [
            step(1, "system", "sys"),
            step(2, "user", [{"type": "text", "text": "parts text"}, {"type": "text", "text": "ignored"}]),
            agent_step(3, "plan </think> answer", obs=None, calls=[("f", {"x": "é"}), ("g", {})], reasoning_content="why"),
            {"step_id": 4, "source": "agent", "message": "", "observation": {"results": [{"content": "r1"}, {"content": [{"type": "text", "text": "r2"}]}, {"content": None}]}},
            agent_step(5, "done", obs="final obs never exported"),
        ]
    )
    traj["agent"]["tool_definitions"] = [{"type": "function", "function": {"name": "f"}}]
    eps = render_main_episodes([TrajectoryFile("agent/trajectory.json", traj)], RenderContext(), "main")
    assert len(eps) == 3
    turns = eps[-1].turns
    assert turns[0].content.startswith('<tools>\n[\n  {\n    "type": "function"') and turns[0].content.endswith("\n</tools>\n\nsys")
    assert turns[1].content == "parts text" and turns[1].extra["content_parts"][1]["text"] == "ignored"
    assert turns[2].content == (
        "<think>why</think>\n<think>plan </think> answer\n"
        '<tool_call>\n{"name": "f", "arguments": {"x": "é"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
    )
    assert [x.role for x in turns] == ["user", "user", "assistant", "assistant", "user", "assistant"]
    assert turns[3].content == ""
    assert turns[4].content == "r1\nr2\n"
    assert all("final obs" not in (x.content or "") for e in eps for x in e.turns)


def test_summarization_subagents(tmp_path):
    sub = trajectory([step(1, "user", "summarize"), agent_step(2, "summary", obs="sub obs")])
    empty = trajectory([step(1, "user", "no agent step here")])
    main = trajectory(
        [
            step(1, "user", "task"),
            agent_step(2, "a1", obs="o1"),
            {"step_id": 3, "source": "system", "message": "Performed context summarization and handoff",
             "observation": {"results": [{"subagent_trajectory_ref": [{"trajectory_path": "trajectory.summarization-1-summary.json"}]}]}},
            step(4, "user", "handoff"),
            agent_step(5, "a2"),
        ],
        subagent_trajectories=[trajectory([step(1, "user", "q"), agent_step(2, "embedded answer")], trajectory_id="sub-abc")],
    )
    trial = make_trial(
        tmp_path / "sum__1234567",
        traj=main,
        files={
            "agent/trajectory.summarization-1-summary.json": sub,
            "agent/trajectory.summarization-1-questions.json": empty,
        },
    )
    t = read(trial)
    keys = [(e.trace_source, e.episode_index) for e in t.episodes]
    assert keys == [("main", 0), ("main", 1), ("sub-abc", 0), ("summarization-1-summary", 0)]
    assert [e.row_number for e in t.episodes] == [0, 1, 2, 3]
    summary = t.episodes[3]
    # a subagent conversation is complete: its last observation is included
    assert [(x.role, x.content) for x in summary.turns] == [("user", "summarize"), ("assistant", "summary"), ("user", "sub obs")]
    assert summary.extra["agent"] == "terminus-2"
    assert [x.role for x in t.episodes[1].turns] == ["user", "assistant", "user", "user", "user", "assistant"]


def test_lone_surrogate_preserved(tmp_path):
    trial = tmp_path / "sur__1234567"
    make_trial(trial)
    (trial / "agent").mkdir()
    (trial / "agent" / "trajectory.json").write_text(
        '{"schema_version": "ATIF-v1.6", "agent": {"name": "x", "version": "1"}, "steps": ['
        '{"step_id": 1, "source": "user", "message": "bad \\ud800 text"},'
        '{"step_id": 2, "source": "agent", "message": "ok \\udfff", "tool_calls": [{"tool_call_id": "c", "function_name": "f", "arguments": {"s": "\\ud83d"}}]}]}',
        encoding="ascii",
    )
    t = read(trial)
    turns = t.episodes[0].turns
    assert turns[0].content == "bad \ud800 text"
    assert turns[1].content == 'ok \udfff\n<tool_call>\n{"name": "f", "arguments": {"s": "\ud83d"}}\n</tool_call>'
    assert t.instruction == "bad \ud800 text"


# ------------------------------------------------------------------------------------------
# discovery edge cases
# ------------------------------------------------------------------------------------------


def test_terminal_bench_1_layout_is_unsupported(tmp_path):
    tb = tmp_path / "runs" / "2025-05-01__12-00-00" / "hello-world" / "hello-world.1-of-1.2025-05-01__12-00-00"
    write_json(tb / "results.json", {"is_resolved": True, "failure_mode": "unset"})
    (tb / "panes").mkdir()
    (tb / "panes" / "post-test.txt").write_text("x")
    make_trial(tmp_path / "runs" / "harbor-job" / "ok__1234567")
    units = list(discover(tmp_path))
    kinds = {u.path.name: u.kind for u in units}
    assert kinds == {"hello-world.1-of-1.2025-05-01__12-00-00": "unsupported", "ok__1234567": "trial"}
    bad = next(u for u in units if u.kind == "unsupported")
    assert "Terminal-Bench 1" in bad.reason
    assert [u.kind for u in discover(tb)] == ["unsupported"]
    with pytest.raises(TraceError, match="not a trial directory"):
        read_trial(bad, "x")


def test_symlink_loops_and_symlinked_dirs(tmp_path):
    root = tmp_path / "root"
    make_trial(root / "job" / "t__1234567")
    elsewhere = make_trial(tmp_path / "elsewhere" / "e__1234567")
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "job" / "linked-trial").symlink_to(elsewhere, target_is_directory=True)
    (root / "self").symlink_to(root / "self")
    units = list(discover(root))
    trials = [u.path for u in units if u.kind == "trial"]
    assert trials == [root / "job" / "t__1234567"]
    reasons = {u.path.name: u.reason for u in units if u.kind == "unsupported"}
    assert set(reasons) == {"loop", "linked-trial", "self"}
    assert "not followed" in reasons["loop"] and "loop" in reasons["self"]


def test_unreadable_directory_is_reported(tmp_path, monkeypatch):
    make_trial(tmp_path / "jobs" / "ok__1234567")
    secret = tmp_path / "jobs" / "secret"
    secret.mkdir()
    real_scandir = os.scandir

    def fake_scandir(path="."):
        if Path(path) == secret:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", fake_scandir)
    units = list(discover(tmp_path))
    assert [(u.path, u.kind) for u in units] == [(tmp_path / "jobs" / "ok__1234567", "trial"), (secret, "unsupported")]
    assert "unreadable directory" in units[1].reason
    assert next(discover(tmp_path / "missing")).reason == "does not exist"


def test_job_with_unreadable_result_json_keeps_its_trials(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "result.json").write_text('{"id": "j", "n_total_trials": 2, "stats": {')  # mid-write
    make_trial(job / "t__1234567")
    units = list(discover(tmp_path))
    assert [(u.path, u.kind) for u in units] == [(job / "result.json", "unsupported"), (job / "t__1234567", "trial")]
    assert "malformed JSON" in units[0].reason
    with pytest.raises(TraceError, match="malformed JSON"):
        read_job(job)
    # a trace_jobs folder given directly
    tj = tmp_path / "exp" / "trace_jobs"
    make_trial(tj / "r__1234567")
    assert run_key_for(only_trial(tj), None) == "exp"


@pytest.mark.parametrize("case, file, why", [
    ("result-empty", "result.json", "empty file, expected JSON"),
    ("result-malformed", "result.json", "malformed JSON at line 1 column 67"),
    ("result-truncated", "result.json", "malformed JSON at line 4"),
    ("config-malformed", "config.json", "malformed JSON at line 2"),
])
def test_a_folder_whose_only_file_is_broken_names_that_file(case, file, why, tmp_path):
    """A folder given alone whose result.json (or, with nothing below it, config.json) cannot be
    read: the unit names the file, not the folder, so the error says which file to fix."""
    folder = shutil.copytree(CORPUS / "traces" / case, tmp_path / case)
    units = list(discover(folder))
    assert [(u.path, u.kind) for u in units] == [(folder / file, "unsupported")]
    assert why in units[0].reason


def test_a_job_folders_broken_config_is_left_to_its_trials(tmp_path):
    """A job's config.json that cannot be read, with trials below: the folder is searched on
    and the trials found (each trial's unit reads the job's files and reports what fails)."""
    job = tmp_path / "job"
    make_trial(job / "t__1234567")
    (job / "config.json").write_text('{"job_name": ')
    assert [(u.path, u.kind) for u in discover(job)] == [(job / "t__1234567", "trial")]


def test_records_are_json_serializable():
    for path in (CALENDAR, CHAIN):
        t = read(path)
        json.dumps(t.detail)
        for episode in t.episodes:
            json.dumps(episode.extra)
            for turn in episode.turns:
                json.dumps(turn.extra)
                assert turn.role in ("user", "assistant") and isinstance(turn.content, str)


def test_trial_subfolders_are_not_searched(tmp_path):
    trial = make_trial(tmp_path / "j" / "outer__1234567")
    make_trial(trial / "artifacts" / "inner__1234567")  # looks like a trial, but inside one
    assert [u.path for u in discover(tmp_path)] == [trial]


def test_big_result_json_is_discovered_by_its_head(tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "SMALL_JSON_BYTES", 10)
    t = tmp_path / "j" / "big__1234567"
    write_json(t / "result.json", trial_result("big__1234567", rewards={"reward": 1.0}))
    assert [u.path for u in discover(tmp_path)] == [t]
    write_json(tmp_path / "j" / "result.json", {"id": "x", "started_at": None, "n_total_trials": 1, "stats": {}})
    assert only_trial(tmp_path).job_dir == tmp_path / "j"


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------


def test_malformed_json_names_the_file(tmp_path):
    trial = make_trial(tmp_path / "m__1234567")
    (trial / "result.json").write_text('{"trial_name": "m__1234567", "config": {')
    unit = TraceUnit(path=trial, kind="trial")
    with pytest.raises(TraceError) as info:
        read_trial(unit, "r")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(trial / "result.json")) and "malformed JSON" in msg

    (trial / "result.json").write_text("[1, 2]")
    with pytest.raises(TraceError, match="top level: expected a JSON object"):
        read_trial(unit, "r")
    write_json(trial / "result.json", {"id": "j", "n_total_trials": 1, "stats": {}})
    with pytest.raises(TraceError, match="job-level result"):
        read_trial(unit, "r")
    write_json(trial / "result.json", {"foo": 1})
    with pytest.raises(TraceError, match="unknown shape"):
        read_trial(unit, "r")

    write_json(trial / "result.json", trial_result("m__1234567"))
    (trial / "agent").mkdir()
    (trial / "agent" / "trajectory.json").write_text('{"steps": [')
    with pytest.raises(TraceError) as info:
        read_trial(unit, "r")
    assert str(info.value).startswith(str(trial / "agent" / "trajectory.json")) and "line 1 column" in str(info.value)
    (trial / "agent" / "trajectory.json").write_bytes(b'{"steps": [], "x": "\xff"}')
    with pytest.raises(TraceError, match="not valid UTF-8"):
        read_trial(unit, "r")
    # A trajectory whose steps are not a list is read, not refused: the problem is recorded and
    # the value kept (ATIF's strict validation fails it; only what is not a JSON object fails).
    write_json(trial / "agent" / "trajectory.json", {"steps": {"not": "a list"}})
    t = read_trial(unit, "r")
    assert t.episodes == []
    assert {"file": "agent/trajectory.json", "step": None, "field": "steps", "problem": "expected a list"} \
        in t.detail["validation"]
    assert t.detail["trajectories"][0]["unread"] == {"steps": {"not": "a list"}}
    (trial / "agent" / "trajectory.json").write_text("")
    with pytest.raises(TraceError, match="empty file"):
        read_trial(unit, "r")


# ------------------------------------------------------------------------------------------
# big RL result.json
# ------------------------------------------------------------------------------------------

MARKER = "SECRET-CHAT-MARKER"


def big_rl_result(name: str, n_messages: int = 2000) -> dict:
    res = trial_result(name, rewards={"reward": 0})
    res["config"]["agent"]["kwargs"] = {"store_all_messages": True, "collect_rollout_details": True}
    res["agent_result"] = {
        "n_input_tokens": 100,
        "n_cache_tokens": 0,
        "n_output_tokens": 50,
        "cost_usd": None,
        "rollout_details": [
            {"prompt_token_ids": [[7] * 5000] * 20, "completion_token_ids": [[8] * 500] * 20, "logprobs": [[-0.5] * 500] * 20, "extra": {"m": [MARKER]}}
        ],
        "metadata": {
            "n_episodes": 20,
            "summarization_count": 0,
            "api_request_times_msec": [1.5, 2.5],
            "all_messages": [{"role": "user", "content": f"{MARKER} \"quoted\" {{braces}} [x] \\ line\n" * 20} for _ in range(n_messages)],
        },
    }
    return res


def test_big_rl_result_json_keeps_large_fields_out(tmp_path):
    trial = tmp_path / "trace_jobs" / "rl__1234567"
    make_trial(trial, result=big_rl_result("rl__1234567"), traj=SIMPLE_TRAJ)
    size = (trial / "result.json").stat().st_size
    assert size > 2_000_000
    t = read(trial)
    assert MARKER not in repr(t) and "all_messages" not in json.dumps(t.detail.get("agent_metadata"))
    assert t.detail["agent_metadata"] == {"n_episodes": 20, "summarization_count": 0, "api_request_times_msec": [1.5, 2.5]}
    large = t.detail["large_fields"]
    assert set(large) == {"agent_result.rollout_details", "agent_result.metadata.all_messages"}
    assert large["agent_result.metadata.all_messages"]["items"] == 2000
    assert large["agent_result.rollout_details"]["items"] == 1
    assert sum(v["bytes"] for v in large.values()) > size * 0.9
    assert (t.n_input_tokens, t.n_output_tokens, t.reward, t.result) == (100, 50, 0.0, "0.0")
    assert [len(e.turns) for e in t.episodes] == [2, 4]


def test_result_filter_matches_json_module_across_chunk_boundaries(tmp_path, monkeypatch):
    value = big_rl_result("f__1234567", n_messages=3)
    value["step_results"] = [
        {"step_name": "s1", "agent_result": {"rollout_details": [{"prompt_token_ids": [[1, 2]]}], "metadata": {"all_messages": ["x"], "k": 1}}},
        {"step_name": "s2", "agent_result": None},
    ]
    value["odd \"key\" \\ {["] = ["]", "}", "\\\"", {"rollout_details": [1]}]
    path = write_json(tmp_path / "result.json", value)
    expected = json.loads(path.read_text())
    expected["agent_result"]["rollout_details"] = None
    expected["agent_result"]["metadata"]["all_messages"] = None
    expected["step_results"][0]["agent_result"]["rollout_details"] = None
    expected["step_results"][0]["agent_result"]["metadata"]["all_messages"] = None
    for chunk in (1, 3, 17, 4096):
        monkeypatch.setattr(trace_files, "CHUNK", chunk)
        trace_files.RESULT_CACHE.items.clear()
        got, dropped = load_result_json(path)
        assert got == expected
        assert set(dropped) == {
            "agent_result.rollout_details",
            "agent_result.metadata.all_messages",
            "step_results[0].agent_result.rollout_details",
            "step_results[0].agent_result.metadata.all_messages",
        }


# ------------------------------------------------------------------------------------------
# hashing
# ------------------------------------------------------------------------------------------


def test_hash_trial_dir(tmp_path):
    trial = make_trial(tmp_path / "a" / "h__1234567", traj=SIMPLE_TRAJ, files={"verifier/reward.txt": "1"})
    h1 = hash_trial_dir(trial)
    assert len(h1) == 64 and hash_trial_dir(trial) == h1
    (trial / "agent" / "recording.cast").write_text("not read by the reader")
    (trial / "trial.log").write_text("log")
    assert hash_trial_dir(trial) == h1
    # the same files elsewhere hash the same (relative paths)
    import shutil

    copy = tmp_path / "b" / "h__1234567"
    shutil.copytree(trial, copy)
    assert hash_trial_dir(copy) == h1
    (trial / "verifier" / "reward.txt").write_text("0")
    h2 = hash_trial_dir(trial)
    assert h2 != h1
    write_json(trial / "agent" / "trajectory.summarization-1-summary.json", SIMPLE_TRAJ)
    h3 = hash_trial_dir(trial)
    assert h3 != h2
    # a job result.json that starts listing this trial changes the exported `result`: new hash
    write_json(tmp_path / "a" / "result.json", {"id": "j", "n_total_trials": 1, "stats": {"evals": {"x": {"exception_stats": {"E": ["h__1234567"]}}}}})
    assert hash_trial_dir(trial) != h3
    assert hash_trial_dir(CHAIN) == hash_trial_dir(CHAIN)
    assert "steps/fixed-design/agent/trajectory.json" in traces.reader_files(CHAIN)
