"""Datasets built by query: `export hub` narrowed by --solved, --where, --per-task and --episodes
(warehouse.selection), on both backends: the picks each option documents, a five-checkpoint
sweep cut down to its shortest solutions that ingests back as nothing new, --where checked as
`warehouse sql` checks a query (attacks refused in one line, nothing written), the dataset card,
and byte-identical exports."""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.engine import make_url

from helpers import counts
from ingest.pipeline import ingest
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from procs import run_cli
from tools.generate import generate_dataset
from warehouse.errors import WarehouseError
from warehouse.export import export_hub
from warehouse.filters import Filters
from warehouse.runs import set_labels
from warehouse.selection import Pick

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def _conversation(n_turns: int, word: str = "x") -> list[Turn]:
    return [Turn("user" if i % 2 == 0 else "assistant", f"{word}{i}") for i in range(n_turns)]


def _trial(run: str, name: str, task: str | None, reward: float | None, turns: int, *, hours: int | None = None,
           word: str = "x", episodes: list[Episode] | None = None) -> Trial:
    exc = "AgentTimeoutError" if reward is None else None
    return Trial(run_key=run, source_run_id=run, trial_name=name, task_name=task, reward=reward, exception_type=exc,
                 result=exc or str(reward), agent="terminus-2", model="openai/gpt-4o", status="complete",
                 started_at=None if hours is None else T0 + timedelta(hours=hours),
                 episodes=episodes if episodes is not None else [Episode(0, _conversation(turns, word))])


# The picks, by hand (turns = the longest main episode's; chars follow the words' lengths):
#   t1 (run-a): x1 reward 1, 6 turns (3 main episodes and a subagent one), 12:00
#               x2 reward 0.5, 2 turns, 10:00
#               x3 reward 1, 4 turns, 11:00          x5 reward 1, 4 turns of longer words, 13:00
#               x4 no reward, 2 turns of shorter words than x2's, 09:00
#     best: x3 (reward 1, fewer turns than x1, fewer chars than x5); shortest: x4; first: x4;
#     --solved: x3 for all three; --unsolved shortest: x4
#   t2: "y" in run-a and in run-b, reward 1, 2 turns, same words, no start: ties go to run-a's
#   t3 (run-b): z1 a multi-step trial: steps a (2 episodes and a subagent) and b; reward 1
#   no task: n1 (run-b) reward 1: no task to pick for
#   t4 (run-b): w1 incomplete, no episodes: never a candidate
def _build(engine) -> None:
    source = writer.ensure_source(engine, "traces", "/jobs/sweep", "sweep")
    x1 = [Episode(0, _conversation(2), "main", 0), Episode(1, _conversation(4), "main", 1),
          Episode(2, _conversation(6), "main", 2), Episode(0, _conversation(2, "s"), "summarization-1-summary", 3)]
    z1 = [Episode(0, _conversation(2), "step:a", 0), Episode(1, _conversation(4), "step:a", 1),
          Episode(0, _conversation(2, "s"), "step:a/summarization-1-summary", 2),
          Episode(0, _conversation(2, "b"), "step:b", 3)]
    trials = [
        _trial("run-a", "x1", "t1", 1.0, 6, hours=3, episodes=x1),
        _trial("run-a", "x2", "t1", 0.5, 2, hours=1, word="xx"),
        _trial("run-a", "x3", "t1", 1.0, 4, hours=2),
        _trial("run-a", "x4", "t1", None, 2, hours=0),
        _trial("run-a", "x5", "t1", 1.0, 4, hours=4, word="longer"),
        _trial("run-b", "y", "t2", 1.0, 2),
        _trial("run-a", "y", "t2", 1.0, 2),
        _trial("run-b", "z1", "t3", 1.0, 4, episodes=z1),
        _trial("run-b", "n1", None, 1.0, 2),
        Trial(run_key="run-b", trial_name="w1", task_name="t4", status="incomplete", episodes=[]),
    ]
    for trial in trials:  # a unit per trial, as trace directories load
        with writer.unit(engine, source, f"{trial.run_key}/{trial.trial_name}", f"hash-{trial.run_key}-{trial.trial_name}") as unit:
            unit.add_trials([trial])


def _picked(info) -> list[tuple[str, str, str]]:
    rows = [row for path in info.files for row in pq.read_table(path).to_pylist()]
    return [(row["trial_name"], row["run_id"], row["episode"]) for row in rows]


def _trials(info) -> set[str]:
    return {name for name, _, _ in _picked(info)}


@pytest.mark.parametrize("pick, expected", [
    (Pick(per_task="all"), {"x1", "x2", "x3", "x4", "x5", "y", "z1", "n1"}),
    (Pick(per_task="best"), {"x3", "y", "z1"}),
    (Pick(per_task="shortest"), {"x4", "y", "z1"}),
    (Pick(per_task="first"), {"x4", "y", "z1"}),
    (Pick(solved=True, per_task="best"), {"x3", "y", "z1"}),
    (Pick(solved=True, per_task="shortest"), {"x3", "y", "z1"}),
    (Pick(solved=True, per_task="first"), {"x3", "y", "z1"}),
    (Pick(solved=True), {"x1", "x3", "x5", "y", "z1", "n1"}),
    (Pick(solved=True, threshold=0.5), {"x1", "x2", "x3", "x5", "y", "z1", "n1"}),
    (Pick(solved=False), {"x2", "x4"}),
    (Pick(solved=False, per_task="shortest"), {"x4"}),
    (Pick(where="reward > 0.7 AND trial_name LIKE 'x%'"), {"x1", "x3", "x5"}),
    (Pick(where="task = ')' OR task = '(' OR run_key = 'run-b'"), {"y", "z1", "n1"}),  # parentheses in strings
    (Pick(where="task IN (SELECT name FROM tasks WHERE name <> 't1')", per_task="first"), {"y", "z1"}),
    (Pick(where="trial_name <> ':pick_threshold' AND task <> 'a:b' AND reward >= 1", solved=False), set()),  # no binds
])
def test_each_pick_keeps_what_it_documents(engine, tmp_path, pick, expected):
    _build(engine)
    info = export_hub(engine, tmp_path / "out", pick=pick)
    assert _trials(info) == expected
    if pick.per_task != "all":  # one trial per task: t2's tie goes to the smaller run key
        assert ("y", "run-b", "episode-0") not in _picked(info)


def test_episodes_last_and_all(engine, tmp_path):
    _build(engine)
    every = export_hub(engine, tmp_path / "all", pick=Pick(episodes="all", where="trial_name IN ('x1', 'z1')"))
    assert every.n_rows == 8  # x1: 3 main + 1 subagent; z1: 2 + 1 in step a, 1 in step b
    # The last episode of each main trajectory (each step's), and, as Harbor writes them whatever
    # --episodes says, every subagent row: after the main rows, as Harbor's merge puts them.
    last = export_hub(engine, tmp_path / "last", pick=Pick(episodes="last", where="trial_name IN ('x1', 'z1')"))
    rows = pq.read_table(last.files[0]).to_pylist()
    assert [(r["trial_name"], r["episode"], r["trace_source"], len(r["conversations"])) for r in rows] == [
        ("x1", "episode-2", "main", 6), ("z1", "episode-1", "main", 4), ("z1", "episode-0", "main", 2),
        ("x1", "episode-0", "summarization-1-summary", 2), ("z1", "episode-0", "summarization-1-summary", 2)]
    # --no-subagents: the main rows alone (and no trace_source column, as Harbor's).
    mains = export_hub(engine, tmp_path / "mains", pick=Pick(episodes="last", subagents=False,
                                                             where="trial_name IN ('x1', 'z1')"))
    assert _picked(mains) == [("x1", "run-a", "episode-2"), ("z1", "run-b", "episode-1"), ("z1", "run-b", "episode-0")]
    assert "trace_source" not in pq.read_schema(mains.files[0]).names
    no_subagents = export_hub(engine, tmp_path / "no-sub", pick=Pick(subagents=False, where="trial_name IN ('x1', 'z1')"))
    assert no_subagents.n_rows == 6
    # Every trial, its last episodes: one row per main trajectory with an episode, and the 2 subagents'.
    assert export_hub(engine, tmp_path / "every-last", pick=Pick(episodes="last")).n_rows == 12
    # The default (no options) is every episode, as before.
    assert export_hub(engine, tmp_path / "plain").n_rows == counts(engine)["episodes"]


def test_pick_with_a_run_and_with_a_source(engine, tmp_path):
    _build(engine)
    info = export_hub(engine, tmp_path / "a", Filters(runs=("run-b",)), pick=Pick(per_task="first"))
    assert _trials(info) == {"y", "z1"} and {run for _, run, _ in _picked(info)} == {"run-b"}
    info = export_hub(engine, tmp_path / "s", sources=["sweep"], pick=Pick(solved=False))
    assert _trials(info) == {"x2", "x4"}
    nothing = export_hub(engine, tmp_path / "none", pick=Pick(where="1=0"))
    assert nothing.n_rows == 0 and len(nothing.files) == 1  # an empty dataset still has a file


def test_filters_narrow_as_they_do_the_queries(engine, tmp_path):
    _build(engine)
    assert _trials(export_hub(engine, tmp_path / "glob", Filters(tasks=("T?",)))) == {
        "x1", "x2", "x3", "x4", "x5", "y", "z1"}  # a glob with a wildcard ignores case
    info = export_hub(engine, tmp_path / "two", Filters(tasks=("t2",), runs=("run-a",)))
    assert _picked(info) == [("y", "run-a", "episode-0")]
    # A model by its name without the provider; filters and the pick together.
    info = export_hub(engine, tmp_path / "model", Filters(models=("gpt-4o",), agents=("terminus-*",)),
                      pick=Pick(solved=True, per_task="shortest"))
    assert _trials(info) == {"x3", "y", "z1"}
    assert export_hub(engine, tmp_path / "none", Filters(agents=("openhands",))).n_rows == 0
    with pytest.raises(WarehouseError, match="no run 'run-z'"):
        export_hub(engine, tmp_path / "bad", Filters(runs=("run-z",)))
    assert not (tmp_path / "bad").exists()
    # A window on the start: x4, x2, x3, x1, x5 started T0 + 0, 1, 2, 3, 4 hours; the others unknown.
    window = Filters.of(since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=3))
    info = export_hub(engine, tmp_path / "window", window)
    assert _trials(info) == {"x2", "x3"}
    card = (tmp_path / "window" / "README.md").read_text(encoding="utf-8")
    assert f"trials started: since {(T0 + timedelta(hours=1)).isoformat().replace('+00:00', 'Z')}" in card


def test_a_bad_pick_is_refused_before_anything_is_written(engine, tmp_path):
    _build(engine)
    with pytest.raises(WarehouseError, match="--per-task is one of"):
        export_hub(engine, tmp_path / "out", pick=Pick(per_task="longest"))
    with pytest.raises(WarehouseError, match="--where is empty"):
        export_hub(engine, tmp_path / "out", pick=Pick(where="  "))
    with pytest.raises(WarehouseError, match="^--where: database error"):
        export_hub(engine, tmp_path / "out", pick=Pick(where="no_such_column = 1"))
    assert not (tmp_path / "out").exists()


# --- the sweep ---------------------------------------------------------------------------------


def _expected_shortest_solved(dataset: Path) -> dict[str, tuple]:
    """Per task, the solved trial (result a reward >= 1) with the fewest turns, then characters,
    then the smallest trial name and run key: computed from the generated rows themselves."""
    best: dict[str, tuple] = {}
    for path in sorted((dataset / "data").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            try:
                solved = float(row["result"]) >= 1.0
            except (TypeError, ValueError):
                solved = False
            if solved:
                conv = row["conversations"]
                key = (len(conv), sum(len(m["content"]) for m in conv), row["trial_name"], row["run_id"])
                best[row["task"]] = min(best.get(row["task"], key), key)
    return best


def test_a_sweep_cut_to_its_shortest_solutions_ingests_back_as_nothing_new(engine, db_url, tmp_path):
    generated = generate_dataset(tmp_path / "sweep", "tiny", runs=5, seed=19)
    assert ingest(engine, [str(tmp_path / "sweep")]).errors == []
    expected = _expected_shortest_solved(tmp_path / "sweep")
    assert 0 < len(expected) < generated.n_tasks * 5

    out = tmp_path / "sft"
    made = run_cli(db_url, "export", "hub", str(out), "--solved", "--per-task", "shortest")
    assert made.returncode == 0, made.stderr
    rows = [row for path in sorted((out / "data").glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    assert len(rows) == len(expected)  # one row per solved task
    assert {row["task"]: (row["trial_name"], row["run_id"]) for row in rows} == {
        task: key[2:] for task, key in expected.items()}

    again = run_cli(db_url, "ingest", str(out))
    assert again.returncode == 0, again.stderr
    assert f"episodes: 0 new, {len(rows)} duplicate; conflicts: 0" in again.stderr

    card = (out / "README.md").read_text()
    for run in {row["run_id"] for row in rows}:
        assert f"| {run} |" in card
    front = yaml.safe_load(card.split("---\n")[1])
    assert [f["name"] for f in front["dataset_info"]["features"]] == pq.read_schema(
        next((out / "data").glob("*.parquet"))).names
    assert front["dataset_info"]["splits"] == [{"name": "train", "num_examples": len(rows)}]
    # The card is for publishing: the password hidden, and no absolute path of this machine
    # (the SQLite file, OUT and the source are named by their names).
    url = make_url(db_url)
    shown = url.render_as_string(hide_password=True) if url.drivername.startswith("postgresql") else \
        f"sqlite:///{Path(url.database).name}"
    assert f"- command: `{shlex.join(['warehouse', '--db', shown, 'export', 'hub', out.name, '--solved', '--per-task', 'shortest'])}`" in card
    assert not url.password or f":{url.password}@" not in card  # the password never reaches the card
    assert "at schema revision " in card and "| sweep | parquet | sweep (sha256:" in card
    assert str(tmp_path) not in card


def test_a_checkpoint_of_a_labelled_sweep(engine, db_url, tmp_path):
    """The five runs labelled step=100…500 (as `warehouse runs label` would): --label picks one
    checkpoint, and the card names it with its labels."""
    generated = generate_dataset(tmp_path / "sweep", "tiny", runs=5, seed=19)
    assert ingest(engine, [str(tmp_path / "sweep")]).errors == []
    with engine.begin() as conn:
        for step, key in enumerate(generated.runs, start=1):
            run_id = conn.execute(text("SELECT id FROM runs WHERE run_key = :k"), {"k": key}).scalar_one()
            set_labels(conn, run_id, {"step": str(step * 100)})
    out = tmp_path / "step-300"
    made = run_cli(db_url, "export", "hub", str(out), "--label", "step=300", "--solved", "--per-task", "shortest")
    assert made.returncode == 0, made.stderr
    rows = pq.read_table(out / "data" / "train-00000-of-00001.parquet").to_pylist()
    assert rows and {row["run_id"] for row in rows} == {generated.runs[2]}
    assert len({row["task"] for row in rows}) == len(rows)
    card = (out / "README.md").read_text()
    with engine.connect() as conn:  # a Hub run is named after its dataset (and key, where it has several)
        name = conn.execute(text("SELECT name FROM runs WHERE run_key = :k"), {"k": generated.runs[2]}).scalar_one()
    assert name.startswith("sweep")
    assert f"| {generated.runs[2]} | {name} | step=300 | {len(rows)} |" in card and "- labels: `step=300`" in card
    assert all(key not in card for key in generated.runs if key != generated.runs[2])


def test_two_exports_are_the_same_bytes(engine, db_url, tmp_path):
    _build(engine)
    out = tmp_path / "out"
    # --force as ever (here both times, so that the commands the cards name are the same).
    args = ("export", "hub", str(out), "--where", "reward > 0", "--per-task", "best", "--episodes", "last", "--force")
    first = run_cli(db_url, *args)
    assert first.returncode == 0, first.stderr
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (out / "notes.txt").write_text("mine")
    second = run_cli(db_url, *args)  # replaces README.md and data/, keeps the rest
    assert second.returncode == 0, second.stderr
    assert f"replaced in {out}: README.md, data/ (1 file)" in second.stderr
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "notes.txt"}
    assert after == before
    assert (out / "notes.txt").read_text() == "mine"
    rows = pq.read_table(out / "data" / "train-00000-of-00001.parquet").to_pylist()
    # In load order (each trial here is its own unit, loaded in _build's order), subagent rows last.
    assert [(r["trial_name"], r["run_id"], r["trace_source"]) for r in rows] == [
        ("x3", "run-a", "main"), ("y", "run-a", "main"), ("z1", "run-b", "main"), ("z1", "run-b", "main"),
        ("z1", "run-b", "summarization-1-summary")]


# --- --where is read-only and one expression ---------------------------------------------------

BOTH = ("sqlite", "postgresql")
ATTACKS = [
    ("1=1) OR (1=1", BOTH),  # closes the parenthesis to escape the other conditions
    ("1=1) --", BOTH),
    ("reward > 0 --", BOTH),  # comments out what follows
    ("1=1; DELETE FROM runs", BOTH),
    ("1=1); DELETE FROM runs; SELECT (1", BOTH),
    ("1=1) UNION SELECT id FROM episodes --", BOTH),
    ("1=1 UNION SELECT 1", BOTH),
    ("reward > 0 LIMIT 1", BOTH),
    ("1=1 ORDER BY 1", BOTH),
    ("(SELECT count(*) FROM (DELETE FROM runs RETURNING 1) x) > 0", BOTH),
    ("EXISTS (WITH d AS (DELETE FROM runs RETURNING 1) SELECT 1 FROM d)", BOTH),
    ("1=1)) s JOIN trials tr ON 1=1 WHERE ((1=1", BOTH),
    ("pg_read_file('/etc/passwd') IS NOT NULL", ("postgresql",)),
    ("set_config('role', session_user, true) IS NOT NULL", ("postgresql",)),
    ("pg_advisory_lock(1) IS NOT NULL", ("postgresql",)),
    ("nextval('trials_id_seq') > 0", ("postgresql",)),
    ("$$)$$ = ')' OR 1=1) OR (1=1", ("postgresql",)),
    ("load_extension('/tmp/evil') IS NULL", ("sqlite",)),
    ("(SELECT 1 FROM pragma_query_only) = 1) OR (1", ("sqlite",)),
]


@pytest.mark.parametrize(("backend", "where"), [(b, w) for w, backends in ATTACKS for b in backends],
                         indirect=["backend"])
def test_where_attacks_are_refused_in_one_line(backend, engine, db_url, tmp_path, where):
    _build(engine)
    before = counts(engine)
    result = run_cli(db_url, "export", "hub", str(tmp_path / "out"), "--where", where)
    assert result.returncode == 1, result.stderr
    assert result.stdout == "" and result.stderr.startswith("Error: --where")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
    assert counts(engine) == before


def test_where_that_fails_as_it_runs_leaves_no_out(backend, engine, db_url, tmp_path):
    """A predicate the plan accepts but the rows refuse (a bad cast, malformed JSON): one line,
    and the OUT the export had made is gone again."""
    _build(engine)
    where = "json_extract(task, '$') IS NULL" if backend == "sqlite" else "CAST(task AS integer) > 0"
    result = run_cli(db_url, "export", "hub", str(tmp_path / "out"), "--where", where)
    assert result.returncode == 1 and result.stderr.startswith("Error: --where: database error"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_choices_are_checked(db_url, tmp_path):
    result = run_cli(db_url, "export", "hub", str(tmp_path / "out"), "--per-task", "longest")
    assert result.returncode == 2 and "longest" in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_card_names_no_path_of_this_machine_unless_asked(engine, db_url, tmp_path):
    """A card is written to be published: a local source by its name and content hash (or its
    path under --card-root), the paths in the command by their names; absolute only with
    --card-paths full."""
    source = tmp_path / "mine" / "sweep"
    generate_dataset(source, "tiny", runs=1, seed=3)
    assert ingest(engine, [str(source)]).errors == []
    outs = {}
    for name, options in (("private", ()), ("rooted", ("--card-root", str(tmp_path / "mine"))),
                          ("full", ("--card-paths", "full"))):
        outs[name] = tmp_path / name
        made = run_cli(db_url, "export", "hub", str(outs[name]), "--source", str(source), *options)
        assert made.returncode == 0, made.stderr
    card = {name: (out / "README.md").read_text() for name, out in outs.items()}
    assert str(tmp_path) not in card["private"] and str(tmp_path) not in card["rooted"]
    assert "| sweep | parquet | sweep (sha256:" in card["private"] and "- sources: `sweep`" in card["private"]
    assert "| sweep | parquet | sweep | 1 |" in card["rooted"]
    assert f"| sweep | parquet | {source} | 1 |" in card["full"] and f"export hub {outs['full']} " in card["full"]
    # The same rows, whatever the card says.
    assert all((outs["private"] / "data" / p.name).read_bytes() == p.read_bytes()
               for p in (outs["full"] / "data").iterdir())
    both = run_cli(db_url, "export", "hub", str(tmp_path / "both"), "--card-paths", "full", "--card-root", "/")
    assert both.returncode == 2 and "not both" in both.stderr and not (tmp_path / "both").exists()
