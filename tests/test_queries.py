"""Canned queries against numbers worked out by hand from tests/query_fixture.py (its
docstring lists every trial), on SQLite and PostgreSQL; their CLI, help and output formats."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import pytest

import query_fixture
from query_fixture import cli
from warehouse.errors import WarehouseError
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.outcome import DEFAULT_NOTE as ERRORS_NOTE
from warehouse.queries.registry import bind_names
from warehouse.queries.stats import benjamini_hochberg, holm, pass_at_k, percentile


@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


def run(url, name, **params):
    result = run_canned(url, QUERIES[name], params)
    return [dict(zip(result.columns, row)) for row in result.rows]


def approx_rows(rows):
    return [{k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()} for row in rows]


# --- the arithmetic ----------------------------------------------------------------------

def test_pass_at_k_by_hand():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 4) == 1.0  # n - c = 3 < 4: every draw of 4 holds a success
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(2, 2, 5) is None  # fewer attempts than k
    # Large n stays finite and exact enough where C(n, k) itself would overflow a float.
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([2] * 8 + [4], 0.9) == pytest.approx(2.4)
    assert percentile([7], 0.9) == 7
    assert percentile([], 0.5) is None


def test_holm_and_benjamini_hochberg_adjust_as_statsmodels_does(monkeypatch):
    import gc
    import random

    from statsmodels.stats.multitest import multipletests

    # multipletests runs a full garbage collection on every call: 0.1 s in a test process's heap,
    # a minute over these cases. It frees nothing the answer depends on.
    monkeypatch.setattr(gc, "collect", lambda *args: 0)

    rng = random.Random(27)
    for _ in range(300):
        p_values = [rng.random() ** 3 for _ in range(rng.randint(1, 40))]
        p_values += p_values[:2] + [1.0, 0.0][: rng.randint(0, 2)]  # ties, and the ends
        for adjust, method in ((holm, "holm"), (benjamini_hochberg, "fdr_bh")):
            assert adjust(p_values) == pytest.approx(list(multipletests(p_values, method=method)[1]), rel=1e-12,
                                                     abs=1e-15), method
    assert holm([]) == benjamini_hochberg([]) == []


def test_every_sql_parameter_is_declared():
    # A `:word` in a .sql file (a comment too) becomes a bind parameter: all must be declared.
    for query in QUERIES.values():
        for sql in filter(None, (query.sql, query.summary_sql, query.narrowed_sql)):
            assert bind_names(sql) <= {p.name for p in query.params}, query.name


def test_flags_are_written_into_the_statement_and_other_values_stay_binds():
    """A flag (`--unsolved`) is written in as 0 or 1, so PostgreSQL keeps a plan per combination
    instead of one generic plan guessing at a bind; every other value stays a bind."""
    from warehouse.queries.registry import _flags_written_in

    query = QUERIES["solve-matrix"]
    values = query.values({"unsolved": True})
    written = _flags_written_in(query.sql, query, values)
    assert "(1 = 0 OR p.runs_solved = 0)" in written and "(0 = 0 OR p.runs_solved = p.runs_attempted)" in written
    assert bind_names(written) == bind_names(query.sql) - {"unsolved", "solved_by_all"} == {"threshold"}


# --- each query, by hand -----------------------------------------------------------------

def test_runs(url):
    rows = run(url, "runs")
    assert approx_rows(rows) == [
        dict(run_key="run-a", name=None, trials=11, complete=10, incomplete=1, pass_rate=4 / 11, mean_reward=0.5,
             errors=1, agents="terminus", models="m1",
             first_started=datetime(2024, 1, 1, 10, tzinfo=timezone.utc),
             last_started=datetime(2024, 1, 1, 14, tzinfo=timezone.utc), sources="fixture-a, fixture-b"),
        dict(run_key="run-b", name=None, trials=9, complete=9, incomplete=0, pass_rate=2 / 9, mean_reward=0.25,
             errors=1, agents="terminus", models="m1, m2", first_started=None, last_started=None,
             sources="fixture-b"),
        dict(run_key="run-c", name=None, trials=2, complete=2, incomplete=0, pass_rate=1.0, mean_reward=1.0,
             errors=0, agents="openhands", models="m1", first_started=None, last_started=None,
             sources="fixture-a"),
    ]


def test_runs_threshold(url):
    # At 0.5 run-a's reward of 0.5 on task2 counts too: 5 of 11.
    assert [r["pass_rate"] for r in run(url, "runs", threshold=0.5)] == pytest.approx([5 / 11, 2 / 9, 1.0])


def _wilson(successes, trials):
    # The reference implementation (tests/test_stats.py checks ours against it across a grid).
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, trials, alpha=0.05, method="wilson")
    return dict(pass_rate_low=low, pass_rate_high=high)


def _clustered(tasks, rewards, errors, unknown=0):
    """pass-rate's row for a group whose known tasks had (successes, attempts) `tasks` and the
    rewards `rewards` (a list per task), with `unknown` successful trials of unknown task (each a
    cluster of its own), by the reference implementations (tests/stats_reference.py)."""
    from stats_reference import mean_interval, rate_interval

    clusters = tasks + [(1, 1)] * unknown
    successes, trials = sum(s for s, _ in clusters), sum(n for _, n in clusters)
    low, high = rate_interval(clusters)
    rewarded = [r for r in rewards + [[1.0]] * unknown if r]
    reward_low, reward_high = mean_interval(rewarded) if len(rewarded) > 1 else (None, None)
    return dict(trials=trials, successes=successes, pass_rate=successes / trials, pass_rate_low=low,
                pass_rate_high=high, mean_reward=sum(map(sum, rewarded)) / sum(map(len, rewarded)), errors=errors,
                mean_reward_low=reward_low, mean_reward_high=reward_high, n_tasks=len(tasks), n_attempts=trials)


def test_pass_rate_by_run_model_agent(url):
    """Intervals clustered by task (each trial of an unknown task its own), against statsmodels;
    Wilson's where every task has one attempt (run-c)."""
    # Per task (fixture docstring): run-a 2/5, 0/3, 2/2, 0/1; run-b 0/4, 1/3, 1/2; run-c 1/1 and
    # a trial of unknown task, 1/1.
    a = _clustered([(2, 5), (0, 3), (2, 2), (0, 1)], [[1, 0, 1, 0, 0], [0.5, 0], [1, 1], []], errors=1)
    b = _clustered([(0, 4), (1, 3), (1, 2)], [[0, 0, 0, 0], [1, 0], [1, 0]], errors=1)
    c = _clustered([(1, 1)], [[1]], errors=0, unknown=1)
    assert run(url, "pass-rate") == approx_rows([dict(run_key="run-a", **a), dict(run_key="run-b", **b),
                                                              dict(run_key="run-c", **c)])
    assert (a["mean_reward"], b["mean_reward"]) == (0.5, 0.25)
    assert a["pass_rate_high"] - a["pass_rate_low"] > 1.5 * (_wilson(4, 11)["pass_rate_high"] - _wilson(4, 11)["pass_rate_low"])
    # 2 of 2 on one attempt per task: Wilson's, whose low end is n / (n + z²) = 2 / 5.8415 by hand.
    assert (c["pass_rate_low"], c["pass_rate_high"]) == (pytest.approx(2 / (2 + 1.959964 ** 2)), 1.0)
    # m1: run-a's tasks with run-c's task1 and run-b's task3 in them, run-c's unknown trial.
    m1 = _clustered([(3, 6), (0, 3), (3, 4), (0, 1)], [[1, 0, 1, 0, 0, 1], [0.5, 0], [1, 1, 1, 0], []], errors=1,
                    unknown=1)
    m2 = _clustered([(0, 4), (1, 3)], [[0, 0, 0, 0], [1, 0]], errors=1)
    assert run(url, "pass-rate", by="model") == approx_rows([dict(model="m1", **m1), dict(model="m2", **m2)])
    assert (m1["trials"], m1["successes"], m1["mean_reward"]) == (15, 7, 7.5 / 13)
    terminus = _clustered([(2, 9), (1, 6), (3, 4), (0, 1)], [[1, 0, 1, 0, 0, 0, 0, 0, 0], [0.5, 0, 1, 0], [1, 1, 1, 0], []],
                          errors=2)
    openhands = _clustered([(1, 1)], [[1]], errors=0, unknown=1)
    assert run(url, "pass-rate", by="agent") == approx_rows(
        [dict(agent="openhands", **openhands), dict(agent="terminus", **terminus)])
    # A wider interval at a higher confidence, the same rate.
    [wide] = [r for r in run(url, "pass-rate", confidence=0.99) if r["run_key"] == "run-a"]
    assert wide["pass_rate_low"] < a["pass_rate_low"] < 4 / 11
    assert wide["pass_rate_high"] > a["pass_rate_high"]


def test_pass_rate_rejects_an_unknown_grouping(url):
    with pytest.raises(WarehouseError, match="--by must be one of"):
        run(url, "pass-rate", by="task")


SOLVE_MATRIX = [
    # task, run, attempts, successes, runs_solved, runs_attempted
    ("task1", "run-a", 5, 2, 2, 3),
    ("task1", "run-b", 4, 0, 2, 3),
    ("task1", "run-c", 1, 1, 2, 3),
    ("task2", "run-a", 3, 0, 1, 2),
    ("task2", "run-b", 3, 1, 1, 2),
    ("task3", "run-a", 2, 2, 2, 2),
    ("task3", "run-b", 2, 1, 2, 2),
    ("task4", "run-a", 1, 0, 0, 1),
]


def _matrix(rows):
    return [tuple(r.values()) for r in rows]


def test_solve_matrix(url):
    assert _matrix(run(url, "solve-matrix")) == SOLVE_MATRIX
    assert _matrix(run(url, "solve-matrix", unsolved=True)) == [("task4", "run-a", 1, 0, 0, 1)]
    assert _matrix(run(url, "solve-matrix", solved_by_all=True)) == [
        ("task3", "run-a", 2, 2, 2, 2), ("task3", "run-b", 2, 1, 2, 2)]


def test_solve_matrix_threshold(url):
    # At 0.5 run-a solves task2 (reward 0.5), so both runs that tried task2 solved it.
    assert _matrix(run(url, "solve-matrix", solved_by_all=True, threshold=0.5)) == [
        ("task2", "run-a", 3, 1, 2, 2), ("task2", "run-b", 3, 1, 2, 2),
        ("task3", "run-a", 2, 2, 2, 2), ("task3", "run-b", 2, 1, 2, 2)]
    assert _matrix(run(url, "solve-matrix", unsolved=True, threshold=0.5)) == [("task4", "run-a", 1, 0, 0, 1)]


def test_pass_at_k_per_task(url):
    rows = run(url, "pass-at-k", k="1,2,5", per_task=True)
    N = None
    assert approx_rows(rows) == [
        {"run_key": r, "task": t, "n": n, "c": c, "pass@1": p1, "pass@2": p2, "pass@5": p5}
        for r, t, n, c, p1, p2, p5 in [
            ("run-a", "task1", 5, 2, 0.4, 0.7, 1.0),  # 1 - C(3,2)/C(5,2); n-c = 3 < 5 -> 1
            ("run-a", "task2", 3, 0, 0.0, 0.0, N),
            ("run-a", "task3", 2, 2, 1.0, 1.0, N),
            ("run-a", "task4", 1, 0, 0.0, N, N),
            ("run-b", "task1", 4, 0, 0.0, 0.0, N),
            ("run-b", "task2", 3, 1, 1 / 3, 2 / 3, N),  # 1 - C(2,2)/C(3,2)
            ("run-b", "task3", 2, 1, 0.5, 1.0, N),  # n-c = 1 < 2 -> 1
            ("run-c", "task1", 1, 1, 1.0, N, N),
        ]
    ]


def test_pass_at_k_per_run(url):
    rows = run(url, "pass-at-k", k="1,2,5")
    estimates = [{k: v for k, v in row.items() if not k.endswith(("_low", "_high"))} for row in rows]
    assert approx_rows(estimates) == [
        # means over the tasks with at least k attempts
        {"run_key": "run-a", "tasks": 4, "min_attempts": 1,
         "pass@1": (0.4 + 0 + 1 + 0) / 4, "pass@2": (0.7 + 0 + 1) / 3, "pass@5": 1.0},
        {"run_key": "run-b", "tasks": 3, "min_attempts": 2,
         "pass@1": (0 + 1 / 3 + 0.5) / 3, "pass@2": (0 + 2 / 3 + 1) / 3, "pass@5": None},
        {"run_key": "run-c", "tasks": 1, "min_attempts": 1, "pass@1": 1.0, "pass@2": None, "pass@5": None},
    ]
    assert list(rows[0]) == ["run_key", "tasks", "min_attempts", "pass@1", "pass@1_low", "pass@1_high",
                             "pass@2", "pass@2_low", "pass@2_high", "pass@5", "pass@5_low", "pass@5_high"]
    a, b, c = rows
    # One task behind a mean (run-a's pass@5, run-c's pass@1): every resample draws it, so the
    # interval is that task's value. None where the mean is None.
    assert (a["pass@5_low"], a["pass@5_high"]) == (1.0, 1.0)
    assert (c["pass@1_low"], c["pass@1_high"]) == (1.0, 1.0)
    assert (b["pass@5_low"], b["pass@5_high"], c["pass@2_low"]) == (None, None, None)
    # Otherwise the interval holds the mean, within the least and greatest task's value (run-a's
    # pass@1 over 0.4, 0, 1, 0), and is the same for the same seed.
    assert 0.0 <= a["pass@1_low"] < a["pass@1"] < a["pass@1_high"] <= 1.0
    assert run(url, "pass-at-k", k="1,2,5") == rows
    assert run(url, "pass-at-k", k="1,2,5", resamples=1)[0]["pass@1_low"] == \
        run(url, "pass-at-k", k="1,2,5", resamples=1)[0]["pass@1_high"]
    # A run's interval does not depend on the other runs shown (each run is seeded apart).
    assert [r for r in run(url, "pass-at-k", k="5,1,2") if r["run_key"] == "run-a"][0]["pass@1_low"] == \
        a["pass@1_low"]


def test_pass_at_k_threshold(url):
    # At 0.5, run-a's task2 has c = 1 of 3: pass@1 = 1/3, pass@2 = 2/3.
    rows = {(r["run_key"], r["task"]): r for r in run(url, "pass-at-k", k="1,2", per_task=True, threshold=0.5)}
    assert rows[("run-a", "task2")]["pass@1"] == pytest.approx(1 / 3)
    assert rows[("run-a", "task2")]["pass@2"] == pytest.approx(2 / 3)


def test_compare(url):
    assert _matrix(run(url, "compare", a="run-a", b="run-b")) == [
        ("task1", 5, 2, 4, 0, "lost"),
        ("task2", 3, 0, 3, 1, "gained"),
        ("task3", 2, 2, 2, 1, None),
        ("task4", 1, 0, 0, 0, None),  # run-b never tried it: no flip
    ]
    assert _matrix(run(url, "compare", a="run-a", b="run-b", flipped=True)) == [
        ("task1", 5, 2, 4, 0, "lost"), ("task2", 3, 0, 3, 1, "gained")]
    assert _matrix(run(url, "compare", a="run-b", b="run-a", flipped=True)) == [
        ("task1", 4, 0, 5, 2, "gained"), ("task2", 3, 1, 3, 0, "lost")]


def test_compare_threshold(url):
    # At 0.5 run-a solves task2 as well: only task1 flips.
    assert _matrix(run(url, "compare", a="run-a", b="run-b", flipped=True, threshold=0.5)) == [
        ("task1", 5, 2, 4, 0, "lost")]


def test_compare_test(url):
    # Shared tasks: task1, task2, task3 (run-b never tried task4). run-b gained task2 and lost task1.
    # Several attempts per task: the paired t-test on the tasks' shares, whose differences
    # B - A are -0.4, 1/3 and -0.5 (scipy's one-sample t-test of them is the reference).
    from scipy import stats as scipy_stats

    [row] = run(url, "compare-test", a="run-a", b="run-b")
    assert approx_rows([row]) == [dict(
        a="run-a", b="run-b", shared=3, gained=1, lost=1,
        p_value=scipy_stats.ttest_1samp([-0.4, 1 / 3, -0.5], 0).pvalue,
        pass_rate_a=(2 / 5 + 0 / 3 + 2 / 2) / 3, pass_rate_b=(0 / 4 + 1 / 3 + 1 / 2) / 3,
        diff=(0 / 4 + 1 / 3 + 1 / 2 - 2 / 5 - 0 / 3 - 2 / 2) / 3,
        diff_low=row["diff_low"], diff_high=row["diff_high"], verdict="too few shared tasks",
        test="paired t", discordant=3, only_a=1, only_b=0)]
    # The per-task differences are -0.4, 1/3 and -0.5: every resample's mean lies within them.
    assert -0.5 <= row["diff_low"] < row["diff"] < row["diff_high"] <= 1 / 3
    [alone] = run(url, "compare-test", a="run-a", b="run-c")  # task1 only; run-c's other trial has no task
    assert (alone["shared"], alone["gained"], alone["lost"], alone["verdict"]) == (1, 0, 0, "too few shared tasks")
    assert (alone["only_a"], alone["only_b"], alone["p_value"]) == (3, 0, 1.0)
    # --tasks: the tasks whose share differs, and those one run alone attempted.
    assert approx_rows(run(url, "compare-test", a="run-a", b="run-b", tasks=True)) == approx_rows([
        dict(task="task1", a_attempts=5, a_successes=2, b_attempts=4, b_successes=0, diff=-0.4, kind="A higher"),
        dict(task="task2", a_attempts=3, a_successes=0, b_attempts=3, b_successes=1, diff=1 / 3, kind="B higher"),
        dict(task="task3", a_attempts=2, a_successes=2, b_attempts=2, b_successes=1, diff=-0.5, kind="A higher"),
        dict(task="task4", a_attempts=1, a_successes=0, b_attempts=0, b_successes=0, diff=None, kind="only A")])
    assert [r["kind"] for r in run(url, "compare-test", a="run-b", b="run-a", tasks=True)][-1] == "only B"
    assert run(url, "compare-test", a="run-a", b="run-a", tasks=True) == []


def test_compare_needs_existing_runs(url):
    with pytest.raises(WarehouseError, match="no run 'run-x'"):
        run(url, "compare", a="run-a", b="run-x")
    with pytest.raises(WarehouseError, match="--a is required"):
        run(url, "compare", b="run-b")


def test_failures(url):
    assert approx_rows(run(url, "failures")) == [
        dict(run_key="run-a", exception_type="AgentTimeoutError", trials=1, tasks=1, share=1 / 11),
        dict(run_key="run-b", exception_type="RuntimeError", trials=1, tasks=1, share=1 / 9),
    ]


def test_lengths(url):
    N = None
    expected = [
        # run-a: 10 trials with the default episode (2 turns, 9 chars); the incomplete one has none.
        ("run-a", "turns", 10, 2, 2, 2),
        ("run-a", "chars", 10, 9, 9, 9),
        ("run-a", "input_tokens", 5, 30, 46, 50),  # 10..50: p90 at rank 3.6 -> 40 + 0.6 * 10
        ("run-a", "output_tokens", 5, 3, 4.6, 5),
        # run-b: 8 trials of 2 turns / 9 chars, and task2__b0's longest episode: 4 turns, 48 chars.
        ("run-b", "turns", 9, 2, 2.4, 4),  # p90 at rank 7.2 -> 2 + 0.2 * 2
        ("run-b", "chars", 9, 9, 16.8, 48),  # 9 + 0.2 * 39
        ("run-b", "input_tokens", 0, N, N, N),
        ("run-b", "output_tokens", 0, N, N, N),
        # run-c: "shared" (longest episode 4 turns, 41 chars) and c2 (2 turns, 36 chars).
        ("run-c", "turns", 2, 3, 3.8, 4),
        ("run-c", "chars", 2, 38.5, 40.5, 41),
        ("run-c", "input_tokens", 2, 200, 280, 300),
        ("run-c", "output_tokens", 1, 10, 10, 10),
    ]
    rows = run(url, "lengths")
    assert [tuple(r.values()) for r in rows] == [
        tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in expected]


# costs' measures: (its columns' prefix, the Trial field it sums).
COST_FIELDS = (("cost_usd", "cost_usd"), ("input_tokens", "n_input_tokens"), ("output_tokens", "n_output_tokens"),
               ("cache_tokens", "n_cache_tokens"))


def _p90(values):
    """The 90th percentile by linear interpolation between ranks, by the standard library."""
    import statistics

    if len(values) < 2:
        return float(values[0]) if values else None
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _costs_by_hand(group_of, column):
    """costs' rows from the fixture's own trial records: one per group (sorted, None last), each
    measure over the trials that have it."""
    trials = query_fixture.run_a() + query_fixture.run_b() + query_fixture.run_c()
    groups = {}
    for trial in trials:
        groups.setdefault(group_of(trial), []).append(trial)
    rows = []
    for group in sorted(groups, key=lambda g: (g is None, g or "")):
        row = {column: group, "trials": len(groups[group])}
        for prefix, field in COST_FIELDS:
            known = sorted(getattr(t, field) for t in groups[group] if getattr(t, field) is not None)
            row[f"{prefix}_n"] = len(known)
            row[f"{prefix}_sum"] = sum(known) if known else None
            row[f"{prefix}_mean"] = sum(known) / len(known) if known else None
            row[f"{prefix}_p90"] = _p90(known)
        rows.append(row)
    return rows


def _exactly(rows):
    """Rows to compare: floats approximately, and each value of its own type (a token sum an int)."""
    return [{k: (type(v), pytest.approx(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]


def test_costs_by_run_model_agent_and_label(url, engine):
    from warehouse.runs import resolve_run, set_labels

    # run-a and run-b share a label value, run-c has none: its trials make the last group.
    with engine.begin() as conn:
        for key in ("run-a", "run-b"):
            set_labels(conn, resolve_run(conn, key).id, {"kind": "x"})
    labelled = {"run-a": "x", "run-b": "x"}
    for by, column, group_of in (("run", "run_key", lambda t: t.run_key), ("model", "model", lambda t: t.model),
                                 ("agent", "agent", lambda t: t.agent),
                                 ("label:kind", "kind", lambda t: labelled.get(t.run_key))):
        got = run(url, "costs", by=by)
        want = _costs_by_hand(group_of, column)
        assert list(got[0]) == list(want[0]), by  # every column, in order
        assert [{k: (type(v), v) for k, v in row.items()} for row in got] == _exactly(want), by
    # By hand, the figures the fixture's docstring gives: a missing value is left out, a 0 is a value.
    [a, b, c] = run(url, "costs")
    assert (a["cost_usd_n"], a["cost_usd_sum"], a["cost_usd_mean"], a["cost_usd_p90"]) == (
        4, pytest.approx(0.12), pytest.approx(0.03), pytest.approx(0.047))  # 0.04 + 0.7 * 0.01
    assert (a["cache_tokens_n"], a["cache_tokens_sum"], a["cache_tokens_mean"]) == (3, 15, 5.0)
    assert (b["trials"], b["cost_usd_n"], b["cost_usd_sum"], b["input_tokens_mean"]) == (9, 0, None, None)
    assert (c["input_tokens_n"], c["input_tokens_sum"], c["input_tokens_p90"], c["output_tokens_n"]) == (
        2, 400, pytest.approx(280), 1)


def test_costs_narrowed_and_on_the_command_line(url):
    want = _costs_by_hand(lambda t: t.model, "model")
    done = cli(url, "query", "costs", "--by", "model", "--format", "json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout) == [{k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}
                                       for row in want]
    # Narrowed to task1 and terminus: run-a's five trials (one without a cost) and run-b's four (none).
    as_csv = cli(url, "query", "costs", "--task", "task1", "--agent", "terminus", "--format", "csv")
    header, *lines = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert header[:6] == ["run_key", "trials", "cost_usd_n", "cost_usd_sum", "cost_usd_mean", "cost_usd_p90"]
    assert [line[:4] for line in lines] == [["run-a", "5", "4", "0.12"], ["run-b", "4", "0", ""]]
    bad = cli(url, "query", "costs", "--by", "task")
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].endswith(
        "--by must be one of run, model, agent, label:KEY, not 'task'"), bad.stderr


# --- the command line ----------------------------------------------------------------------

def test_cli_list_and_help(tmp_path):
    listing = cli(str(tmp_path / "none.db"), "query", "list", "--format", "json")
    assert listing.returncode == 0, listing.stderr
    assert [q["name"] for q in json.loads(listing.stdout)] == list(QUERIES)
    helped = cli(str(tmp_path / "none.db"), "query", "pass-at-k", "--help")
    assert helped.returncode == 0
    for option in ("--k", "--per-task", "--threshold", "--format", "--timeout"):
        assert option in helped.stdout


def test_cli_formats_parse(url):
    as_json = cli(url, "query", "compare", "--a", "run-a", "--b", "run-b", "--flipped", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [
        dict(task="task1", a_attempts=5, a_successes=2, b_attempts=4, b_successes=0, flip="lost"),
        dict(task="task2", a_attempts=3, a_successes=0, b_attempts=3, b_successes=1, flip="gained"),
    ]
    as_jsonl = cli(url, "query", "pass-at-k", "--k", "1,2", "--format", "jsonl")
    lines = [json.loads(line) for line in as_jsonl.stdout.splitlines()]
    assert [line["run_key"] for line in lines] == ["run-a", "run-b", "run-c"]
    assert lines[0]["pass@2"] == pytest.approx((0.7 + 0 + 1) / 3)
    as_csv = cli(url, "query", "solve-matrix", "--unsolved", "--format", "csv")
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["task", "run_key", "attempts", "successes", "runs_solved", "runs_attempted"],
        ["task4", "run-a", "1", "0", "0", "1"],
    ]
    table = cli(url, "query", "runs")
    assert table.returncode == 0 and "run-a" in table.stdout and "fixture-a, fixture-b" in table.stdout


def test_cli_errors(url):
    missing = cli(url, "query", "compare", "--a", "run-a")
    assert missing.returncode == 2  # usage: --b is required
    unknown = cli(url, "query", "compare", "--a", "run-a", "--b", "nope")
    assert unknown.returncode == 1
    assert unknown.stderr.strip().splitlines() == ["Error: no run 'nope' (`warehouse runs` lists them)"]
    bad_k = cli(url, "query", "pass-at-k", "--k", "0,x")
    assert bad_k.returncode == 2 and "expected integers" in bad_k.stderr
    bad_by = cli(url, "query", "pass-rate", "--by", "task")
    assert bad_by.returncode == 2
    for args, message in [
        (["pass-rate", "--confidence", "1.5"], "Error: --confidence must lie strictly between 0 and 1, not 1.5"),
        (["pass-at-k", "--confidence", "0"], "Error: --confidence must lie strictly between 0 and 1, not 0.0"),
        (["compare-test", "--a", "run-a", "--b", "run-b", "--resamples", "0"],
         "Error: --resamples must be at least 1, not 0"),
    ]:
        done = cli(url, "query", *args)
        assert (done.returncode, done.stderr.strip().splitlines()) == (1, [message]), args


def test_cli_compare_verdict(url):
    table = cli(url, "query", "compare", "--a", "run-a", "--b", "run-b")
    assert table.returncode == 0 and "task4" in table.stdout
    assert table.stderr.splitlines() == [
        f"note: {ERRORS_NOTE}",
        "compare: too few shared tasks: 3 shared tasks (1 only in A, 0 only in B), 3 differ, B gained 1 and "
        "lost 1 (paired t p = 0.547); pass rate B - A = -0.189, 95% interval -0.500 to +0.333 (paired bootstrap, "
        "2000 resamples, seed 0)"]
    test = cli(url, "query", "compare-test", "--a", "run-a", "--b", "run-b", "--format", "json")
    assert test.returncode == 0 and test.stderr.splitlines() == [f"note: {ERRORS_NOTE}"]
    assert [(r["shared"], r["verdict"]) for r in json.loads(test.stdout)] == [(3, "too few shared tasks")]
    for option in ("--confidence", "--resamples", "--seed"):
        assert option in cli(url, "query", "pass-at-k", "--help").stdout


@pytest.mark.parametrize("command", [
    ["query", "runs"], ["sql", "SELECT 1"], ["search", "x"], ["show", "t1"], ["index", "build"],
])
def test_commands_check_the_schema_first(empty_db_url, command):
    done = cli(empty_db_url, *command)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "no warehouse" in done.stderr  # SQLite: "no warehouse at PATH" (a read creates no file)


def test_a_threshold_is_finite_and_within_0_1_or_the_rewards(url, engine):
    import math

    import warehouse
    from sqlalchemy import text
    from warehouse.errors import ArgumentValueError

    with warehouse.open(url) as wh:
        for bad, says in [(math.nan, "--threshold must be a finite number, not nan"),
                          (-math.inf, "--threshold must be a finite number, not -inf"),
                          (-5, r"--threshold must lie between 0 and 1 \(0 to 1, or further where the "
                               r"rewards stored do\), not -5"),
                          (1.5, "--threshold must lie between 0 and 1")]:
            for name in ("runs", "pass-rate", "solve-matrix", "pass-at-k", "compare", "compare-test"):
                given = {"a": "run-a", "b": "run-b"} if name.startswith("compare") else {}
                with pytest.raises(ArgumentValueError, match=f"^{says}"):
                    wh.query(name, threshold=bad, **given)
        assert wh.query("runs", threshold=0).rows  # 0 and 1 are always allowed
    # Rewards beyond [0, 1] (a score out of 40): thresholds up to the highest stored are questions.
    with engine.begin() as conn:
        conn.execute(text("UPDATE trials SET reward = 40 WHERE trial_name = 'task3__a1'"))
    done = cli(url, "query", "runs", "--threshold", "20", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert {r["run_key"]: r["pass_rate"] for r in json.loads(done.stdout)}["run-a"] == pytest.approx(1 / 11)
    done = cli(url, "query", "runs", "--threshold", "40.5")
    assert (done.returncode, done.stderr.splitlines()) == (1, [
        "Error: --threshold must lie between 0 and 40 (0 to 1, or further where the rewards stored do), not 40.5"])


def test_tables_name_runs_and_keep_what_the_query_is_for(url, engine):
    import os
    import subprocess
    import sys

    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'alpha' WHERE run_key = 'run-a'"))

    def table(*args, columns="200"):
        done = subprocess.run([sys.executable, "-m", "warehouse", "--db", url, "query", *args], capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": columns}, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    # A table names each run beside its key (∅: no name); CSV and JSON keep their columns.
    matrix = table("solve-matrix").stdout.splitlines()
    assert matrix[0].split()[:3] == ["task", "run_key", "run_name"]
    assert {tuple(line.split()[1:3]) for line in matrix[2:]} == {("run-a", "alpha"), ("run-b", "∅"), ("run-c", "∅")}
    assert cli(url, "query", "solve-matrix", "--format", "csv").stdout.splitlines()[0] == \
        "task,run_key,attempts,successes,runs_solved,runs_attempted"
    assert table("pass-rate").stdout.splitlines()[0].split()[:2] == ["run_key", "run_name"]
    assert table("runs").stdout.splitlines()[0].split()[:3] == ["run_key", "name", "trials"]  # named already
    # compare-test: both runs named; at 80 columns the verdict stays (it came last, and went first).
    narrow = table("compare-test", "run-a", "run-b", columns="80")
    head, _, row = narrow.stdout.splitlines()
    assert head.split()[:4] == ["a", "a_name", "b", "b_name"] and head.split()[-1] == "verdict"
    assert row.split()[:2] == ["run-a", "alpha"] and "too few shared tasks" in row
    assert "verdict" not in narrow.stderr and "not shown at this width" in narrow.stderr
