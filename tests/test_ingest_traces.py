"""Ingesting Harbor trace directories into the warehouse, on both backends: the real fixture
trials, idempotency, incomplete and unsupported directories, and the golden pairs landing on the
same keys and roles as their Hub export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
import pyarrow.parquet as pq
from sqlalchemy import text

from helpers import counts
from ingest.pipeline import ingest
from test_export import assert_same_shards
from trace_trees import make_trace_tree
from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.export import export_hub
from warehouse.harbor_rows import Columns

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
JOB_ID = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"


def _rows(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).all()


def _jobs(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    shutil.copytree(FIXTURES / "jobs", root)
    return root


def test_real_fixture_trials_ingest_exactly_and_only_once(engine, tmp_path):
    root = _jobs(tmp_path)
    first = ingest(engine, [str(root)])
    assert first.errors == [] and first.units_loaded == 2

    got = {r.trial_name: r for r in _rows(engine, """
        SELECT tr.trial_name, r.run_key, tk.name AS task, tr.status, tr.reward, tr.result, tr.rewards,
               tr.exception_type, tr.n_input_tokens, tr.n_output_tokens, tr.agent, tr.detail
        FROM trials tr JOIN runs r ON r.id = tr.run_id JOIN tasks tk ON tk.id = tr.task_id""")}
    calendar = got["task-calendar__8A83BnJ"]
    assert calendar.run_key == JOB_ID and calendar.status == "complete"
    assert calendar.reward == 0.0 and calendar.result == "0.0" and calendar.exception_type is None
    rewards = calendar.rewards if isinstance(calendar.rewards, dict) else json.loads(calendar.rewards)
    assert rewards["reward"] == 0 and "automated.file_created" in rewards
    assert (calendar.n_input_tokens, calendar.n_output_tokens) == (1160, 424)

    chain = got["task-session-chain-analysis__UGpJKzs"]
    assert chain.status == "complete"
    assert abs(chain.reward - 0.4523809523809524) < 1e-15
    assert (chain.n_input_tokens, chain.n_output_tokens) == (80315, 1634)  # summed over the steps
    detail = chain.detail if isinstance(chain.detail, dict) else json.loads(chain.detail)
    assert len(detail["steps"]) == 4

    episodes = dict(_rows(engine, """
        SELECT tr.trial_name, count(*) FROM episodes e JOIN trials tr ON tr.id = e.trial_id GROUP BY tr.trial_name"""))
    assert episodes == {"task-calendar__8A83BnJ": 5, "task-session-chain-analysis__UGpJKzs": 21}
    sources = {r[0] for r in _rows(engine, "SELECT DISTINCT trace_source FROM episodes")}
    assert sources == {"main", "step:final-summary", "step:fixed-design"}

    before = counts(engine)
    again = ingest(engine, [str(root)])
    assert (again.units_loaded, again.units_skipped) == (0, 2)
    assert counts(engine) == before


def test_trial_without_result_is_incomplete(engine, tmp_path):
    root = _jobs(tmp_path)
    (root / "pinchbench-147-kimi2.6" / "task-calendar__8A83BnJ" / "result.json").unlink()
    summary = ingest(engine, [str(root)])
    assert summary.errors == [] and summary.trials_incomplete == 1
    assert "(1 incomplete)" in summary.lines()[2]
    status = dict(_rows(engine, "SELECT trial_name, status FROM trials"))
    assert status == {"task-calendar__8A83BnJ": "incomplete", "task-session-chain-analysis__UGpJKzs": "complete"}


def test_result_arriving_later_completes_the_trial(engine, tmp_path):
    root = _jobs(tmp_path)
    trial = root / "pinchbench-147-kimi2.6" / "task-calendar__8A83BnJ"
    result = trial / "result.json"
    saved = result.read_bytes()
    result.unlink()
    ingest(engine, [str(root)])
    result.write_bytes(saved)
    summary = ingest(engine, [str(root)])
    assert summary.units_loaded == 1 and summary.units_skipped == 1
    assert _rows(engine, "SELECT status, reward FROM trials WHERE trial_name = 'task-calendar__8A83BnJ'") == [
        ("complete", 0.0)]


def test_token_counts_past_32_bits_are_kept(engine, tmp_path):
    root = _jobs(tmp_path)
    result_path = root / "pinchbench-147-kimi2.6" / "task-calendar__8A83BnJ" / "result.json"
    result = json.loads(result_path.read_text())
    result["agent_result"]["n_cache_tokens"] = 5_000_000_000  # an RL sweep's long rollout
    result_path.write_text(json.dumps(result))
    assert ingest(engine, [str(root)]).errors == []
    assert _rows(engine, "SELECT n_cache_tokens FROM trials WHERE trial_name = 'task-calendar__8A83BnJ'") == [
        (5_000_000_000,)]


def test_unsupported_layout_is_reported_and_the_rest_ingests(engine, tmp_path):
    root = _jobs(tmp_path)
    tb1 = root / "tb1-run" / "hello-world" / "hello-world.1-of-1"
    (tb1 / "panes").mkdir(parents=True)
    (tb1 / "results.json").write_text(json.dumps({"is_resolved": True}))
    summary = ingest(engine, [str(root)])
    assert summary.units_loaded == 2 and summary.units_failed == 1
    assert len(summary.errors) == 1 and "\n" not in summary.errors[0]
    assert "tb1-run" in summary.errors[0]


def test_malformed_json_fails_only_its_trial(engine, tmp_path):
    root = _jobs(tmp_path)
    (root / "pinchbench-147-kimi2.6" / "task-calendar__8A83BnJ" / "agent" / "trajectory.json").write_text('{"steps": [')
    summary = ingest(engine, [str(root)])
    assert summary.units_loaded == 1 and summary.units_failed == 1
    assert "trajectory.json" in summary.errors[0]
    assert [r[0] for r in _rows(engine, "SELECT trial_name FROM trials")] == ["task-session-chain-analysis__UGpJKzs"]


def _golden_trial_dir(root: Path, golden: str, rows: list[dict]) -> Path:
    """A trial directory holding the golden trajectory, with the keys its export carries."""
    first = rows[0]
    trial = root / "job" / first["trial_name"]
    (trial / "agent").mkdir(parents=True)
    shutil.copy(FIXTURES / "golden" / f"{golden}.trajectory.json", trial / "agent" / "trajectory.json")
    config = {"trial_name": first["trial_name"], "job_id": first["run_id"],
              "agent": {"name": first["agent"], "model_name": first["model"]}}
    (trial / "config.json").write_text(json.dumps(config))
    (trial / "result.json").write_text(json.dumps({
        "id": "00000000-0000-4000-8000-000000000000", "task_name": first["task"],
        "trial_name": first["trial_name"], "config": config,
        "agent_info": {"name": first["agent"], "version": "1", "model_info": None},
        "verifier_result": {"rewards": {"reward": float(first["result"])}},
        "started_at": first["date"],
    }))
    return trial


def _check_golden_pair(engine, tmp_path, golden: str) -> None:
    rows = json.loads((FIXTURES / "golden" / f"{golden}.traces.json").read_text())
    _golden_trial_dir(tmp_path / "traces", golden, rows)
    from_traces = ingest(engine, [str(tmp_path / "traces")])
    assert from_traces.errors == [] and from_traces.episodes_new == len(rows)

    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")
    from_hub = ingest(engine, [str(tmp_path / "hub")])
    # Every exported row lands on an episode the trajectory already made: same keys.
    assert from_hub.errors == [] and from_hub.episodes_new == 0
    assert from_hub.episodes_duplicate + from_hub.conflicts - _trial_conflicts(engine) == len(rows)
    assert counts(engine)["episodes"] == len(rows)

    for row in rows:
        stored = [r[0] for r in _rows(engine, """
            SELECT tu.role FROM turns tu JOIN episodes e ON e.id = tu.episode_id
            JOIN trials tr ON tr.id = e.trial_id JOIN runs r ON r.id = tr.run_id
            WHERE r.run_key = :run AND tr.trial_name = :trial AND e.trace_source = 'main'
              AND e.episode_index = :ep ORDER BY tu.idx""",
            run=row["run_id"], trial=row["trial_name"], ep=int(row["episode"].split("-")[1]))]
        assert stored == [m["role"] for m in row["conversations"]], row["episode"]


def _trial_conflicts(engine) -> int:
    return _rows(engine, "SELECT count(*) FROM conflicts WHERE entity = 'trial'")[0][0]


def test_golden_terminus_2_pair_lands_on_the_same_keys_and_roles(engine, tmp_path):
    _check_golden_pair(engine, tmp_path, "terminus_2/hello-world-invalid-json")


def test_golden_openhands_pair_lands_on_the_same_keys_and_roles(engine, tmp_path):
    _check_golden_pair(engine, tmp_path, "openhands/hello-world")


def test_trial_directories_get_consecutive_ids_whatever_the_backend(engine, tmp_path):
    # Each trial directory is a unit of its own: on PostgreSQL its ids come from a block reserved
    # from the sequence, and the rest of the block serves the next unit instead of becoming a gap.
    root = make_trace_tree(tmp_path / "traces", seed=3, job_trials=5, rl_trials=0, with_fixtures=False)
    summary = ingest(engine, [str(root)])
    assert summary.errors == [] and summary.units_loaded == 5
    for table in ("trials", "episodes", "messages"):
        ids = [r[0] for r in _rows(engine, f"SELECT id FROM {table} ORDER BY id")]
        assert ids == list(range(ids[0], ids[0] + len(ids))), table


# --- Harbor's own exports of a trial directory ----------------------------------------------------


def _harbor_export(engine, tmp_path: Path, name: str, keep=lambda row: True, columns: Columns = Columns()) -> Path:
    """What `harbor traces export` writes for the trials `engine` holds from their trace
    directories: the warehouse's export of them, which writes Harbor's rows
    (warehouse.harbor_rows; tests/test_harbor_rows.py compares it with Harbor's own), the rows
    `keep` keeps. Harbor finds each steps/<name>/ of a multi-step trial as a trial of its own, so
    its rows are episode-0… again, under the same trial_name, with no step marker; with
    `columns`, each step's rows carry its own instruction and verifier output."""
    export_hub(engine, tmp_path / f"{name}-warehouse", columns=columns)
    table = pq.read_table(next((tmp_path / f"{name}-warehouse").rglob("*.parquet")))
    rows = [row for row in table.to_pylist() if keep(row)]
    path = tmp_path / name / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    return path.parents[1]


def _landed(engine, dataset: Path) -> dict[str, list[int]]:
    """{trace_source: sorted episode indexes} of the episodes the dataset's rows landed on."""
    got: dict[str, list[int]] = {}
    for source, index in _rows(engine, """
            SELECT e.trace_source, e.episode_index FROM episode_loads el JOIN episodes e ON e.id = el.episode_id
            JOIN loads l ON l.id = el.load_id JOIN sources s ON s.id = l.source_id
            WHERE s.uri LIKE :uri ORDER BY e.trace_source, e.episode_index""", uri=f"%{dataset.name}"):
        got.setdefault(source, []).append(index)
    return got


def _no_conflicts(summary) -> bool:
    return (summary.errors, summary.episodes_new, summary.conflicts, summary.trial_conflicts) == ([], 0, 0, 0)


METADATA = pytest.mark.parametrize("columns", [Columns(), Columns(instruction=True, verifier_output=True)],
                                   ids=["plain", "metadata"])


@METADATA
def test_harbor_export_of_a_multi_step_trial_lands_on_its_step_episodes(engine, tmp_path, columns):
    """Trace directory first: each step's rows (main episode-N, N restarting per step) find the
    step's episode by their conversation: nothing new, no conflict, and the dataset exports back
    as it was."""
    root = _jobs(tmp_path)
    assert ingest(engine, [str(root)]).errors == []
    by_step = {source: sorted(i for s, i in _rows(engine, "SELECT trace_source, episode_index FROM episodes")
                              if s == source) for source in ("main", "step:final-summary", "step:fixed-design")}
    dataset = _harbor_export(engine, tmp_path, "harbor", columns=columns)
    before = counts(engine)

    summary = ingest(engine, [str(dataset)])
    assert _no_conflicts(summary) and summary.episodes_duplicate == 26
    assert counts(engine)["episodes"] == before["episodes"]
    assert _landed(engine, dataset) == by_step
    info = export_hub(engine, tmp_path / "back", sources=[str(dataset)])
    assert info.notes == [] and assert_same_shards(dataset, tmp_path / "back") == 26


@METADATA
def test_harbor_export_of_a_multi_step_trial_loaded_first_takes_its_trace_directory(engine, tmp_path, columns):
    """Export first: the second step's rows repeat the first step's keys with other
    conversations, which one export cannot mean as a conflict: they are episodes of their own
    (main#2). The trace directory then lands on them by conversation: nothing new, no conflict."""
    maker = make_engine(resolve_url(f"sqlite:///{tmp_path / 'maker.db'}"))
    schema.upgrade(maker)
    root = _jobs(tmp_path)
    ingest(maker, [str(root)])
    dataset = _harbor_export(maker, tmp_path, "harbor", columns=columns)
    export_hub(maker, tmp_path / "trace-alone", sources=[str(root)])
    maker.dispose()

    first = ingest(engine, [str(dataset)])
    assert (first.errors, first.episodes_new, first.conflicts, first.trial_conflicts) == ([], 26, 0, 0)
    chain = dict(_rows(engine, """
        SELECT e.trace_source, count(*) FROM episodes e JOIN trials tr ON tr.id = e.trial_id
        WHERE tr.trial_name = 'task-session-chain-analysis__UGpJKzs' GROUP BY e.trace_source"""))
    assert sorted(chain.values()) == [1, 20] and set(chain) == {"main", "main#2"}
    before = counts(engine)

    then = ingest(engine, [str(root)])
    assert _no_conflicts(then) and then.episodes_duplicate == 26
    assert counts(engine)["episodes"] == before["episodes"]
    info = export_hub(engine, tmp_path / "back", sources=[str(dataset)])
    assert info.notes == [] and assert_same_shards(dataset, tmp_path / "back") == 26
    # and the trace directory's rows come back under their own steps, as from a warehouse
    # that never saw the export
    info = export_hub(engine, tmp_path / "trace-back", sources=[str(root)])
    assert info.notes == [] and assert_same_shards(tmp_path / "trace-alone", tmp_path / "trace-back") > 0
    again = ingest(engine, [str(root), str(dataset)])
    assert (again.units_loaded, again.units_skipped) == (0, 3)


def test_per_subagent_export_lands_on_its_subagent_episode(engine, tmp_path):
    """A per-subagent dataset's row (episode-0, no trace_source column) lands on the subagent's
    episode, not as a conflict with main episode 0."""
    rows = json.loads((FIXTURES / "golden" / "terminus_2" / "hello-world-invalid-json.traces.json").read_text())
    trial = _golden_trial_dir(tmp_path / "traces", "terminus_2/hello-world-invalid-json", rows)
    shutil.copy(FIXTURES / "golden" / "openhands" / "hello-world.trajectory.json",
                trial / "agent" / "trajectory.summarization-1-summary.json")
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []
    assert ("summarization-1-summary",) in _rows(engine, "SELECT DISTINCT trace_source FROM episodes")
    dataset = _harbor_export(engine, tmp_path, "harbor-summarization-1-summary",
                             keep=lambda row: row["trace_source"] == "summarization-1-summary")

    summary = ingest(engine, [str(dataset)])
    assert _no_conflicts(summary) and summary.episodes_duplicate == 1
    assert _landed(engine, dataset) == {"summarization-1-summary": [0]}
    info = export_hub(engine, tmp_path / "back", sources=[str(dataset)])
    assert info.notes == [] and assert_same_shards(dataset, tmp_path / "back") == 1


def test_a_trial_field_that_differs_is_one_conflicting_trial_not_conflicting_episodes(engine, tmp_path):
    """An openhands trial directory and its own export, whose `date` string differs (Harbor's
    test normalisation): two identical episodes are duplicates, and the trial's date is one
    conflict, counted as a conflicting trial."""
    rows = json.loads((FIXTURES / "golden" / "openhands" / "hello-world.traces.json").read_text())
    trial = _golden_trial_dir(tmp_path / "traces", "openhands/hello-world", rows)
    result = json.loads((trial / "result.json").read_text())
    result["started_at"] = "2025-12-20T10:00:00.123456Z"
    (trial / "result.json").write_text(json.dumps(result))
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")

    summary = ingest(engine, [str(tmp_path / "hub")])
    assert (summary.episodes_new, summary.episodes_duplicate) == (0, 2)
    assert (summary.conflicts, summary.trial_conflicts) == (0, 1)
    assert summary.lines()[1] == ("episodes: 0 new, 2 duplicate; conflicts: 0 conflicting episodes, "
                                  "1 conflicting trials; rows rejected: 0")
    assert _rows(engine, "SELECT entity, field FROM conflicts") == [("trial", "date_raw")]
    assert _rows(engine, "SELECT n_conflicts FROM loads ORDER BY id") == [(0,), (1,)]  # the ledger: conflict rows
    info = export_hub(engine, tmp_path / "back", sources=[str(tmp_path / "hub")])
    assert pq.read_table(next((tmp_path / "back").rglob("*.parquet"))).column("date").to_pylist() == [
        "NORMALIZED_TIMESTAMP"] * 2
