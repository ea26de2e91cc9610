"""Every ATIF version, read leniently, with strict validation recorded (issue 30, part 2).

One trial per version, v1.0 to v1.7, each using every field its version has (built here from
the version history of harbor-formats.md §3, not from the validator's tables), one of v1.8 with
fields no known version has, and one trial per known-invalid case, its problem written out by
hand: each loads, the valid ones record nothing, each invalid one records its step and field in
`detail.validation`, and what the reader could not place is kept. The warehouse is loaded once
per backend (module scope)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import BACKENDS, fresh_warehouse
from ingest.pipeline import ingest
from query_fixture import cli
from warehouse.db.engine import make_engine, resolve_url
from warehouse.show import load_trajectory

RUN = "atif-job"

# What each version adds (harbor-formats.md §3 and the RFC's version history), by minor version.
ROOT_ADDED = {1: ["extra"], 5: ["continued_trajectory_ref"], 7: ["trajectory_id", "subagent_trajectories"]}
AGENT_ADDED = {5: ["tool_definitions"]}
STEP_ADDED = {5: ["is_copied_context"], 7: ["llm_call_count"]}
METRICS_ADDED = {3: ["completion_token_ids"], 4: ["prompt_token_ids"]}


def _since(added: dict[int, list[str]], minor: int) -> set[str]:
    return {name for v, names in added.items() if v <= minor for name in names}


def _text(minor: int, value: str):
    """A message or an observation's content: content parts from v1.6."""
    if minor < 6:
        return value
    return [{"type": "text", "text": value}, {"type": "image", "source": {"media_type": "image/png", "path": "a.png"}}]


def valid_trajectory(minor: int, *, session: str = "sess-1") -> dict:
    """A trajectory of ATIF-v1.<minor> with every field the version has, valid by its rules: a
    system step (with an observation from v1.2), a user step, an agent step with every agent
    field and a tool call its observation answers, and a last agent step."""
    root, agent, step_fields, metric_fields = (_since(t, minor) for t in (ROOT_ADDED, AGENT_ADDED, STEP_ADDED,
                                                                         METRICS_ADDED))
    system = {"step_id": 1, "timestamp": "2026-03-01T10:00:00Z", "source": "system", "message": "You are helpful.",
              "extra": {"origin": "harness"}}
    if minor >= 2:
        system["observation"] = {"results": [{"content": "environment reset"}]}
    metrics = {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 100, "cost_usd": 0.002,
               "logprobs": [-0.5, -0.25], "extra": {"reasoning_tokens": 4}}
    if "completion_token_ids" in metric_fields:
        metrics["completion_token_ids"] = [11, 12]
    if "prompt_token_ids" in metric_fields:
        metrics["prompt_token_ids"] = [1, 2, 3]
    call = {"tool_call_id": "call-1", "function_name": "bash", "arguments": {"cmd": "ls"}}
    result = {"source_call_id": "call-1", "content": _text(minor, "a.txt b.txt")}
    if minor >= 7:
        call["extra"] = {"parallel": False}
        result["extra"] = {"exit_code": 0}
    act = {"step_id": 3, "timestamp": "2026-03-01T10:00:05+00:00", "source": "agent", "model_name": "gpt-x",
           "reasoning_effort": "low", "message": _text(minor, "Listing the files."), "reasoning_content": "look first",
           "tool_calls": [call], "observation": {"results": [result]}, "metrics": metrics, "extra": {"turn": 1}}
    if "is_copied_context" in step_fields:
        act["is_copied_context"] = False
    if "llm_call_count" in step_fields:
        act["llm_call_count"] = 1
    data = {"schema_version": f"ATIF-v1.{minor}", "session_id": session,
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "gpt-x", "extra": {"parser": "json"}},
            "steps": [system, {"step_id": 2, "source": "user", "message": f"task of v1.{minor}"}, act,
                      {"step_id": 4, "source": "agent", "message": "done"}],
            "notes": "built by the test",
            "final_metrics": {"total_prompt_tokens": 120, "total_completion_tokens": 30, "total_cached_tokens": 100,
                              "total_cost_usd": 0.002, "total_steps": 4, "extra": {}}}
    if "tool_definitions" in agent:
        data["agent"]["tool_definitions"] = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    if "extra" in root:
        data["extra"] = {"harness": "test"}
    if minor >= 7:
        del data["session_id"]  # optional from v1.7
        data["trajectory_id"] = f"main-{minor}"
        data["subagent_trajectories"] = [subagent("helper-1")]
    return data


def subagent(trajectory_id: str | None) -> dict:
    sub = {"schema_version": "ATIF-v1.7", "agent": {"name": "helper", "version": "1"},
           "steps": [{"step_id": 1, "source": "user", "message": "look it up"},
                     {"step_id": 2, "source": "agent", "message": "found it",
                      "observation": {"results": [{"content": "the answer"}]}}]}
    if trajectory_id is not None:
        sub["trajectory_id"] = trajectory_id
    return sub


def v18() -> dict:
    """ATIF-v1.8: v1.7 plus fields no known version has, on the root, a step, a tool call, an
    observation and its result, and the metrics."""
    data = valid_trajectory(7)
    data["schema_version"] = "ATIF-v1.8"
    data["function_ancestry"] = {"parent": "root"}
    act = data["steps"][2]
    act["span_id"] = "span-9"
    act["tool_calls"][0]["timeout_s"] = 30
    act["observation"]["latency_ms"] = 12
    act["observation"]["results"][0]["truncated"] = True
    act["metrics"]["reasoning_tokens"] = 4
    return data


def _with(minor: int, change) -> dict:
    data = valid_trajectory(minor)
    change(data)
    return data


def _set(path: str, value):
    """A change setting data[…] along a path of keys and indexes (`steps.2.metrics.prompt_tokens`)."""
    def change(data):
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in parents:
            data = data[key]
        if value is _DELETE:
            del data[last]
        else:
            data[last] = value
    return change


_DELETE = object()


# name: (trajectory, the problems expected on agent/trajectory.json, by hand)
INVALID = {
    "no-session-v16": (_with(6, _set("session_id", _DELETE)), [(None, "session_id", "missing")]),
    "root-extra-v10": (_with(0, _set("extra", {"x": 1})), [(None, "extra", "not in ATIF-v1.0 (added in v1.1)")]),
    "system-observation-v11": (_with(1, _set("steps.0.observation", {"results": [{"content": "x"}]})),
                               [(0, "steps[0].observation", "only on agent steps before ATIF-v1.2")]),
    "token-ids-v12": (_with(2, _set("steps.2.metrics.completion_token_ids", [1])),
                      [(2, "steps[2].metrics.completion_token_ids", "not in ATIF-v1.2 (added in v1.3)")]),
    "prompt-ids-v13": (_with(3, _set("steps.2.metrics.prompt_token_ids", [1])),
                       [(2, "steps[2].metrics.prompt_token_ids", "not in ATIF-v1.3 (added in v1.4)")]),
    "copied-context-v14": (_with(4, _set("steps.3.is_copied_context", True)),
                           [(3, "steps[3].is_copied_context", "not in ATIF-v1.4 (added in v1.5)")]),
    "content-parts-v15": (_with(5, _set("steps.1.message", [{"type": "text", "text": "hi"}])),
                          [(1, "steps[1].message", "expected a string")]),
    "image-part-v16": (_with(6, _set("steps.2.message", [{"type": "image"}, {"type": "video"}])),
                       [(2, "steps[2].message[0].source", "missing"), (2, "steps[2].message[1].type",
                                                                     "expected 'text' or 'image'")]),
    "step-ids-v17": (_with(7, lambda d: [d["steps"][i].update(step_id=i + 2) for i in (2, 3)]),
                     [(2, "steps[2].step_id", "expected 3 (step ids run 1, 2, 3, …)")]),
    "source-v17": (_with(7, lambda d: d["steps"].insert(2, {"step_id": 3, "source": "tool", "message": "raw"})),
                   [(2, "steps[2].source", "expected 'system', 'user' or 'agent'"),
                    (3, "steps[3].step_id", "expected 4 (step ids run 1, 2, 3, …)")]),
    "agent-only-v17": (_with(7, _set("steps.1.reasoning_content", "a user does not reason here")),
                       [(1, "steps[1].reasoning_content", "only on agent steps")]),
    "call-id-v17": (_with(7, _set("steps.2.observation.results.0.source_call_id", "call-9")),
                    [(2, "steps[2].observation.results[0].source_call_id", "no tool call of this step has this id")]),
    "metrics-v17": (_with(7, lambda d: d["steps"][2]["metrics"].update(prompt_tokens=-1, completion_tokens=1.5)),
                    [(2, "steps[2].metrics.prompt_tokens", "expected an integer ≥ 0"),
                     (2, "steps[2].metrics.completion_tokens", "expected an integer ≥ 0")]),
    "no-llm-call-v17": (_with(7, _set("steps.2.llm_call_count", 0)),
                        [(2, "steps[2].metrics", "must be absent when llm_call_count is 0"),
                         (2, "steps[2].reasoning_content", "must be absent when llm_call_count is 0")]),
    "arguments-v17": (_with(7, _set("steps.2.tool_calls.0.arguments", _DELETE)),
                      [(2, "steps[2].tool_calls[0].arguments", "missing")]),
    "unknown-step-field-v16": (_with(6, _set("steps.1.span_id", "s-1")), [(1, "steps[1].span_id", "unknown field")]),
    "agent-version-v13": (_with(3, _set("agent.version", _DELETE)), [(None, "agent.version", "missing")]),
}


def _trial_files(root: Path, name: str, files: dict[str, dict]) -> None:
    trial = root / RUN / name
    (trial / "agent").mkdir(parents=True)
    config = {"trial_name": name, "task": {"path": f"tasks/{name}"}, "agent": {"name": "terminus-2"}}
    (trial / "config.json").write_text(json.dumps(config))
    (trial / "result.json").write_text(json.dumps({"trial_name": name, "task_name": name, "config": config,
                                                   "verifier_result": {"rewards": {"reward": 1.0}}}))
    for rel, data in files.items():
        (trial / "agent" / rel).write_text(json.dumps(data))


def make_tree(root: Path) -> None:
    for minor in range(8):
        _trial_files(root, f"v1.{minor}", {"trajectory.json": valid_trajectory(minor)})
    _trial_files(root, "v1.8", {"trajectory.json": v18()})
    for name, (data, _) in INVALID.items():
        _trial_files(root, name, {"trajectory.json": data})
    # The file named on each problem: a continuation, a subagent's file, an embedded subagent.
    main = valid_trajectory(6)
    main["continued_trajectory_ref"] = "trajectory.cont-1.json"
    cont = _with(6, _set("steps.2.metrics.cached_tokens", "many"))
    _trial_files(root, "files", {"trajectory.json": main, "trajectory.cont-1.json": cont,
                                 "trajectory.summarization-1-summary.json": _with(6, _set("agent", _DELETE))})
    _trial_files(root, "embedded-no-id", {"trajectory.json": _with(7, _set("subagent_trajectories", [subagent(None)]))})
    # More problems than a trial keeps: 150 steps with a negative token count each.
    many = valid_trajectory(7)
    many["steps"] += [{"step_id": n, "source": "agent", "message": "m", "metrics": {"prompt_tokens": -n}}
                      for n in range(5, 155)]
    _trial_files(root, "many", {"trajectory.json": many})
    # The same subagent embedded, and as a file of its own.
    with_ref = valid_trajectory(7)
    with_ref["steps"][3]["observation"] = {"results": [{"subagent_trajectory_ref": [{"trajectory_id": "helper-1"}]}]}
    del with_ref["subagent_trajectories"]
    embedded = copy.deepcopy(with_ref)
    embedded["subagent_trajectories"] = [subagent("helper-1")]
    _trial_files(root, "sub-embedded", {"trajectory.json": embedded})
    _trial_files(root, "sub-file", {"trajectory.json": with_ref, "trajectory.helper-1.json": subagent("helper-1")})


@pytest.fixture(scope="module", params=BACKENDS)
def loaded(request, tmp_path_factory):
    """(url, engine, the ingest's summary) of a warehouse holding the tree, per backend."""
    folder = tmp_path_factory.mktemp(f"atif-{request.param}")
    make_tree(folder / "src")
    maker = fresh_warehouse(request.param, folder, request)
    url = next(maker)
    engine = make_engine(resolve_url(url))
    summary = ingest(engine, [str(folder / "src")])
    yield url, engine, summary
    engine.dispose()
    next(maker, None)


def _detail(engine, name: str) -> dict:
    with engine.connect() as conn:
        value = conn.execute(text("SELECT detail FROM trials WHERE trial_name = :n"), {"n": name}).scalar_one()
    return value if isinstance(value, dict) else json.loads(value)


def _problems(engine, name: str) -> list[tuple]:
    return [(p["file"], p["step"], p["field"], p["problem"]) for p in _detail(engine, name).get("validation", [])]


def test_every_trial_loads_and_is_counted(loaded):
    _, engine, summary = loaded
    n = 9 + len(INVALID) + 5
    assert summary.errors == [] and summary.units_loaded == n and summary.trials == n
    invalid = len(INVALID) + 3  # and files, embedded-no-id, many
    assert summary.trials_atif_problems == invalid
    assert f"trials: {invalid} with ATIF problems, loaded with what could be read (see detail.validation)" \
        in summary.lines()


@pytest.mark.parametrize("minor", range(8))
def test_each_version_loads_and_records_nothing(loaded, minor):
    _, engine, _ = loaded
    name = f"v1.{minor}"
    detail = _detail(engine, name)
    assert "validation" not in detail and "later_version" not in detail["trajectories"][0]
    shown = load_trajectory(engine, name, all_episodes=True)
    episodes = {(e["trace_source"], e["episode_index"]) for e in shown["episodes"]}
    # Two agent steps: two episodes of the main trajectory; v1.7's embedded subagent one more.
    assert episodes == {("main", 0), ("main", 1)} | ({("helper-1", 0)} if minor >= 7 else set())
    turns = next(e for e in shown["episodes"] if e["episode_index"] == 1)["turns"]
    assert [t["role"] for t in turns] == ["user", "user", "assistant", "user", "assistant"]
    assert turns[1]["content"] == f"task of v1.{minor}"
    assert turns[3]["content"] == "a.txt b.txt"  # the observation, its first text part from v1.6


def test_a_later_version_is_checked_as_v17_and_keeps_its_fields(loaded):
    _, engine, _ = loaded
    detail = _detail(engine, "v1.8")
    assert "validation" not in detail
    summary = detail["trajectories"][0]
    assert summary["later_version"] == {"checked_as": "ATIF-v1.7", "unknown_fields": [
        "function_ancestry", "steps[].metrics.reasoning_tokens", "steps[].observation.latency_ms",
        "steps[].observation.results[].truncated", "steps[].span_id", "steps[].tool_calls[].timeout_s"]}
    assert summary["unknown_fields"] == {"function_ancestry": {"parent": "root"}}
    turns = next(e for e in load_trajectory(engine, "v1.8", all_episodes=True)["episodes"]
                 if e["trace_source"] == "main" and e["episode_index"] == 1)["turns"]
    act, observation = turns[2]["extra"], turns[3]["extra"]
    assert act["unknown_fields"] == {"span_id": "span-9"}
    assert act["tool_calls"][0]["timeout_s"] == 30 and act["metrics"]["reasoning_tokens"] == 4
    assert observation["unknown_fields"] == {"observation.latency_ms": 12, "observation.results[0].truncated": True}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_each_invalid_case_is_recorded_where_it_is(loaded, name):
    _, engine, _ = loaded
    expected = [("agent/trajectory.json", *p) for p in INVALID[name][1]]
    assert _problems(engine, name) == expected
    assert load_trajectory(engine, name)["episodes"]  # loaded, with what could be read


def test_what_the_reader_cannot_place_is_kept(loaded):
    _, engine, _ = loaded
    turns = load_trajectory(engine, "source-v17", all_episodes=True)
    main = next(e for e in turns["episodes"] if e["trace_source"] == "main" and e["episode_index"] == 1)["turns"]
    # The step of no known source makes no turn (as Harbor's export): it rides on the next one.
    assert main[2]["extra"]["skipped_steps"] == [{"step_id": 3, "source": "tool", "message": "raw"}]
    user = load_trajectory(engine, "agent-only-v17")["episodes"][0]["turns"][1]
    assert user["extra"]["reasoning_content"] == "a user does not reason here"
    user = load_trajectory(engine, "unknown-step-field-v16")["episodes"][0]["turns"][1]
    assert user["extra"]["unknown_fields"] == {"span_id": "s-1"}


def test_each_problem_names_its_file(loaded):
    _, engine, _ = loaded
    assert _problems(engine, "files") == [
        ("agent/trajectory.cont-1.json", 2, "steps[2].metrics.cached_tokens", "expected an integer ≥ 0"),
        ("agent/trajectory.summarization-1-summary.json", None, "agent", "missing"),
    ]
    assert _problems(engine, "embedded-no-id") == [
        ("agent/trajectory.json#subagent_trajectories[0]", None, "trajectory_id", "missing")]


def test_problems_past_the_cap_are_counted(loaded):
    _, engine, _ = loaded
    detail = _detail(engine, "many")
    assert len(detail["validation"]) == 100 and detail["validation_omitted"] == {"agent/trajectory.json": 50}
    assert detail["validation"][0] == {"file": "agent/trajectory.json", "step": 4,
                                       "field": "steps[4].metrics.prompt_tokens", "problem": "expected an integer ≥ 0"}


def test_embedded_subagents_land_as_files_do(loaded):
    _, engine, _ = loaded

    def episodes(name):
        shown = load_trajectory(engine, name, all_episodes=True)
        out = []
        for e in shown["episodes"]:
            extra = {k: v for k, v in (e.get("extra") or {}).items() if k != "trajectory_file"}
            out.append((e["trace_source"], e["episode_index"], extra, [(t["role"], t["content"], t["extra"])
                                                                       for t in e["turns"]]))
        return out, {e["trace_source"]: (e.get("extra") or {}).get("trajectory_file") for e in shown["episodes"]}

    embedded, embedded_files = episodes("sub-embedded")
    as_file, file_files = episodes("sub-file")
    assert [(s, i) for s, i, _, _ in embedded] == [("main", 0), ("main", 1), ("helper-1", 0)]
    assert embedded == as_file
    assert embedded_files["helper-1"] == "agent/trajectory.json#subagent_trajectories[0]"
    assert file_files["helper-1"] == "agent/trajectory.helper-1.json"


def _readme_sql() -> dict[str, str]:
    """The README's queries of detail.validation, one per backend, as written there."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("The problems, by SQL:", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    sqlite, postgresql = block.split("-- SQLite", 1)[1].split("-- PostgreSQL", 1)
    return {"sqlite": sqlite.strip(), "postgresql": postgresql.strip()}


def test_the_readme_queries_and_show_read_them(loaded):
    url, engine, _ = loaded
    backend = "sqlite" if url.startswith("sqlite") else "postgresql"
    done = cli(url, "sql", _readme_sql()[backend], "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(done.stdout) if r["trial_name"] == "metrics-v17"]
    assert [(r["file"], r["field"], r["problem"]) for r in rows] == [
        ("agent/trajectory.json", "steps[2].metrics.prompt_tokens", "expected an integer ≥ 0"),
        ("agent/trajectory.json", "steps[2].metrics.completion_tokens", "expected an integer ≥ 0")]
    for name in ("v1.8", "source-v17", "v1.0"):
        shown = cli(url, "show", f"{RUN}/{name}", "--all", "--no-pager")
        assert shown.returncode == 0 and "[1] user" in shown.stdout, shown.stderr
