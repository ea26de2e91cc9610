"""Runs as people name them (a key, a unique prefix, a name), labels, and the one filter
predicate every query shares: on both backends, over a warehouse loaded by the real writer."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

import query_fixture
from ingest.read.sources import card_labels
from ingest.read.traces import job_labels
from query_fixture import cli
from tools.generate import generate_dataset
from trace_trees import make_trace_tree
from warehouse.db import schema
from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.runs import (check_name, label_sort_key, labels_of, parse_label, parse_labels, remove_labels,
                            resolve_run, resolve_runs, runs_with_labels, set_labels)


@pytest.fixture
def wh(engine):
    query_fixture.build(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'alpha' WHERE run_key = 'run-a'"))
        conn.execute(text("UPDATE runs SET name = 'beta' WHERE run_key = 'run-b'"))
        conn.execute(text("UPDATE runs SET name = 'beta' WHERE run_key = 'run-c'"))  # a shared name
    return engine


def test_a_run_is_found_by_key_name_or_unique_prefix(wh):
    with wh.connect() as conn:
        assert resolve_run(conn, "run-a").run_key == "run-a"
        assert resolve_run(conn, "alpha").run_key == "run-a"
        assert resolve_run(conn, "run-b").name == "beta"
        with pytest.raises(WarehouseError, match=r"^run 'run-' is ambiguous: it could be run-a \(alpha\), run-b \(beta\), run-c \(beta\)$"):
            resolve_run(conn, "run-")
        with pytest.raises(WarehouseError, match=r"^run 'beta' is ambiguous"):
            resolve_run(conn, "beta")
        with pytest.raises(WarehouseError, match=r"^no run 'nope' \(`warehouse runs` lists them\)$"):
            resolve_run(conn, "nope")
        with pytest.raises(WarehouseError, match="no run 'RUN-A'"):  # case-sensitive
            resolve_run(conn, "RUN-A")
        with pytest.raises(WarehouseError, match="no run 'r%'"):  # no wildcards
            resolve_run(conn, "r%")
        assert [r.run_key for r in resolve_runs(conn, ["run-b", "alpha", "run-a"])] == ["run-b", "run-a"]


def test_labels_are_set_replaced_listed_and_matched(wh):
    with wh.begin() as conn:
        a, b = resolve_run(conn, "run-a").id, resolve_run(conn, "run-b").id
        set_labels(conn, a, {"step": "10", "lr": "3e-5"})
        set_labels(conn, b, {"step": "2"})
        set_labels(conn, b, {"step": "20", "note": "x=y"})
    with wh.connect() as conn:
        assert labels_of(conn) == {a: {"lr": "3e-5", "step": "10"}, b: {"note": "x=y", "step": "20"}}
        assert labels_of(conn, [b]) == {b: {"note": "x=y", "step": "20"}}
        assert labels_of(conn, []) == {}
        assert runs_with_labels(conn, [("step", "20")]) == {b}
        assert runs_with_labels(conn, [("step", "10"), ("lr", "3e-5")]) == {a}
        assert runs_with_labels(conn, [("step", "10"), ("note", "x=y")]) == set()
    with wh.begin() as conn:
        remove_labels(conn, b, ["note"])
    with wh.connect() as conn:
        assert labels_of(conn, [b]) == {b: {"step": "20"}}


def test_label_text_and_order():
    assert parse_label("note=a=b") == ("note", "a=b")
    assert parse_label("empty=") == ("empty", "")
    assert parse_labels(["step=1", "step=2"]) == {"step": "2"}
    for bad in ("step", "=1", ""):
        with pytest.raises(WarehouseError, match="a label is key=value"):
            parse_label(bad)
    values = ["10", "b", None, "2", "a", "1e1", "nan"]
    assert sorted(values, key=label_sort_key) == ["2", "10", "1e1", "a", "b", "nan", None]


def _trials(conn, filters: Filters) -> list[tuple[str, str]]:
    predicate, binds = filters.sql(conn, run_id="r.id", task="ta.name", model="t.model", agent="t.agent",
                                   started_at="t.started_at")
    found = [tuple(row) for row in conn.execute(text(
        "SELECT r.run_key, t.trial_name FROM trials t JOIN runs r ON r.id = t.run_id "
        f"LEFT JOIN tasks ta ON ta.id = t.task_id WHERE {predicate} ORDER BY 1, 2"), binds)]
    # By the task's id (a table without its name): the same trials.
    predicate, binds = filters.sql(conn, run_id="r.id", task_id="t.task_id", model="t.model", agent="t.agent",
                                   started_at="t.started_at")
    assert found == [tuple(row) for row in conn.execute(text(
        "SELECT r.run_key, t.trial_name FROM trials t JOIN runs r ON r.id = t.run_id "
        f"WHERE {predicate} ORDER BY 1, 2"), binds)]
    return found


def test_filters_narrow_by_run_task_model_agent_and_label(wh):
    with wh.begin() as conn:
        set_labels(conn, resolve_run(conn, "run-b").id, {"step": "2"})
    with wh.connect() as conn:
        everything = _trials(conn, Filters())
        assert len(everything) == 22  # 11 + 9 + 2
        assert {run for run, _ in _trials(conn, Filters.of(run="alpha"))} == {"run-a"}
        assert {run for run, _ in _trials(conn, Filters.of(run=["run-a", "run-c"]))} == {"run-a", "run-c"}
        assert {run for run, _ in _trials(conn, Filters.of(label="step=2"))} == {"run-b"}
        assert _trials(conn, Filters.of(run="run-a", label="step=2")) == []
        assert _trials(conn, Filters.of(label={"step": "3"})) == []
        tasks = {name for _, name in _trials(conn, Filters.of(task="task3"))}
        assert len(tasks) == 4
        assert _trials(conn, Filters.of(task="TASK*")) == _trials(conn, Filters.of(task=["task?"]))
        assert _trials(conn, Filters.of(task="TASK3")) == []  # no wildcard: exact
        assert _trials(conn, Filters.of(task="task_")) == []  # `_` is a character, not a wildcard
        assert {run for run, _ in _trials(conn, Filters.of(agent="openhands"))} == {"run-c"}
        m2 = _trials(conn, Filters.of(model="m2"))
        assert m2 and {run for run, _ in m2} == {"run-b"}
        with pytest.raises(WarehouseError, match="no run 'zzz'"):
            Filters.of(run="zzz").sql(conn, run_id="r.id")
        with pytest.raises(WarehouseError, match="cannot be narrowed by --model"):
            Filters.of(model="m1").sql(conn, run_id="r.id")
    assert not Filters() and Filters.of(task="x")
    assert Filters().sql(None) == ("1=1", {})


def test_a_window_on_the_start_holds_the_trials_started_within_it(wh):
    """run-a's task1 trials started at 10:00 to 14:00 UTC on 2024-01-01 (query_fixture); every
    other trial's start is unknown, which no window holds. --since is inclusive, --until not."""
    hours = lambda filters: sorted(name for _, name in _trials(wh.connect(), filters))  # noqa: E731
    a = [f"task1__a{i}" for i in range(5)]
    assert hours(Filters.of(since="2024-01-01T11:00")) == a[1:]
    assert hours(Filters.of(since="2024-01-01T11:00:00.000001Z")) == a[2:]
    assert hours(Filters.of(until="2024-01-01T11:00")) == a[:1]
    assert hours(Filters.of(since="2024-01-01T13:00+02:00", until="2024-01-01T12:30")) == a[1:3]  # 11:00 UTC on
    assert hours(Filters.of(until="2024-01-01")) == a  # a date: the whole day
    assert hours(Filters.of(until="2023-12-31")) == hours(Filters.of(since="2024-01-02")) == []
    assert hours(Filters.of(since="100000d")) == a  # an age: back from now
    for bad, message in (("yesterday", "--since takes a date"), ("2024-13-01", "--since takes a date")):
        with pytest.raises(WarehouseError, match=message):
            Filters.of(since=bad)
    with pytest.raises(WarehouseError, match="--since 2024-01-02 is not before --until 2024-01-01"):
        Filters.of(since="2024-01-02", until="2024-01-01")
    with pytest.raises(WarehouseError, match="cannot be narrowed by --since or --until"):
        Filters.of(since="2024-01-01").sql(wh.connect(), run_id="r.id")


# --- names and labels through ingest and the command line -----------------------------------------

def _runs(db_url: str, *args: str) -> list[dict]:
    done = cli(db_url, "runs", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _json(db_url: str, *args: str) -> list[dict]:
    done = cli(db_url, *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _ingest(db_url: str, *args: str) -> None:
    done = cli(db_url, "ingest", *args)
    assert done.returncode == 0, done.stderr


def test_a_sweep_labelled_by_step_answers_pass_rate_in_step_order(db_url, tmp_path):
    # The acceptance: five checkpoints of one sweep, labelled step=…, read in step order.
    generate_dataset(tmp_path / "sweep", "tiny", runs=5, seed=3)
    _ingest(db_url, str(tmp_path / "sweep"))
    runs = _runs(db_url)
    assert len(runs) == 5
    assert [r["name"] for r in runs] == [f"sweep-{r['run_key'][:8]}" for r in runs]  # one dataset, 5 runs
    steps = ["300", "20", "1000", "4", "50"]  # text order would put 1000 before 20 and 300 before 4
    for run, step in zip(runs, steps):
        done = cli(db_url, "runs", "label", run["name"], f"step={step}", "lr=3e-5")
        assert done.returncode == 0, done.stderr
    by_step = _json(db_url, "query", "pass-rate", "--by", "label:step")
    assert [row["step"] for row in by_step] == ["4", "20", "50", "300", "1000"]
    for row in by_step:
        [run] = [r for r, step in zip(runs, steps) if step == row["step"]]
        [alone] = _json(db_url, "query", "pass-rate", "--run", run["run_key"][:8])
        assert {k: v for k, v in row.items() if k != "step"} == {k: v for k, v in alone.items() if k != "run_key"}
    assert [r["run_key"] for r in _runs(db_url, "--sort", "label:step")] == [
        runs[steps.index(s)]["run_key"] for s in ("4", "20", "50", "300", "1000")]
    assert {r["labels"] for r in runs} == {""} and {r["labels"] for r in _runs(db_url)} == {
        f"lr=3e-5, step={s}" for s in steps}
    # --label narrows every query to the runs carrying it.
    [one] = _json(db_url, "query", "runs", "--label", "step=50")
    assert one["run_key"] == runs[steps.index("50")]["run_key"]


def test_ingest_labels_every_run_of_its_sources_even_when_already_loaded(db_url, tmp_path):
    for name, seed in (("ckpt-a", 1), ("ckpt-b", 2)):
        generate_dataset(tmp_path / name, "tiny", runs=1, seed=seed)
    _ingest(db_url, str(tmp_path / "ckpt-a"), "--label", "step=10", "--label", "lr=1e-4")
    _ingest(db_url, str(tmp_path / "ckpt-b"), "--label", "step=9")
    assert [(r["name"], r["labels"]) for r in _runs(db_url, "--sort", "label:step")] == [
        ("ckpt-b", "step=9"), ("ckpt-a", "lr=1e-4, step=10")]
    assert [row["step"] for row in _json(db_url, "query", "pass-rate", "--by", "label:step")] == ["9", "10"]
    # Every unit already loaded: the labels still reach the runs (replacing step, keeping lr).
    again = cli(db_url, "ingest", str(tmp_path / "ckpt-a"), "--label", "step=11")
    assert again.returncode == 0 and "1 skipped" in again.stderr
    assert {r["name"]: r["labels"] for r in _runs(db_url)}["ckpt-a"] == "lr=1e-4, step=11"
    bad = cli(db_url, "ingest", str(tmp_path / "ckpt-a"), "--label", "step")
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == ["Error: a label is key=value, got 'step'"]


def test_the_readme_runs_are_named_and_compared_by_name_or_prefix(db_url, tmp_path):
    _ingest(db_url, "examples/sample")
    runs = _runs(db_url)
    assert [r["name"] for r in runs] == [f"sample-{r['run_key'][:8]}" for r in runs]
    first, second = runs
    by_key = _json(db_url, "query", "compare", "--a", first["run_key"], "--b", second["run_key"])
    assert by_key
    assert _json(db_url, "query", "compare", first["name"], second["run_key"][:8]) == by_key
    assert _json(db_url, "query", "compare", first["run_key"][:8], second["name"]) == by_key
    # search and show take the same names.
    hits = _json(db_url, "search", "the", "--run", first["name"], "--limit", "3")
    assert hits and {h["run_key"] for h in hits} == {first["run_key"]}
    trial = hits[0]["trial_name"]
    shown = cli(db_url, "show", f"{first['run_key'][:8]}/{trial}", "--format", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_key"] == first["run_key"]
    exported = cli(db_url, "export", "hub", str(tmp_path / "out"), "--run", first["name"])
    assert exported.returncode == 0, exported.stderr
    nosuch = cli(db_url, "search", "the", "--run", "NOSUCH")
    assert nosuch.returncode == 1
    assert nosuch.stderr.strip().splitlines() == ["Error: no run 'NOSUCH' (`warehouse runs` lists them)"]


def test_ingest_run_names_runs_that_carry_a_job_uuid(db_url, tmp_path):
    generate_dataset(tmp_path / "one", "tiny", runs=1, seed=4)
    _ingest(db_url, str(tmp_path / "one"), "--run", "checkpoint-7")
    [run] = _runs(db_url)
    assert run["name"] == "checkpoint-7" and len(run["run_key"]) == 36  # the key stays the job UUID
    _ingest(db_url, str(tmp_path / "one"))  # a later ingest without --run keeps the name
    assert _runs(db_url)[0]["name"] == "checkpoint-7"
    renamed = cli(db_url, "runs", "rename", "checkpoint-7", "ckpt-7")
    assert renamed.returncode == 0, renamed.stderr
    _ingest(db_url, str(tmp_path / "one"))
    assert _runs(db_url)[0]["name"] == "ckpt-7"
    _ingest(db_url, str(tmp_path / "one"), "--run", "final")  # an explicit --run renames
    assert _runs(db_url)[0]["name"] == "final"
    # A dataset of several jobs: each named for --run and its key.
    _ingest(db_url, "examples/sample", "--run", "base")
    assert sorted(r["name"] for r in _runs(db_url)) == sorted(
        ["final", *(f"base-{r['run_key'][:8]}" for r in _runs(db_url) if r["name"] != "final")])
    # A Harbor job directory: its run (keyed by the job UUID) is the job folder's, or --run's,
    # and carries the labels its config gives that no trial column holds.
    jobs = make_trace_tree(tmp_path / "traces", seed=1, job_trials=2, rl_trials=0, with_fixtures=False)
    config = json.loads((jobs / "job-a" / "config.json").read_text())
    config["datasets"] = [{"name": "terminal-bench", "version": "2.0"}]
    (jobs / "job-a" / "config.json").write_text(json.dumps(config))
    _ingest(db_url, str(jobs))
    [job] = [r for r in _runs(db_url) if r["sources"] == "traces"]
    assert (job["name"], job["labels"]) == ("job-a", "dataset=terminal-bench@2.0, n_attempts=1")
    _ingest(db_url, str(jobs), "--run", "tb-run")
    assert [r["name"] for r in _runs(db_url) if r["run_key"] == job["run_key"]] == ["tb-run"]


def test_runs_takes_every_filter_and_sorts_names_naturally(db_url, engine):
    query_fixture.build(engine)
    for key, name in (("run-a", "ckpt-1000"), ("run-b", "ckpt-200"), ("run-c", "ckpt-30")):
        assert cli(db_url, "runs", "rename", key, name).returncode == 0
    assert cli(db_url, "runs", "label", "run-b", "step=200").returncode == 0
    assert [r["name"] for r in _runs(db_url, "--sort", "name")] == ["ckpt-30", "ckpt-200", "ckpt-1000"]
    assert [r["run_key"] for r in _runs(db_url, "--label", "step=200")] == ["run-b"]
    assert [r["run_key"] for r in _runs(db_url, "--run", "ckpt-30", "--run", "run-a")] == ["run-a", "run-c"]
    # A filter on the trials counts only those it keeps, and leaves out a run with none:
    # run-a's task1 trials (rewards 1, 0, 1, 0, 0) started 10:00 to 14:00, no other's is known.
    [a] = _runs(db_url, "--since", "2024-01-01T12:00Z")
    assert (a["run_key"], a["trials"], a["pass_rate"]) == ("run-a", 3, pytest.approx(1 / 3))
    assert [(r["run_key"], r["trials"]) for r in _runs(db_url, "--model", "m2")] == [("run-b", 7)]
    assert [(r["run_key"], r["trials"]) for r in _runs(db_url, "--agent", "open*", "--task", "task1")] == [("run-c", 1)]
    done = cli(db_url, "runs", "--task", "nosuch", "--label", "step=1")
    assert done.returncode == 0 and done.stderr.startswith("note: --task 'nosuch' matches no task"), done.stderr
    assert "--label step=1 is on no run" in done.stderr
    done = cli(db_url, "runs", "--until", "someday")
    assert done.returncode == 2 and "--until takes a date" in done.stderr and "Traceback" not in done.stderr


def test_runs_rename_and_label_round_trip(db_url):
    _ingest(db_url, "examples/sample")
    first, second = _runs(db_url)
    assert cli(db_url, "runs", "rename", first["run_key"][:8], "baseline").returncode == 0
    assert cli(db_url, "runs", "label", "baseline", "step=1", "note=a=b").returncode == 0
    assert cli(db_url, "runs", "label", "baseline", "step=2", "--remove", "note").returncode == 0
    [row] = [r for r in _runs(db_url) if r["run_key"] == first["run_key"]]
    assert (row["name"], row["labels"]) == ("baseline", "step=2")
    errors = {
        ("runs", "rename", second["name"], "baseline"):
            f"Error: the name 'baseline' is taken by run {first['run_key']} (baseline)",
        ("runs", "rename", second["name"], first["run_key"]):
            f"Error: the name '{first['run_key']}' is the key of run {first['run_key']} (baseline): "
            f"`--run {first['run_key']}` would mean that run; choose another name",
        ("runs", "rename", "nope", "x"): "Error: no run 'nope' (`warehouse runs` lists them)",
        ("runs", "label", "baseline", "step"): "Error: a label is key=value, got 'step'",
        ("runs", "label", "baseline"): "Error: give labels as KEY=VALUE, or --remove KEY",
        ("runs", "label", "baseline", "a=1", "--remove", "a"): "Error: label 'a' is both set and removed",
    }
    for args, line in errors.items():
        done = cli(db_url, *args)
        assert done.returncode == 1 and done.stderr.strip().splitlines() == [line], args
    assert [(r["name"], r["labels"]) for r in _runs(db_url)] == [("baseline", "step=2"), (second["name"], "")]


def test_a_key_prefix_comes_before_a_name_and_no_name_may_shadow_one(db_url, tmp_path):
    # The README's order: a key, a unique prefix of a key, a name. A name that another run's key
    # starts with would be shadowed by that prefix (or, before, silently shadow it): refused.
    _ingest(db_url, "examples/sample")
    first, second = _runs(db_url)
    prefix = second["run_key"][:4]
    refused = cli(db_url, "runs", "rename", first["run_key"][:8], prefix)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.splitlines() == [
        f"Error: the name '{prefix}' is a prefix of the key of run {second['run_key']} ({second['name']}): "
        f"`--run {prefix}` would mean that run; choose another name"]
    assert [r["name"] for r in _runs(db_url)] == [first["name"], second["name"]]  # nothing renamed
    # A prefix of the run's own key is no other run's: allowed.
    assert cli(db_url, "runs", "rename", first["run_key"][:8], first["run_key"][:4]).returncode == 0
    # ingest --run NAME follows the same rule, before anything is written.
    generate_dataset(tmp_path / "more", "tiny", runs=1, seed=5)
    before = _json(db_url, "query", "runs")
    refused = cli(db_url, "ingest", str(tmp_path / "more"), "--run", prefix)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines() == [
        f"Error: the name '{prefix}' is a prefix of the key of run {second['run_key']} ({second['name']}): "
        f"`--run {prefix}` would mean that run; choose another name"]
    assert _json(db_url, "query", "runs") == before
    # A warehouse named so by an older version: the prefix wins over the name, as documented.
    from sqlalchemy import create_engine

    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = :n WHERE run_key = :k"), {"n": prefix, "k": first["run_key"]})
    engine.dispose()
    assert {r["run_key"] for r in _json(db_url, "query", "runs", "--run", prefix)} == {second["run_key"]}


def test_an_ingest_may_name_the_run_keyed_by_its_name(wh):
    # Rows that carry no run are keyed by `--run NAME`: ingesting more of them is no shadowing.
    with wh.connect() as conn:
        check_name(conn, "run-a")
        with pytest.raises(WarehouseError, match="^the name 'run-' is a prefix of the key of run run-a"):
            check_name(conn, "run-")
        with pytest.raises(WarehouseError, match="^the name 'run-b' is the key of run run-b"):
            check_name(conn, "run-b", resolve_run(conn, "run-a").id)


def test_a_dataset_card_declares_labels(db_url, tmp_path):
    generate_dataset(tmp_path / "carded", "tiny", runs=1, seed=6)
    readme = tmp_path / "carded" / "README.md"
    readme.write_text(readme.read_text().replace("tags:\n", "warehouse_labels:\n  step: 13\n  lr: 3e-5\n"
                                                                 "  nested: {a: 1}\ntags:\n", 1))
    _ingest(db_url, str(tmp_path / "carded"), "--label", "step=14")
    assert [r["labels"] for r in _runs(db_url)] == ["lr=3e-5, step=14"]  # --label wins over the card
    assert cli(db_url, "runs", "label", "carded", "lr=1").returncode == 0
    _ingest(db_url, str(tmp_path / "carded"))  # the card fills keys the run lacks, never replaces
    assert [r["labels"] for r in _runs(db_url)] == ["lr=1, step=14"]


def test_card_labels_read_the_front_matter_only():
    def card(text: str) -> dict:
        return {"readme": text}

    assert card_labels(None) == {} and card_labels(card("no front matter")) == {}
    assert card_labels(card("---\nlabels:\n  step: 13\n  done: true\n---\n# x")) == {"step": "13", "done": "true"}
    assert card_labels(card("---\nwarehouse_labels: {a: b}\nlabels: {c: d}\n---\n")) == {"a": "b"}
    assert card_labels(card("---\nlabels: [a, b]\n---\n")) == {}  # not a mapping
    assert card_labels(card("---\nlabels: {a: [1]\n---\n")) == {}  # does not parse
    assert card_labels(card("# title\n---\nlabels: {a: b}\n---\n")) == {}  # not at the top


def test_job_config_labels():
    assert job_labels({"job_name": "j", "n_attempts": 5, "agents": [{"name": "terminus-2"}],
                       "datasets": [{"path": "/data/tasks/my-bench"}, {"name": "tb", "ref": "v2"}, "bad"]}) == {
        "dataset": "my-bench, tb@v2", "n_attempts": "5"}
    assert job_labels({}) == {} and job_labels({"n_attempts": True}) == {}


def test_migration_0010_names_the_runs_loaded_before_it(engine, db_url, tmp_path):
    generate_dataset(tmp_path / "old", "tiny", runs=2, seed=8)
    generate_dataset(tmp_path / "solo", "tiny", runs=1, seed=9)
    _ingest(db_url, str(tmp_path / "old"), str(tmp_path / "solo"))
    named = {r["run_key"]: r["name"] for r in _runs(db_url)}
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = NULL"))
    schema.downgrade(engine, "0009")
    schema.upgrade(engine)
    assert {r["run_key"]: r["name"] for r in _runs(db_url)} == named
    assert sorted(named.values())[-1] == "solo" and sum(n.startswith("old-") for n in named.values()) == 2
