"""The summary tables (warehouse.summaries) on SQLite and PostgreSQL: equal, after every kind of
unit, to the same summaries worked out here in Python from the base tables; backfilled by the
migration; written with their unit or not at all; and giving every canned query the same
answer as its definition over the base tables."""

from __future__ import annotations

import shutil
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select, text

import query_fixture
from ingest.pipeline import ingest
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from tools.generate import generate_dataset
from trace_trees import FIXTURE_JOBS, make_trace_tree
from warehouse import summaries
from warehouse.db import models, schema
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import LEDGER, UNSUMMARIZED
from warehouse.summaries import SUCCESS_THRESHOLD

SUMMARY_TABLES = ("trial_lengths", "run_task_breakdown", "run_task_outcomes", "run_sources")


# --- the oracle: the summaries from the base tables, in Python -------------------------------


def _runs(url, given=None) -> list[dict]:
    """`query runs`' rows by column name."""
    result = run_canned(url, QUERIES["runs"], given)
    return [dict(zip(result.columns, row)) for row in result.rows]

def expected(engine) -> dict[str, Any]:
    with engine.connect() as conn:
        trials = conn.execute(select(models.trials)).mappings().all()
        episodes = conn.execute(select(models.episodes)).mappings().all()
        sources = conn.execute(text(
            "SELECT DISTINCT tr.run_id, l.source_id FROM trial_loads tl "
            "JOIN trials tr ON tr.id = tl.trial_id JOIN loads l ON l.id = tl.load_id")).all()
    # A trial's own conversations: "main", or each step ("step:<name>", not its subagents'
    # "step:<name>/<kind>"); each one's longest episode, summed over them.
    longest: dict[tuple[int, str], tuple[int, int, int]] = {}  # (trial, source) -> (turns, index, chars)
    for e in episodes:
        source = e["trace_source"]
        if source == "main" or (source.startswith("step:") and "/" not in source):
            key = (e["trial_id"], source)
            longest[key] = max(longest.get(key, (-1, -1, 0)), (e["n_turns"], e["episode_index"], e["n_chars"]))
    own: dict[int, tuple[int, int]] = {}
    for (trial_id, _), (turns, _, chars) in longest.items():
        so_far = own.get(trial_id, (0, 0))
        own[trial_id] = (so_far[0] + turns, so_far[1] + chars)
    lengths = {}
    breakdown: dict[tuple, list] = defaultdict(list)
    for t in trials:
        turns, chars = own.get(t["id"], (None, None))
        lengths[t["id"]] = (t["run_id"], turns, chars, t["n_input_tokens"], t["n_output_tokens"])
        breakdown[(t["run_id"], t["task_id"], t["agent"], t["model"], t["exception_type"])].append(
            (t, turns))

    def outcome(group: list) -> dict[str, Any]:
        rewards = [t["reward"] for t, _ in group if t["reward"] is not None]
        started = [t["started_at"] for t, _ in group if t["started_at"] is not None]
        return dict(
            n_trials=len(group),
            n_complete=sum(t["status"] == "complete" for t, _ in group),
            n_incomplete=sum(t["status"] == "incomplete" for t, _ in group),
            n_successes=sum(r >= SUCCESS_THRESHOLD for r in rewards),
            n_rewards=len(rewards), reward_sum=sum(rewards) if rewards else None,
            first_started=min(started, default=None), last_started=max(started, default=None),
            n_with_trajectory=sum(turns is not None for _, turns in group),
            n_with_input_tokens=sum(t["n_input_tokens"] is not None for t, _ in group),
            n_with_output_tokens=sum(t["n_output_tokens"] is not None for t, _ in group),
        )

    per_pair: dict[tuple, list] = defaultdict(list)
    for key, group in breakdown.items():
        per_pair[key[:2]] += group
    return {
        "trial_lengths": lengths,
        "run_task_breakdown": {key: outcome(group) for key, group in breakdown.items()},
        "run_task_outcomes": {key: dict(outcome(group), n_errors=sum(t["exception_type"] is not None
                                                                     for t, _ in group))
                              for key, group in per_pair.items()},
        "run_sources": set(sources),
    }


def stored(engine) -> dict[str, Any]:
    with engine.connect() as conn:
        def rows(model):
            return conn.execute(select(model)).mappings().all()

        counted = [c.name for c in models.run_task_breakdown.c
                   if c.name.startswith(("n_", "reward", "first", "last"))]
        return {
            "trial_lengths": {r["trial_id"]: (r["run_id"], r["turns"], r["chars"], r["input_tokens"],
                                              r["output_tokens"]) for r in rows(models.trial_lengths)},
            "run_task_breakdown": {(r["run_id"], r["task_id"], r["agent"], r["model"], r["exception_type"]):
                                   {c: r[c] for c in counted} for r in rows(models.run_task_breakdown)},
            "run_task_outcomes": {(r["run_id"], r["task_id"]): {c: r[c] for c in [*counted, "n_errors"]}
                                  for r in rows(models.run_task_outcomes)},
            "run_sources": {(r["run_id"], r["source_id"]) for r in rows(models.run_sources)},
            "row_counts": {name: conn.execute(text(f"SELECT count(*) FROM {name}")).scalar()
                           for name in SUMMARY_TABLES},
        }


def assert_exact(engine) -> None:
    """The stored summaries are what the base tables say, key for key, with no row to spare."""
    got, want = stored(engine), expected(engine)
    for table in SUMMARY_TABLES:
        assert got[table] == want[table], table
        assert got["row_counts"][table] == len(want[table]), table  # no duplicate keys


# --- the canned queries: summaries against the definition --------------------------------------

def _variants(name: str, runs: list[str]) -> list[dict[str, Any]]:
    params = {p.name for p in QUERIES[name].params}
    variants: list[dict[str, Any]] = [{}]
    for by in (p for p in QUERIES[name].params if p.name == "by"):
        variants += [{"by": c} for c in by.choices if c != "run"] + [{"by": "label:dataset"}]
    if "unsolved" in params:
        variants += [{"unsolved": True}, {"solved_by_all": True}]
    if "per_task" in params:
        variants += [{"per_task": True, "k": "1,2,3,10"}, {"k": "2,4"}]
    if "confidence" in params:
        variants += [{"confidence": 0.8, **({"seed": 5, "resamples": 300} if "seed" in params else {})}]
    if "a" in params:
        shapes = ({}, {"flipped": True}) if "flipped" in params else ({}, {"seed": 5, "confidence": 0.8})
        variants = [dict(v, a=a, b=b) for v in shapes for a, b in
                    [(runs[0], runs[-1]), (runs[-1], runs[0]), (runs[0], runs[0])]]
    if "threshold" in params:
        variants += [dict(v, threshold=0.5) for v in variants]
    return variants


def assert_queries_match_definitions(url: str) -> int:
    """Every canned query and variant: the same columns and rows from the summaries as from the
    base tables. Returns how many answers were compared."""
    runs = [row[0] for row in run_canned(url, QUERIES["runs"], summaries=False).rows]
    compared = 0
    for name, query in QUERIES.items():
        if name in LEDGER:  # the ledger's, which read the ledger itself
            continue
        assert (query.summary_sql is None) == (name in UNSUMMARIZED), name
        for given in _variants(name, runs):
            summarized = run_canned(url, query, given)
            defined = run_canned(url, query, given, summaries=False)
            assert summarized.columns == defined.columns, (name, given)
            assert summarized.rows == [
                tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in defined.rows
            ], (name, given)
            compared += 1
    return compared


def test_every_query_reads_summaries_at_the_default_threshold_only():
    for query in QUERIES.values():
        if query.name in LEDGER + UNSUMMARIZED:
            assert query.summary_sql is None and query.plan(query.values({}))[0] == query.sql
            continue
        required = {p.name: "run-x" for p in query.params if p.required}
        defaults = query.values(required)
        assert query.plan(defaults) == (query.summary_sql, query.summary_post or query.post)
        assert query.plan(defaults, summaries=False) == (query.sql, query.post)
        if "threshold" in defaults:
            assert query.plan(query.values({**required, "threshold": 0.5})) == (query.sql, query.post)
            assert query.plan(query.values({**required, "threshold": 1}))[0] == query.summary_sql


def test_fixture_summaries_and_answers(engine, db_url):
    query_fixture.build(engine)
    assert_exact(engine)
    assert assert_queries_match_definitions(db_url) > 30


def test_other_thresholds_never_read_the_summaries(engine, db_url):
    query_fixture.build(engine)
    with engine.begin() as conn:
        for table in SUMMARY_TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    # With the summaries emptied the default threshold sees no trials, any other still all of them.
    assert [row["trials"] for row in _runs(db_url)] == [0, 0, 0]
    rows = _runs(db_url, {"threshold": 0.5})
    assert [row["trials"] for row in rows] == [11, 9, 2]
    assert [row["pass_rate"] for row in rows] == pytest.approx([5 / 11, 2 / 9, 1.0])


def test_generated_datasets(engine, db_url, tmp_path):
    # tiny: every episode exported (several main episodes per trial), null results, exceptions
    # and partial rewards; math: more tasks and runs, in shards that split runs.
    generate_dataset(tmp_path / "tiny", "tiny", episodes="all", shards=3, seed=5)
    generate_dataset(tmp_path / "math", "math", shards=3, seed=2, scale=0.02, runs=3)
    summary = ingest(engine, [str(tmp_path / "tiny"), str(tmp_path / "math")])
    assert summary.errors == [] and summary.units_loaded == 6
    assert_exact(engine)
    assert assert_queries_match_definitions(db_url) > 30


# --- incremental units -------------------------------------------------------------------

T0 = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)


def _trial(name: str, task: str | None, reward: float | None, *, run: str = "run-1", agent: str | None = "a1",
           model: str | None = "m1", turns: int = 2, **fields) -> Trial:
    conversation = [Turn("user" if i % 2 == 0 else "assistant", f"{name} turn {i}") for i in range(turns)]
    return Trial(run_key=run, trial_name=name, task_name=task, reward=reward, agent=agent, model=model,
                 result=None if reward is None else str(reward), status="complete",
                 episodes=[Episode(episode_index=0, turns=conversation)], **fields)


def _unit(engine, source: int, name: str, trials: list[Trial]) -> None:
    with writer.unit(engine, source, name, f"hash-{name}") as unit:
        unit.add_trials(trials)


def test_summaries_stay_exact_unit_after_unit(engine, db_url):
    first = writer.ensure_source(engine, "parquet", "/src/first", "first")
    second = writer.ensure_source(engine, "parquet", "/src/second", "second")

    _unit(engine, first, "shard-0", [
        _trial("t1-a", "t1", 1.0, n_input_tokens=10, started_at=T0), _trial("t1-b", "t1", 0.0),
        _trial("t2-a", "t2", None, exception_type="AgentTimeoutError", started_at=T0 + timedelta(hours=2)),
        _trial("nameless", None, 1.0),  # task unknown until a later source says
        _trial("bare", "t3", None, agent=None, model=None),  # reward, agent, model, start unknown too
    ])
    assert_exact(engine)

    # A second shard: more attempts at existing (run, task) keys, a new task, a new run.
    _unit(engine, first, "shard-1", [
        _trial("t1-c", "t1", 1.0, model="m2", started_at=T0 - timedelta(hours=1)),
        _trial("t2-b", "t2", 0.5, n_output_tokens=3), _trial("t4-a", "t4", 1.0),
        _trial("r2-t1", "t1", 0.0, run="run-2"),
    ])
    assert_exact(engine)

    # The same trials again from another source: provenance only, but the runs gain a source.
    before = stored(engine)
    _unit(engine, second, "copy", [_trial("t1-a", "t1", 1.0, n_input_tokens=10, started_at=T0),
                                   _trial("r2-t1", "t1", 0.0, run="run-2")])
    assert_exact(engine)
    after = stored(engine)
    assert after["run_task_breakdown"] == before["run_task_breakdown"]
    assert after["trial_lengths"] == before["trial_lengths"]
    assert len(after["run_sources"]) == len(before["run_sources"]) + 2

    # A later source fills what was missing: the nameless trial's task, the bare trial's reward,
    # agent, model, start and tokens. Each trial leaves the key it was counted under.
    _unit(engine, second, "fill", [
        _trial("nameless", "t1", 1.0),
        _trial("bare", "t3", 1.0, agent="a2", model="m3", n_input_tokens=7, started_at=T0 + timedelta(hours=9)),
    ])
    assert_exact(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run_task_outcomes WHERE task_id IS NULL")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM run_task_breakdown WHERE agent IS NULL")).scalar() == 0

    # A longer trajectory of an existing trial: its lengths follow.
    longer = _trial("t1-b", "t1", 0.0, turns=6)
    longer.episodes = [Episode(episode_index=1, turns=longer.episodes[0].turns)]
    _unit(engine, second, "episodes", [longer])
    assert_exact(engine)
    with engine.connect() as conn:
        assert conn.execute(text(
            "SELECT l.turns FROM trial_lengths l JOIN trials t ON t.id = l.trial_id WHERE t.trial_name = 't1-b'"
        )).scalar() == 6

    # Conflicts: a different result and a different conversation for stored keys keep what is
    # stored (the smaller result, whichever came first; the first trace's conversation).
    before = stored(engine)
    _unit(engine, second, "conflicting", [_trial("t1-a", "t1", 2.0, turns=8, n_input_tokens=10, started_at=T0)])
    with engine.connect() as conn:
        fields = {r[0] for r in conn.execute(text("SELECT field FROM conflicts"))}
    assert fields == {"result", "reward", "conversation"}
    assert_exact(engine)
    assert stored(engine) == before
    assert assert_queries_match_definitions(db_url) > 30


@pytest.mark.parametrize("backend", ["sqlite"])  # PostgreSQL's plans depend on its statistics
def test_a_refresh_reads_only_the_rows_under_its_keys(engine):
    """However large the warehouse, a unit's refresh walks indexes from the rows it staged: no
    statement scans a base or summary table. (SQLite keeps no statistics of the base tables, so
    these are the plans it makes at any size.)"""
    query_fixture.build(engine)
    plans: list[tuple[str, str]] = []

    class Explaining:
        def __init__(self, conn):
            self.conn, self.dialect = conn, conn.dialect

        def execute(self, statement, params=None):
            if not isinstance(params, list):  # the staging of id ranges: a primary-key range
                plans.extend((str(statement), row[3]) for row in self.conn.execute(
                    text(f"EXPLAIN QUERY PLAN {statement}"), params or {}))
            return self.conn.execute(statement, params)

    with engine.begin() as conn:
        load_id, trial_id = conn.execute(text("SELECT max(load_id), max(trial_id) FROM trial_loads")).one()
        run_id = conn.execute(text("SELECT run_id FROM trials WHERE id = :t"), {"t": trial_id}).scalar()
        summaries.refresh(Explaining(conn), load_id, {trial_id}, {run_id})
    assert len(plans) > 20
    # Staged rows, the derived table of rows under keys, and the staged trials' episodes ranked
    # in their conversations (`l`, which SQLite's window function reads as a subquery).
    staged = {"t", "k", "touched", "x", "l"}
    scans = [(s, p) for s, p in plans if p.startswith("SCAN ") and (
        "USING" in p or (p.split()[1] not in staged and not p.startswith("SCAN (subquery-")))]
    assert [p for s, p in scans] == []


@pytest.mark.parametrize("backend", ["postgresql"])  # SQLite's joins are pinned by CROSS JOIN
def test_a_refresh_leaves_the_transactions_planner_settings_as_it_found_them(engine):
    """PostgreSQL's refresh joins by nested loops from the staged rows (hash and merge joins off
    for its statements: with them it scanned every trial, episode and length each unit); the
    unit's statements after it are planned as before, whatever the settings were."""
    query_fixture.build(engine)
    settings = "SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')"
    for before in ("on", "off"):
        with engine.begin() as conn:
            conn.execute(text(f"SET LOCAL enable_hashjoin = {before}"))
            load_id, trial_id = conn.execute(text("SELECT max(load_id), max(trial_id) FROM trial_loads")).one()
            run_id = conn.execute(text("SELECT run_id FROM trials WHERE id = :t"), {"t": trial_id}).scalar()
            seen = []
            real_execute = conn.execute

            def execute(statement, params=None):
                if "INSERT INTO trial_lengths" in str(statement):
                    seen.append(real_execute(text(settings)).one())
                return real_execute(statement, params)

            conn.execute = execute
            try:
                summaries.refresh(conn, load_id, {trial_id}, {run_id})
            finally:
                del conn.execute
            assert seen and set(seen) == {("off", "off")}
            assert conn.execute(text(settings)).one() == (before, "on")
    assert_exact(engine)


def test_a_unit_that_fails_leaves_the_summaries_as_they_were(engine):
    source = writer.ensure_source(engine, "parquet", "/src/first", "first")
    _unit(engine, source, "shard-0", [_trial("t1-a", "t1", 1.0)])
    before = stored(engine)
    with pytest.raises(RuntimeError):
        with writer.unit(engine, source, "shard-1", "hash-shard-1") as unit:
            unit.add_trials([_trial("t1-b", "t1", 1.0), _trial("t1-a", "t1", 1.0, n_input_tokens=5)])
            raise RuntimeError("killed mid-unit")
    assert stored(engine) == before
    assert_exact(engine)


def test_a_multi_step_trial_is_as_long_as_its_steps(engine, db_url, tmp_path):
    """The fixture job: a single-step trial (main: its longest episode, 8 turns) and a 4-step one
    whose steps fixed-design (longest: 32 turns) and final-summary (2) have trajectories. Each is
    given a subagent, longer than any of its episodes, which is no part of its length."""
    jobs = shutil.copytree(FIXTURE_JOBS, tmp_path / "jobs")
    job = jobs / "pinchbench-147-kimi2.6"
    chain = job / "task-session-chain-analysis__UGpJKzs"
    long_trajectory = chain / "steps" / "fixed-design" / "agent" / "trajectory.json"
    for agent in (job / "task-calendar__8A83BnJ" / "agent", chain / "steps" / "final-summary" / "agent"):
        shutil.copy(long_trajectory, agent / "trajectory.summarization-1-summary.json")
    assert ingest(engine, [str(jobs)]).errors == []
    with engine.connect() as conn:
        sources = {r[0] for r in conn.execute(text("SELECT DISTINCT trace_source FROM episodes"))}
        lengths = dict(((r[0], (r[1], r[2])) for r in conn.execute(text(
            "SELECT t.trial_name, l.turns, l.chars FROM trial_lengths l JOIN trials t ON t.id = l.trial_id"))))
    assert {"summarization-1-summary", "step:final-summary/summarization-1-summary"} <= sources
    assert lengths == {"task-calendar__8A83BnJ": (8, 1837),
                       "task-session-chain-analysis__UGpJKzs": (32 + 2, 84038 + 1397)}
    assert_exact(engine)
    rows = run_canned(db_url, QUERIES["lengths"]).rows
    assert {row[1]: row[2] for row in rows} == {"turns": 2, "chars": 2, "input_tokens": 2, "output_tokens": 2}
    assert {row[1]: row[5] for row in rows}["turns"] == 34
    assert assert_queries_match_definitions(db_url) > 30


def test_a_trace_trial_completed_later(engine, db_url, tmp_path):
    root = make_trace_tree(tmp_path / "traces", seed=3, job_trials=4, rl_trials=2, with_fixtures=False)
    trial = sorted((root / "job-a").glob("task-*"))[0]
    saved = tmp_path / "result.json"
    shutil.move(trial / "result.json", saved)
    assert ingest(engine, [str(root)]).errors == []
    assert_exact(engine)
    assert sum(row["incomplete"] for row in _runs(db_url)) == 1

    shutil.move(saved, trial / "result.json")
    assert ingest(engine, [str(root)]).units_loaded == 1
    assert_exact(engine)
    assert sum(row["incomplete"] for row in _runs(db_url)) == 0
    assert ingest(engine, [str(root)]).units_loaded == 0  # and a re-ingest changes nothing
    assert_exact(engine)
    assert_queries_match_definitions(db_url)


# --- the migration ----------------------------------------------------------------------------

def test_migration_backfills_and_drops(engine):
    query_fixture.build(engine)  # written unit by unit, by refresh()
    by_refresh = stored(engine)
    schema.downgrade(engine, "0003")
    with engine.connect() as conn:
        tables = {r[0] for r in conn.execute(text(
            "SELECT name FROM sqlite_master WHERE type = 'table'" if engine.dialect.name == "sqlite"
            else "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))}
    assert not tables & set(SUMMARY_TABLES) and "trials" in tables
    schema.upgrade(engine)
    assert_exact(engine)
    backfilled = stored(engine)
    # Same contents; only the surrogate ids of run_task_breakdown/outcomes rows may differ.
    assert backfilled == by_refresh


def test_migration_0009_gives_multi_step_trials_already_loaded_their_lengths(engine, tmp_path):
    """A warehouse loaded before 0009 holds a multi-step trial with no length (only `main`
    counted): the upgrade recomputes it and the counts of its summaries, as an ingest would."""
    jobs = shutil.copytree(FIXTURE_JOBS, tmp_path / "jobs")
    assert ingest(engine, [str(jobs)]).errors == []
    with engine.begin() as conn:  # what the old definition left: no main episode, no length
        conn.execute(text("UPDATE trial_lengths SET turns = NULL, chars = NULL WHERE trial_id IN "
                          "(SELECT trial_id FROM episodes WHERE trace_source LIKE 'step:%')"))
        for table in ("run_task_breakdown", "run_task_outcomes"):
            conn.execute(text(f"UPDATE {table} SET n_with_trajectory = n_with_trajectory - 1 WHERE task_id IN "
                              "(SELECT t.task_id FROM trials t JOIN episodes e ON e.trial_id = t.id "
                              "WHERE e.trace_source LIKE 'step:%')"))
    with pytest.raises(AssertionError):
        assert_exact(engine)
    schema.downgrade(engine, "0008")
    schema.upgrade(engine)
    assert_exact(engine)
