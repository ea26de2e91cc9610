"""A Harbor job folder for the export tests, built the same way every time: what Harbor's own
exporter wrote from it is kept in fixtures/harbor/golden/export/ (see the README there).

    job/hello-tools__3333333   openhands trajectory with tool definitions (the golden one)
    job/sum-a__1111111         terminus-2 with a context summarization: two subagent files
    job/sum-b__2222222         a multi-step trial: step `one` with a summarization of its own,
                               step `two` with a legacy test-stderr.txt; exception in step two
    job/zz-running__4444444    still running: no result.json
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
JOB_UUID = "0b1c2d3e-0000-4000-8000-00000000e5e5"


def _write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), encoding="utf-8")


def _agent(step_id: int, message: str, observation: str | None = None, **extra) -> dict:
    step = {"step_id": step_id, "source": "agent", "message": message,
            "tool_calls": [{"tool_call_id": f"c{step_id}", "function_name": "bash", "arguments": {"cmd": f"ls {step_id}"}}],
            **extra}
    if observation is not None:
        step["observation"] = {"results": [{"source_call_id": f"c{step_id}", "content": observation}]}
    return step


def _trajectory(steps: list[dict], agent: str = "terminus-2", model: str | None = "openai/gpt-4o") -> dict:
    info = {"name": agent, "version": "2.0.0", **({"model_name": model} if model else {})}
    return {"schema_version": "ATIF-v1.6", "session_id": "s1", "agent": info, "steps": steps}


def _summary(kind: str) -> dict:
    return _trajectory([{"step_id": 1, "source": "user", "message": f"  {kind}: summarize the work so far\n"},
                        _agent(2, f"{kind} answer", f"{kind} observation"),
                        _agent(3, f"{kind} final")],
                       agent="terminus-2-summarization", model="openai/gpt-4o-mini")


def _result(name: str, task: str, **fields) -> dict:
    config = {"trial_name": name, "job_id": JOB_UUID, "agent": {"name": fields.pop("agent", "terminus-2"),
                                                                "model_name": "openai/gpt-4o"}}
    return {"task_name": task, "trial_name": name, "config": config,
            "agent_info": {"name": config["agent"]["name"], "version": "2.0.0",
                           "model_info": {"name": "gpt-4o", "provider": "openai"}},
            "started_at": "2026-06-01T10:00:00Z", **fields}


def build_job(root: Path) -> Path:
    """root/job with the four trials above; returns the job folder."""
    job = root / "job"

    tools = job / "hello-tools__3333333"
    _write(tools / "agent" / "trajectory.json",
           (FIXTURES / "golden" / "openhands" / "hello-world.trajectory.json").read_text(encoding="utf-8"))
    _write(tools / "result.json", _result(tools.name, "demo/hello", agent="openhands",
                                          verifier_result={"rewards": {"reward": 1.0}}))
    _write(tools / "verifier" / "test-stdout.txt", "hello passed\n")

    a = job / "sum-a__1111111"
    ref = [{"trajectory_path": "trajectory.summarization-1-summary.json"}]
    _write(a / "agent" / "trajectory.json", _trajectory([
        {"step_id": 1, "source": "user", "message": "\n  Fix the build.  \n"},
        _agent(2, "<think>plan</think>looking", "build log"),
        _agent(3, "still looking", "more log"),
        {"step_id": 4, "source": "system", "message": "Performed context summarization and handoff",
         "observation": {"results": [{"subagent_trajectory_ref": ref}]}},
        {"step_id": 5, "source": "user", "message": "Here is the summary; continue."},
        _agent(6, "fixed it", "FINAL OBSERVATION", reasoning_content="because"),
    ]))
    _write(a / "agent" / "trajectory.summarization-1-summary.json", _summary("summary"))
    _write(a / "agent" / "trajectory.summarization-1-questions.json", _summary("questions"))
    _write(a / "result.json", _result(a.name, "demo/build", verifier_result={"rewards": {"reward": 0.5}}))
    _write(a / "verifier" / "test-stdout.txt", "2 of 4 passed\n")

    b = job / "sum-b__2222222"
    one, two = b / "steps" / "one", b / "steps" / "two"
    _write(one / "agent" / "trajectory.json", _trajectory([
        {"step_id": 1, "source": "user", "message": "Step one: read the logs."},
        _agent(2, "reading", "log lines"),
        _agent(3, "read them"),
    ]))
    _write(one / "agent" / "trajectory.summarization-1-summary.json", _summary("step-one summary"))
    _write(one / "verifier" / "test-stdout.txt", "step one ok\n")
    _write(one / "verifier" / "reward.txt", "1.0")
    _write(two / "agent" / "trajectory.json", _trajectory([
        {"step_id": 1, "source": "user", "message": "Step two: write the report."},
        _agent(2, "writing", "draft"),
        _agent(3, "written"),
        _agent(4, "checked"),
    ]))
    _write(two / "verifier" / "test-stdout.txt", "step two: 1 failed\n")
    _write(two / "verifier" / "test-stderr.txt", "Traceback: report missing\n")
    step_results = [{"step_name": "one", "verifier_result": {"rewards": {"reward": 1.0}}},
                    {"step_name": "two", "verifier_result": {"rewards": {"reward": 0.0}},
                     "exception_info": {"exception_type": "RuntimeError", "exception_message": "boom",
                                        "occurred_at": "2026-06-01T10:05:00"}}]
    _write(b / "result.json", _result(b.name, "demo/report", agent_result=None, step_results=step_results,
                                      verifier_result={"rewards": {"reward": 0.0}}))

    running = job / "zz-running__4444444"
    _write(running / "agent" / "trajectory.json", _trajectory([
        {"step_id": 1, "source": "user", "message": "Not done yet."}, _agent(2, "working")]))
    _write(running / "config.json", _result(running.name, "demo/running")["config"])
    return job
