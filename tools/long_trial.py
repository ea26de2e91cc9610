"""A Harbor trial directory whose trajectory has many agent steps: the shape of a long agent run
(a system prompt, the task, then n steps, each a message, a tool call, its output and metrics),
for measuring what a trajectory of n steps costs (bench.run's long-trial rows, the tests of
linear storage).

    python -m tools.long_trial --steps 20000 out/

writes out/<job>/<trial>/ (config.json, result.json, agent/trajectory.json, verifier/) and a
job-level config.json and result.json, as `harbor run` leaves them. The same seed and steps
give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

COMMANDS = ("ls -la", "cat src/main.py", "python -m pytest -q", "git diff", "grep -rn TODO .",
            "sed -n 1,40p README.md", "pip install -e .", "make build", "cd src && ls", "head -c 400 log.txt")
WORDS = ("the", "test", "fails", "because", "the", "parser", "returns", "none", "for", "an", "empty", "line",
         "so", "I", "will", "check", "which", "file", "holds", "it", "and", "fix", "that", "case", "first")


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def trajectory(steps: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    out = [{"step_id": 1, "source": "system", "message": "You are a careful terminal agent. " + _text(rng, 40, 60)},
           {"step_id": 2, "source": "user", "message": "Fix the failing test in this repository."}]
    for i in range(steps):
        call = f"call_{i + 1}"
        command = rng.choice(COMMANDS)
        out.append({
            "step_id": len(out) + 1,
            "timestamp": f"2026-05-27T13:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 60:02d}0000Z",
            "source": "agent",
            "model_name": "gpt-4o",
            "message": _text(rng, 6, 20),
            "tool_calls": [{"tool_call_id": call, "function_name": "bash", "arguments": {"command": command}}],
            # Outputs repeat, as a command's output often does: distinct texts grow slower than steps.
            "observation": {"results": [{"source_call_id": call,
                                         "content": f"$ {command}\n" + _text(random.Random(rng.randrange(400)), 10, 40)}]},
            "metrics": {"prompt_tokens": 600 + 40 * i, "completion_tokens": rng.randint(20, 200)},
        })
    return {"schema_version": "ATIF-v1.6", "session_id": f"00000000-0000-4000-8000-{seed:012d}",
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "gpt-4o"}, "steps": out}


def write_trial(out: Path, steps: int, seed: int = 0) -> Path:
    """The job directory holding one trial of `steps` agent steps."""
    job = Path(out) / f"long-{steps}-steps"
    trial = job / f"fix-parser__{seed:05d}"
    (trial / "agent").mkdir(parents=True, exist_ok=True)
    (trial / "verifier").mkdir(exist_ok=True)
    config = {"task": {"name": "long/fix-parser"}, "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}}
    (trial / "config.json").write_text(json.dumps(config))
    (trial / "result.json").write_text(json.dumps({
        "id": f"00000000-0000-4000-8000-{seed:012d}", "task_name": "long/fix-parser",
        "trial_name": trial.name, "started_at": "2026-05-27T13:00:00.000000Z",
        "finished_at": "2026-05-27T19:00:00.000000Z",
        "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "agent_result": {"n_input_tokens": 600 * steps, "n_cache_tokens": 0, "n_output_tokens": 100 * steps},
        "verifier_result": {"rewards": {"reward": 1.0}}}))
    (trial / "agent" / "trajectory.json").write_text(json.dumps(trajectory(steps, seed), separators=(",", ":")))
    (trial / "verifier" / "reward.txt").write_text("1.0\n")
    (job / "config.json").write_text(json.dumps({"job_name": job.name, "agents": [config["agent"]]}))
    return job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.long_trial", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_trial(args.out, args.steps, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
