"""Every canned query narrowed by --run, --task, --model, --agent, --label, --since and --until, on
both backends.

The rule the tests hold each query to: a filtered answer is the answer of a warehouse that holds
only the trials the filter selects (loaded by the same writer, from the same units), and the
summary statements give the same answer as the definitions under every filter, without reading
the trials."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy import text

import query_fixture
from conftest import another_warehouse
from query_fixture import cli
from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import LEDGER, UNSUMMARIZED
from warehouse.queries.outcome import DEFAULT_NOTE as ERRORS_NOTE
from warehouse.queries.registry import narrow
from warehouse.runs import resolve_run, set_labels

# name: (the filters, which trials they select). run-b is named "beta"; run-b and run-c carry
# kind=x, run-a kind=y (see _decorate).
CASES: dict[str, tuple[Filters, Any]] = {
    "run by key and name": (Filters.of(run=["run-a", "beta"]), lambda t: t.run_key in ("run-a", "run-b")),
    "task": (Filters.of(task=["task1", "*3"]), lambda t: t.task_name in ("task1", "task3")),
    "task glob ignoring case": (Filters.of(task="TASK?"), lambda t: t.task_name is not None),
    "label": (Filters.of(label="kind=x"), lambda t: t.run_key in ("run-b", "run-c")),
    "model": (Filters.of(model="m2"), lambda t: t.model == "m2"),
    # A provider on the value, none on the stored model (Harbor's multi-step trials).
    "model with a provider": (Filters.of(model="openrouter/M?"), lambda t: t.model is not None),
    "agent": (Filters.of(agent="OPEN*"), lambda t: t.agent == "openhands"),
    "several": (Filters.of(run=["run-a", "run-b"], task="task?", model="m1", label=["kind=y"]),
                lambda t: t.run_key == "run-a" and t.task_name is not None and t.model == "m1"),
    # run-a's task1 trials started at 10:00 to 14:00 UTC on 2024-01-01; the others' start is
    # unknown, which no window holds.
    "since": (Filters.of(since="2024-01-01T11:00"), lambda t: t.started_at is not None and t.started_at.hour >= 11),
    "since in another zone": (Filters.of(since="2024-01-01T12:30+01:00"),
                              lambda t: t.started_at is not None and t.started_at.hour >= 12),
    "until a day": (Filters.of(until="2024-01-01"), lambda t: t.started_at is not None),
    "window": (Filters.of(since="2024-01-01T11:00Z", until="2024-01-01T13:00:00+00:00", task="task*"),
               lambda t: t.started_at is not None and 11 <= t.started_at.hour < 13),
    # Past the calendar's ends: the window stops at them (every trial with a start).
    "since an age older than year 1": (Filters.of(since="9999999999999999999999h"), lambda t: t.started_at is not None),
    "until the calendar's last day": (Filters.of(until="9999-12-31"), lambda t: t.started_at is not None),
    "since before year 1 in UTC": (Filters.of(since="0001-01-01T00:00+01:00", until="9999-12-31T23:59-01:00"),
                                   lambda t: t.started_at is not None),
}


def _decorate(engine) -> None:
    """Names and labels, the same in the whole warehouse and in each restricted one."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'beta' WHERE run_key = 'run-b'"))
        for key, value in (("run-a", "y"), ("run-b", "x"), ("run-c", "x")):
            run_id = conn.execute(text("SELECT id FROM runs WHERE run_key = :k"), {"k": key}).scalar()
            if run_id is not None:
                set_labels(conn, run_id, {"kind": value, "step": str(len(key) * ord(key[-1]))})


@pytest.fixture
def whole(engine, db_url) -> str:
    query_fixture.build(engine)
    _decorate(engine)
    return db_url


def _restricted(backend: str, tmp_path, request, keep):
    """A second warehouse holding only the trials `keep` keeps."""
    def fill(engine) -> None:
        query_fixture.build(engine, keep)
        _decorate(engine)

    return another_warehouse(backend, tmp_path / "restricted", request, fill)


def _variants(name: str, runs: list[str]) -> list[dict[str, Any]]:
    params = {p.name for p in QUERIES[name].params}
    variants: list[dict[str, Any]] = [{}]
    for by in (p for p in QUERIES[name].params if p.name == "by"):
        variants += [{"by": c} for c in by.choices if c != "run"] + [{"by": "label:step"}, {"by": "label:kind"}]
    if "unsolved" in params:
        variants += [{"unsolved": True}, {"solved_by_all": True}]
    if "per_task" in params:
        variants += [{"per_task": True, "k": "1,2,3"}]
    if "a" in params:
        variants = [dict(v, a=runs[0], b=runs[-1]) for v in ({}, {"flipped": True}) if set(v) <= params]
    if "threshold" in params:
        variants += [dict(v, threshold=0.5) for v in variants]  # the definitions, filtered
    return variants


def _approx(rows: list[tuple]) -> list[tuple]:
    return [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in rows]


def _answer(url: str, name: str, given: dict[str, Any], filters: Filters | None = None, *,
            summaries: bool = True, trials_narrowed: bool = False) -> tuple[list[str], list[tuple]]:
    result = run_canned(url, QUERIES[name], given, filters=filters, summaries=summaries)
    columns, rows = result.columns, result.rows
    if name == "runs" and trials_narrowed:
        # A run's sources are the whole run's; a warehouse of some of its trials knows fewer.
        keep = [i for i, c in enumerate(columns) if c != "sources"]
        columns, rows = [columns[i] for i in keep], [tuple(row[i] for i in keep) for row in rows]
    return columns, rows


# The ledger's queries (sources, loads) count loads, which a warehouse built from only the trials
# selected does not share: their filters are tested in test_ledger.py.
ANSWERS = [name for name in QUERIES if name not in LEDGER]


@pytest.mark.parametrize("case", list(CASES))
def test_a_filtered_answer_is_the_answer_over_the_trials_selected(case, whole, backend, tmp_path, request):
    filters, keep = CASES[case]
    with _restricted(backend, tmp_path, request, keep) as url:
        runs = [row[0] for row in run_canned(url, QUERIES["runs"]).rows]
        assert runs, case
        compared = set()
        for name in ANSWERS:
            for given in _variants(name, runs):
                want = _answer(url, name, given, trials_narrowed=filters.narrows_trials)
                got = _answer(whole, name, given, filters, trials_narrowed=filters.narrows_trials)
                assert got[0] == want[0], (name, given)
                assert got[1] == _approx(want[1]), (name, given)
                compared.add(name)
        assert compared == set(ANSWERS)


@pytest.mark.parametrize("name", list(QUERIES))
def test_summaries_answer_as_the_definitions_do_under_every_filter(name, whole):
    runs = [row[0] for row in run_canned(whole, QUERIES["runs"]).rows]
    for case, (filters, _) in CASES.items():
        for given in _variants(name, runs):
            summarized = run_canned(whole, QUERIES[name], given, filters=filters)
            defined = run_canned(whole, QUERIES[name], given, filters=filters, summaries=False)
            assert summarized.columns == defined.columns, (case, given)
            assert summarized.rows == _approx(defined.rows), (case, given)


_READS_TRIALS = re.compile(r"\b(FROM|JOIN)\s+(trials|episodes|turns)\b", re.IGNORECASE)


@pytest.mark.parametrize("name", ANSWERS)
def test_filters_keep_the_summary_path(name, whole, engine):
    """At the default threshold a filtered query still reads the summaries, never the trials;
    the exceptions: lengths narrowed within runs reads the trials' own columns beside
    trial_lengths (which has no task, model or agent), never their episodes; costs reads the
    trials' own columns (catalog.UNSUMMARIZED); and pass-rate (and leaderboard, from the same
    statements) reads the trials of unknown task, each a cluster of its own, which the summaries
    hold together."""
    query = QUERIES[name]
    values = query.values({p.name: "run-a" for p in query.params if p.required})
    for case, (filters, _) in CASES.items():
        sql, _ = query.plan(values, filters=filters)
        if filters.times:  # the summaries hold no start: a window reads the definition
            assert sql is query.sql, case
            continue
        narrowed = name == "lengths" and filters.narrows_trials
        own = name in UNSUMMARIZED
        assert sql is (query.narrowed_sql if narrowed else query.sql if own else query.summary_sql), case
        with engine.connect() as conn:
            filled, binds = narrow(sql, query.filter_slots if narrowed or own else query.summary_filter_slots,
                                   filters, conn)
        reads = {m.group(2).lower() for m in _READS_TRIALS.finditer(filled)}
        clustered = name in ("pass-rate", "leaderboard")  # leaderboard reads pass-rate's statements
        assert "{" not in filled, (case, filled)
        assert reads == ({"trials"} if narrowed or own or clustered else set()), (case, filled)
        if clustered:  # through the index on task_id, only those of unknown task
            assert filled.count("FROM trials tr\n    WHERE tr.task_id IS NULL AND ") == 1, case
        assert set(binds) <= {n for n in re.findall(r":(\w+)", filled)}, case


def test_an_unknown_or_ambiguous_run_is_an_error_before_the_query(whole):
    for name, query in QUERIES.items():
        given = {p.name: "run-a" for p in query.params if p.required}
        with pytest.raises(WarehouseError, match=r"^no run 'nope' \(`warehouse runs` lists them\)$"):
            run_canned(whole, query, given, filters=Filters.of(run="nope"))
        with pytest.raises(WarehouseError, match=r"^run 'run-' is ambiguous: it could be run-a, run-b \(beta\), run-c$"):
            run_canned(whole, query, given, filters=Filters.of(run="run-"))
    with pytest.raises(WarehouseError, match="^a label is key=value"):
        Filters.of(label="kind")


def test_pass_rate_by_label_orders_numbers_as_numbers(whole, engine):
    # step labels: run-a 5*97 = 485, run-b 5*98 = 490, run-c 5*99 = 495; and kind: y, x, x.
    rows = run_canned(whole, QUERIES["pass-rate"], {"by": "label:kind"}).rows
    assert [row[:3] for row in rows] == [("x", 11, 4), ("y", 11, 4)]
    with engine.begin() as conn:
        for key, step in (("run-a", "10"), ("run-b", "9"), ("run-c", "1e2")):
            set_labels(conn, resolve_run(conn, key).id, {"step": step})
    result = run_canned(whole, QUERIES["pass-rate"], {"by": "label:step"})
    assert result.columns[0] == "step"
    assert [row[0] for row in result.rows] == ["9", "10", "1e2"]
    unlabelled = run_canned(whole, QUERIES["pass-rate"], {"by": "label:nothing"}).rows
    assert [row[:2] for row in unlabelled] == [(None, 22)]  # runs without the label: one group
    with pytest.raises(WarehouseError, match="--by must be one of run, model, agent, label:KEY"):
        run_canned(whole, QUERIES["pass-rate"], {"by": "task"})
    with pytest.raises(WarehouseError, match="label:KEY needs a label key"):
        run_canned(whole, QUERIES["pass-rate"], {"by": "label:"})


def test_pass_at_k_by_label_pools_the_attempts_of_the_runs_that_share_a_value(whole):
    """kind=x is run-b and run-c: each task's n and c are theirs summed, and the group's pass@k is
    the mean over its tasks of pass@k of those (n, c); the groups read in the label's order."""
    from warehouse.queries.stats import pass_at_k

    query = QUERIES["pass-at-k"]
    per_run = run_canned(whole, query, {"per_task": True, "k": "1,2"}).rows
    pooled: dict[tuple[str, str], list[int]] = {}
    kind = {"run-a": "y", "run-b": "x", "run-c": "x"}
    for run, task, n, c, *_ in per_run:
        cell = pooled.setdefault((kind[run], task), [0, 0])
        cell[0] += n
        cell[1] += c
    result = run_canned(whole, query, {"per_task": True, "k": "1,2", "by": "label:kind"})
    assert result.columns[:4] == ["kind", "task", "n", "c"]
    assert [tuple(row[:4]) for row in result.rows] == [(g, t, n, c) for (g, t), (n, c) in sorted(pooled.items())]
    means = run_canned(whole, query, {"k": "1,2", "by": "label:kind"})
    assert [row[0] for row in means.rows] == ["x", "y"]
    for row in means.rows:
        cells = [(n, c) for (g, _), (n, c) in pooled.items() if g == row[0]]
        assert row[1] == len(cells) and row[2] == min(n for n, _ in cells)
        for k, at in ((1, 3), (2, 6)):
            known = [pass_at_k(n, c, k) for n, c in cells if n >= k]
            assert row[at] == pytest.approx(sum(known) / len(known))
            assert row[at + 1] <= row[at] <= row[at + 2]
    with pytest.raises(WarehouseError, match="--by must be one of run, label:KEY"):
        run_canned(whole, query, {"by": "model"})


# --- the command line ----------------------------------------------------------------------

def test_cli_filters_every_query(whole):
    for name, query in QUERIES.items():
        positional = ["run-a", "beta"] if name in ("compare", "compare-test") else []
        done = cli(whole, "query", name, *positional, "--run", "run-a", "--run", "beta", "--task", "task*",
                   "--label", "kind=x", "--format", "json")
        assert done.returncode == 0, (name, done.stderr)
        want = run_canned(whole, query, dict(zip(("a", "b"), positional)),
                          filters=Filters.of(run=["run-a", "beta"], task="task*", label="kind=x"))
        assert json.loads(done.stdout) == [
            {c: (v.isoformat() if hasattr(v, "isoformat") else v) for c, v in zip(want.columns, row)}
            for row in want.rows], name
        assert want.rows, name  # run-b's


def test_a_window_past_the_calendars_ends_is_no_error(whole, tmp_path):
    """Typed as a user says "no bound" (--until 9999-12-31, --since 1000000d), a window past the
    calendar stops at its ends: every command that takes one answers, as without the bound."""
    bounds = (["--until", "9999-12-31"], ["--since", "1000000d"], ["--since", "9" * 25 + "h"],
              ["--since", "0001-01-01T00:00+01:00"], ["--until", "9999-12-31T23:59-01:00"])
    for i, bound in enumerate(bounds):
        for command in (["search", "a"], ["export", "hub", str(tmp_path / f"out{i}")],
                        ["report", str(tmp_path / f"r{i}.html")]):
            done = cli(whole, *command, *bound)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (command, bound, done.stderr)
        bounded = cli(whole, "query", "pass-rate", *bound, "--format", "json")
        unbounded = cli(whole, "query", "pass-rate", "--since", "2000-01-01", "--format", "json")
        assert json.loads(bounded.stdout) == json.loads(unbounded.stdout), bound


def test_cli_compare_takes_two_runs_by_position_or_option(whole):
    by_position = cli(whole, "query", "compare", "run-a", "beta", "--format", "json")
    by_option = cli(whole, "query", "compare", "--a", "run-a", "--b", "run-b", "--format", "json")
    assert by_position.returncode == 0 and by_option.returncode == 0, by_position.stderr + by_option.stderr
    assert json.loads(by_position.stdout) == json.loads(by_option.stdout) != []
    ambiguous = cli(whole, "query", "compare", "run-", "run-a")
    assert ambiguous.returncode == 1
    assert ambiguous.stderr.strip().splitlines() == [
        "Error: run 'run-' is ambiguous: it could be run-a, run-b (beta), run-c"]
    missing = cli(whole, "query", "compare", "run-a")
    assert missing.returncode == 2 and "missing B" in missing.stderr
    twice = cli(whole, "query", "compare", "run-a", "run-b", "--a", "run-c")
    assert twice.returncode == 2 and "given twice" in twice.stderr
    bad_label = cli(whole, "query", "runs", "--label", "kind")
    assert bad_label.returncode == 2 and "a label is key=value" in bad_label.stderr
    by_label = cli(whole, "query", "pass-rate", "--by", "label:kind", "--format", "csv")
    assert by_label.returncode == 0 and by_label.stdout.splitlines()[0].startswith("kind,trials")


# --- --model and the forms sources write -----------------------------------------------------

PINCHBENCH = "tests/fixtures/harbor/jobs/pinchbench-147-kimi2.6"


def _trials(url: str, *args: str) -> int:
    done = cli(url, "query", "runs", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return sum(row["trials"] for row in json.loads(done.stdout))


def test_model_matches_a_real_jobs_single_and_multi_step_trials(db_url):
    # The job's single-step trial stores `anthropic/kimi-k2.6` (its config's model_name); its
    # multi-step trial `kimi-k2.6` (Harbor records the model without its provider there).
    done = cli(db_url, "ingest", PINCHBENCH)
    assert done.returncode == 0, done.stderr
    assert _trials(db_url) == 2
    for model in ("anthropic/kimi-k2.6", "kimi-k2.6", "*/kimi-k2.6", "ANTHROPIC/Kimi*", "kimi-*"):
        assert _trials(db_url, "--model", model) == 2, model
    # Another provider's name of the model: only the trial stored without one.
    assert _trials(db_url, "--model", "openai/kimi-k2.6") == 1
    assert _trials(db_url, "--model", "kimi-k2") == 0  # a value is matched whole, never as a prefix
    rates = cli(db_url, "query", "pass-rate", "--model", "anthropic/kimi-k2.6", "--threshold", "0.4",
                "--format", "json")
    assert [(r["trials"], r["successes"]) for r in json.loads(rates.stdout)] == [(2, 1)]


def test_model_matches_every_form_of_hub_rows(db_url, tmp_path):
    from helpers import hub_row, write_shard

    forms = ["anthropic/kimi-k2.6", "kimi-k2.6", "openrouter/anthropic/kimi-k2.6", "openai/kimi-k2.6",
             "anthropic/kimi-k2.6-mini"]
    write_shard(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet",
                [hub_row(f"t{i}__x", 0, [("user", "hi"), ("assistant", "ok")], model=model)
                 for i, model in enumerate(forms)])
    done = cli(db_url, "ingest", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert _trials(db_url, "--model", "anthropic/kimi-k2.6") == 3  # itself, bare, under openrouter
    assert _trials(db_url, "--model", "kimi-k2.6") == 4
    assert _trials(db_url, "--model", "openai/kimi-k2.6") == 2  # itself and the bare one
    assert _trials(db_url, "--model", "openrouter/anthropic/kimi-k2.6") == 3  # itself, anthropic's, bare
    assert _trials(db_url, "--model", "anthropic/*") == 4  # not openai's


# --- a filter that matches nothing -------------------------------------------------------------

CALENDAR_NOTE = "note: --task 'task-calendar' matches no task (did you mean 'pinchbench/task-calendar'?)"


def test_a_filter_that_matches_nothing_says_so_on_stderr(db_url, tmp_path):
    import warehouse

    assert cli(db_url, "ingest", PINCHBENCH).returncode == 0
    run_key = json.loads(cli(db_url, "query", "runs", "--format", "json").stdout)[0]["run_key"]
    for name in QUERIES:
        positional = [run_key, run_key] if name in ("compare", "compare-test") else []
        done = cli(db_url, "query", name, *positional, "--task", "task-calendar", "--format", "json")
        # An empty answer is an answer: exit 0, and the note on stderr, one line.
        assert done.returncode == 0, (name, done.stderr)
        said = [f"note: {ERRORS_NOTE}"] if "errors" in {p.name for p in QUERIES[name].params} else []
        assert done.stderr.splitlines() == [CALENDAR_NOTE, *said], name
        found = cli(db_url, "query", name, *positional, "--task", "pinchbench/task-calendar", "--format", "json")
        # No note of the filters; the queries that count attempts say how they count errors.
        assert found.returncode == 0 and found.stderr.splitlines() == said, (name, found.stderr)
    done = cli(db_url, "query", "runs", "--task", "*calendar", "--task", "nope*", "--model", "openai/gpt-4o",
               "--agent", "openclaw", "--label", "step=3", "--format", "csv")
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "note: --task 'nope*' matches no task; --model 'openai/gpt-4o' matches no trial's model; "
        "--label step=3 is on no run"]
    # search, export and report say it alike.
    searched = cli(db_url, "search", "calendar", "--task", "task-calendar")
    assert searched.returncode == 0 and searched.stderr.splitlines() == [CALENDAR_NOTE]
    exported = cli(db_url, "export", "hub", str(tmp_path / "out"), "--task", "task-calendar")
    assert exported.returncode == 0
    assert exported.stderr.splitlines()[0] == CALENDAR_NOTE and "wrote" in exported.stderr.splitlines()[-1]
    reported = cli(db_url, "report", str(tmp_path / "r.html"), "--task", "task-calendar")
    assert reported.returncode == 0
    assert reported.stderr.splitlines()[0] == CALENDAR_NOTE, reported.stderr
    with warehouse.open(db_url) as wh:
        result = wh.query("pass-rate", task="task-calendar")
        assert (result.rows, result.note) == ([], CALENDAR_NOTE.removeprefix("note: ") + "\n" + ERRORS_NOTE)
        assert wh.query("pass-rate", task="pinchbench/*").note == ERRORS_NOTE
