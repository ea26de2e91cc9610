"""Synthetic Harbor trace trees for the multi-process tests: a job directory (job config and
result, trials naming the job UUID) and an RL `trace_jobs/` folder (trials with no job), each
trial with an ATIF trajectory, reward and verifier output. Deterministic for a seed."""

from __future__ import annotations

import json
import random
import shutil
import uuid
from pathlib import Path

FIXTURE_JOBS = Path(__file__).parent / "fixtures" / "harbor" / "jobs"
WORDS = ("the", "file", "error", "run", "test", "agent", "output", "ls -la", "cat", "grep", "passed",
         "failed", "directory", "python3", "import", "def", "return", "über", "naïve", "日本")


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def trajectory(rng: random.Random, task: str, n_agent_steps: int, words: int) -> dict:
    steps = [{"step_id": 1, "source": "system", "message": f"You are an agent. Task: {task}"},
             {"step_id": 2, "source": "user", "message": _text(rng, words)}]
    for k in range(n_agent_steps):
        steps.append({
            "step_id": len(steps) + 1, "source": "agent", "model_name": "gpt-4o",
            "message": _text(rng, words),
            "tool_calls": [{"tool_call_id": f"call_{k}", "function_name": "bash",
                            "arguments": {"command": _text(rng, 4)}}],
            "observation": {"results": [{"source_call_id": f"call_{k}", "content": _text(rng, words)}]},
            "metrics": {"prompt_tokens": rng.randrange(100, 5000), "completion_tokens": rng.randrange(10, 500)},
        })
    return {"schema_version": "ATIF-v1.6", "session_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "agent": {"name": "terminus-2", "version": "2.0", "model_name": "gpt-4o"}, "steps": steps}


def make_trial(path: Path, rng: random.Random, *, task: str, job_id: str | None, n_agent_steps: int,
               words: int) -> Path:
    name = path.name
    reward = rng.choice([0.0, 1.0, 1.0, 0.5])
    config = {"trial_name": name, "task": {"name": task}, "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}}
    if job_id:
        config["job_id"] = job_id
    result = {
        "id": str(uuid.UUID(int=rng.getrandbits(128))), "task_name": task, "trial_name": name, "config": config,
        "agent_info": {"name": "terminus-2", "version": "2.0", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "agent_result": {"n_input_tokens": rng.randrange(1000, 90000), "n_output_tokens": rng.randrange(100, 9000),
                         "cost_usd": round(rng.random(), 4)},
        "verifier_result": {"rewards": {"reward": reward}},
        "started_at": f"2026-05-{rng.randrange(10, 28)}T13:{rng.randrange(10, 59)}:00.000000Z",
        "finished_at": "2026-05-28T14:00:00.000000Z",
    }
    (path / "agent").mkdir(parents=True)
    (path / "verifier").mkdir()
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "result.json").write_text(json.dumps(result, indent=2))
    (path / "agent" / "trajectory.json").write_text(json.dumps(trajectory(rng, task, n_agent_steps, words), indent=2))
    (path / "verifier" / "reward.txt").write_text(f"{reward}\n")
    (path / "verifier" / "test-stdout.txt").write_text(f"{_text(rng, 30)}\n{int(reward)} passed\n")
    return path


def make_trace_tree(root: Path, *, seed: int, job_trials: int, rl_trials: int, n_agent_steps: int = 6,
                    words: int = 60, with_fixtures: bool = True) -> Path:
    """root/job-a/ (a Harbor job: config.json, result.json, trials), root/rl-sweep/trace_jobs/
    (RL trials, no job files) and, with_fixtures, a copy of the real fixture job."""
    rng = random.Random(seed)
    job_id = str(uuid.UUID(int=rng.getrandbits(128)))
    job = root / "job-a"
    job.mkdir(parents=True)
    names = [f"task-{i % 5}__{rng.getrandbits(32):08x}" for i in range(job_trials)]
    (job / "config.json").write_text(json.dumps({"job_name": "job-a", "n_attempts": 1, "agents": [{"name": "terminus-2"}]}))
    (job / "result.json").write_text(json.dumps({
        "id": job_id, "started_at": "2026-05-27T13:00:00.000000", "finished_at": "2026-05-28T14:00:00.000000",
        "n_total_trials": job_trials, "stats": {"n_trials": job_trials, "n_errors": 0, "evals": {}}}))
    for name in names:
        make_trial(job / name, rng, task=f"demo/{name.split('__')[0]}", job_id=job_id,
                   n_agent_steps=n_agent_steps, words=words)
    rl = root / "rl-sweep" / "trace_jobs"
    for i in range(rl_trials):
        name = f"math-{i % 4}__{rng.getrandbits(32):08x}"
        make_trial(rl / name, rng, task=f"math/{name.split('__')[0]}", job_id=None,
                   n_agent_steps=max(1, n_agent_steps // 2), words=words)
    if with_fixtures:
        shutil.copytree(FIXTURE_JOBS, root / "fixtures")
    return root
