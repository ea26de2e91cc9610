"""`warehouse report OUT.html` on a five-checkpoint sweep, on SQLite and PostgreSQL: the page is
rendered by a real headless Chromium (Debian's `chromium`, driven by playwright) with the
network cut off, and must load without a request leaving the file, without a script error, and
with every chart drawn from the warehouse's numbers.

Chromium missing: skipped locally, a failure under CI or with WAREHOUSE_REQUIRE_BROWSER=1 (.ci/run
installs it). docs/report.png is this sweep's report."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

import pytest

import warehouse
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from sqlalchemy import text

from procs import CLI, run_cli
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.outcome import DEFAULT_NOTE as ERRORS_NOTE
from warehouse.report import CHARTS, run_titles
from warehouse.runs import natural_key
from warehouse.runs import set_labels


# --- the sweep -------------------------------------------------------------------------------
#
# Five checkpoints of one agent, each attempting ten tasks four times. Checkpoint r solves
# attempt a of task j when (j + a) % 10 < 1 + 2r, so its pass rate is (1 + 2r) / 10. A failed
# fourth attempt timed out; a failed third attempt of tasks 0 and 5 ran out of context. Run keys
# sort the other way round from the checkpoints, and names hold digits, so both the natural order
# and the escaping of a task name that is HTML are seen.

STEPS = (200, 400, 600, 800, 1000)
TASKS = ["fix-parser", "build-cache", "serve-api", "sort-logs", "patch-kernel", "train-tokenizer",
         "decrypt-file", "install-deps", "profile-query", "<script>alert(1)</script> & co"]
ATTEMPTS = 4


def _turns(n: int, text: str) -> list[Turn]:
    return [Turn("user" if i % 2 == 0 else "assistant", f"{text} {i}") for i in range(n)]


def sweep_trials() -> dict[str, tuple[str, list[Trial]]]:
    """run_key -> (name, trials)."""
    runs = {}
    for r, step in enumerate(STEPS):
        key = f"job-{'edcba'[r]}-{step:04d}"
        trials = []
        for j, task in enumerate(TASKS):
            for a in range(ATTEMPTS):
                solved = (j + a) % 10 < 1 + 2 * r
                exception = None
                if not solved and a == 3:
                    exception = "AgentTimeoutError"
                elif not solved and a == 2 and j % 5 == 0:
                    exception = "ContextLengthExceededError"
                reward = 1.0 if solved else (None if exception else 0.0)
                n_turns = 2 + 2 * ((j + r + a) % 4)
                trials.append(Trial(
                    run_key=key, trial_name=f"t{j}__{a}", task_name=task, reward=reward, agent="terminus-2",
                    model="hosted_vllm/ckpt", result=exception or str(reward), exception_type=exception,
                    episodes=[Episode(episode_index=0, turns=_turns(n_turns, f"step {step} task {j}"))]))
        runs[key] = (f"ckpt-{step}", trials)
    return runs


def clustered(runs: list[int]) -> tuple[float, float]:
    """pass-rate's interval for the sweep's runs (their indices) pooled, by the reference
    implementation: a task's attempts in them are one cluster."""
    from stats_reference import rate_interval

    sweep, cells = list(sweep_trials().values()), {}
    for r in runs:
        for trial in sweep[r][1]:
            successes, attempts = cells.get(trial.task_name, (0, 0))
            cells[trial.task_name] = (successes + (trial.reward == 1.0), attempts + 1)
    return rate_interval(list(cells.values()))


def build_sweep(engine) -> None:
    """The sweep, each run labelled with its step (and the last two lr=3e-5)."""
    source = writer.ensure_source(engine, "parquet", "/fixture/sweep", "sweep")
    for key, (name, trials) in sweep_trials().items():
        with writer.unit(engine, source, key, f"hash-{key}") as unit:
            unit.add_trials(trials, run_names={key: name})
    with engine.begin() as conn:
        for (run_id, name) in conn.execute(text("SELECT id, name FROM runs")).all():
            step = name.removeprefix("ckpt-")
            set_labels(conn, run_id, {"step": step, **({"lr": "3e-5"} if int(step) >= 800 else {})})


@pytest.fixture
def sweep(db_url, engine) -> str:
    build_sweep(engine)
    return db_url


# --- the browser (the session's Chromium is conftest's `browser`) -----------------------------

class Opened:
    """A page opened from a file with the network cut off, and what it tried and said."""

    def __init__(self, browser, path: Path):
        self.requests: list[str] = []  # every URL the page asked for
        self.blocked: list[str] = []  # those that were not the file itself
        self.errors: list[str] = []  # console errors and uncaught exceptions
        self.dialogs: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.goto(path.resolve().as_uri(), wait_until="load")

    def _route(self, route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def charts(self) -> dict[str, dict]:
        """Per chart id: whether plotly drew it (an SVG inside a js-plotly-plot div) and its
        traces as plotly holds them."""
        self.page.wait_for_function(
            "ids => ids.every(id => { const d = document.getElementById(id);"
            " return !d || d.querySelector('.main-svg') !== null; })", arg=list(CHARTS), timeout=30_000)
        return self.page.evaluate("""ids => Object.fromEntries(ids.map(id => {
            const d = document.getElementById(id);
            if (!d) return [id, null];
            return [id, {plotted: d.classList.contains('js-plotly-plot') && d.querySelector('.main-svg') !== null,
                         drawn: d.querySelectorAll('.point, .hm image').length,
                         data: (d.data || []).map(t => ({name: t.name, type: t.type, mode: t.mode, x: t.x, y: t.y, z: t.z,
                                                       error_y: t.error_y || null, marker: t.marker || null}))}];
        }))""", list(CHARTS))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def opened(browser):
    pages = []

    def open_(path: Path) -> Opened:
        pages.append(Opened(browser, path))
        return pages[-1]

    yield open_
    for page in pages:
        page.close()


def report(url: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(url, "report", str(out), *args)


# --- the page in the browser -----------------------------------------------------------------

def test_report_of_a_sweep_draws_every_chart_offline(sweep, opened, tmp_path):
    out = tmp_path / "sweep.html"
    done = report(sweep, out)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"note: {ERRORS_NOTE}"  # what its pass rates count
    assert done.stderr.splitlines()[-1].startswith(f"wrote {out}: 5 runs, 10 tasks, 4 charts, ")
    page = out.read_text(encoding="utf-8")
    assert page.count("Plotly.newPlot(") == len(CHARTS)

    view = opened(out)
    charts = view.charts()
    shot = tmp_path / "report.png"
    view.page.screenshot(path=str(shot), full_page=True)

    assert view.blocked == [] and all(url.startswith("file:") for url in view.requests), view.requests
    assert view.errors == [] and view.dialogs == []
    assert view.page.evaluate("document.querySelectorAll('script[src], link[href], img[src], iframe').length") == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    for chart in CHARTS:
        assert charts[chart]["plotted"] and charts[chart]["drawn"] > 0 and charts[chart]["data"], chart

    names = [f"ckpt-{step}" for step in STEPS]  # natural order, not the run keys' order
    [curve] = charts["pass-rate"]["data"]
    assert curve["x"] == names
    assert curve["mode"] == "markers"  # runs are points: a line would join unrelated runs
    assert curve["y"] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    intervals = [clustered([r]) for r in range(5)]  # (1 + 2r) of 10 tasks' 4 attempts each
    assert curve["error_y"]["arrayminus"] == pytest.approx([p - low for p, (low, _) in zip(curve["y"], intervals)])
    assert curve["error_y"]["array"] == pytest.approx([high - p for p, (_, high) in zip(curve["y"], intervals)])
    # The best and those tied with it, as leaderboard answers, filled; the others open.
    board = run_canned(sweep, QUERIES["leaderboard"], {})
    named = {key: name for key, (name, _) in sweep_trials().items()}
    tied = {named[row[1]]: row[board.columns.index("tied_with_best")] for row in board.rows}
    assert curve["marker"]["symbol"] == ["circle" if tied[name] else "circle-open" for name in names]
    assert curve["marker"]["symbol"][-1] == "circle" and "circle-open" in curve["marker"]["symbol"]

    [heat] = charts["solve-matrix"]["data"]
    assert heat["x"] == names
    solved = {task: 0 for task in TASKS}
    for _, trials in sweep_trials().values():
        for trial in trials:
            solved[trial.task_name] += trial.reward == 1.0
    shown = [html.unescape(label) for label in heat["y"]]  # plotly reads its labels as HTML
    assert sorted(shown) == sorted(TASKS)
    assert [solved[task] for task in shown] == sorted(solved.values())  # the hardest first
    # The task named like a script is drawn as its text, not run.
    assert "<script>alert(1)</script> & co" in view.page.inner_text("#solve-matrix")

    failures = {trace["name"]: trace["y"] for trace in charts["failures"]["data"]}
    # Run r times out on the failed fourth attempts: tasks j with (j + 3) % 10 >= 1 + 2r.
    assert failures["AgentTimeoutError"] == [sum((j + 3) % 10 >= 1 + 2 * r for j in range(10)) for r in range(5)]
    assert set(failures) == {"AgentTimeoutError", "ContextLengthExceededError"}

    lengths = {(trace["name"], i): trace["y"] for i, trace in enumerate(charts["lengths"]["data"])}
    assert {name for name, _ in lengths} == {"median", "p90", "max"}
    assert all(len(y) == 5 for y in lengths.values())
    assert [y for (name, _), y in lengths.items() if name == "max"][0] == [8] * 5  # turns: 2 + 2*3


def test_an_empty_warehouse_gets_a_page_that_says_so(db_url, opened, tmp_path):
    out = tmp_path / "empty.html"
    done = report(db_url, out)
    assert done.returncode == 0, done.stderr
    assert "0 runs, 0 tasks, 0 charts" in done.stderr
    view = opened(out)
    assert "Nothing to show: this warehouse holds no runs" in view.page.inner_text("body")
    assert view.errors == [] and view.blocked == []
    assert "Plotly" not in out.read_text(encoding="utf-8")  # no chart, so no bundle either


# --- the command -----------------------------------------------------------------------------

def test_by_label_draws_the_curve_in_the_label_order(sweep, opened, tmp_path):
    out = tmp_path / "r.html"
    done = report(sweep, out, "--by", "label:step")
    assert done.returncode == 0, done.stderr
    [curve] = opened(out).charts()["pass-rate"]["data"]
    assert curve["x"] == [str(step) for step in STEPS]  # as numbers: 200 before 1000
    assert curve["y"] == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    assert curve["mode"] == "lines+markers"  # one label's values: a sweep, read along its line
    done = report(sweep, out, "--by", "label:lr", "--force")  # two runs have it, three make "(none)"
    assert done.returncode == 0, done.stderr
    # "(none)" is no value of the label: a point of its own, not joined to the sweep's line.
    swept, none = opened(out).charts()["pass-rate"]["data"]
    assert (swept["x"], swept["mode"], none["x"], none["mode"]) == (["3e-5"], "lines+markers", ["(none)"], "markers")
    y = swept["y"] + none["y"]
    assert y == pytest.approx([(28 + 36) / 80, (4 + 12 + 20) / 120])
    lows = swept["error_y"]["arrayminus"] + none["error_y"]["arrayminus"]
    highs = swept["error_y"]["array"] + none["error_y"]["array"]
    expected = [clustered([3, 4]), clustered([0, 1, 2])]
    assert [v - low for v, low in zip(y, lows)] == pytest.approx([low for low, _ in expected])
    assert [v + high for v, high in zip(y, highs)] == pytest.approx([high for _, high in expected])


def test_a_solve_matrix_of_more_tasks_than_it_draws_names_every_row_and_says_what_it_left_out(
        sweep, opened, tmp_path, monkeypatch):
    """Every row drawn is named (past 120 rows the names used to be hidden); past MATRIX_TASKS
    the hardest are drawn and the note says how many of how many, and how to narrow."""
    from warehouse import report as report_module

    out = tmp_path / "r.html"
    monkeypatch.setattr(report_module, "MATRIX_TASKS", 4)
    with warehouse.open(sweep) as wh:
        report_module.write_report(wh.read_engine(), out)
    view = opened(out)
    [heat] = view.charts()["solve-matrix"]["data"]
    solved = {task: 0 for task in TASKS}
    for _, trials in sweep_trials().values():
        for trial in trials:
            solved[trial.task_name] += trial.reward == 1.0
    shown = [html.unescape(label) for label in heat["y"]]
    assert len(shown) == 4 and sorted(solved[task] for task in shown) == sorted(solved.values())[:4]
    ticks = view.page.evaluate("[...document.querySelectorAll('#solve-matrix .ytick text')].map(t => t.textContent)")
    assert sorted(ticks) == sorted(shown)
    assert "Showing the 4 hardest of 10 tasks: narrow with --task, --run or --label" in \
        view.page.inner_text("#section-solve-matrix")


def test_by_model_groups_the_curve(sweep, tmp_path):
    out = tmp_path / "r.html"
    done = report(sweep, out, "--by", "model")
    assert done.returncode == 0, done.stderr
    assert "pass rate by model" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("args, runs", [
    (["--run", "ckpt-1000", "--run", "job-e"], ["ckpt-200", "ckpt-1000"]),  # a name, a key prefix
    (["--label", "lr=3e-5"], ["ckpt-800", "ckpt-1000"]),
    (["--label", "lr=3e-5", "--run", "ckpt-800", "--run", "ckpt-200"], ["ckpt-800"]),  # both apply
])
def test_run_and_label_narrow_every_section(sweep, args, runs, tmp_path):
    out = tmp_path / "r.html"
    done = report(sweep, out, *args)
    assert done.returncode == 0, done.stderr
    assert f"{len(runs)} run{'s' if len(runs) > 1 else ''}, 10 tasks, 4 charts" in done.stderr
    page = out.read_text(encoding="utf-8")
    assert [f"ckpt-{step}" for step in STEPS if f"<td>ckpt-{step}</td>" in page] == runs


def test_task_model_and_by_narrow_as_the_queries_do(sweep, opened, tmp_path):
    """--task (a glob) and --model go to every canned query, and --by with --run groups only the
    runs asked for."""
    out = tmp_path / "r.html"
    done = report(sweep, out, "--task", TASKS[1])
    assert done.returncode == 0, done.stderr
    assert "5 runs, 1 task, " in done.stderr
    [curve] = opened(out).charts()["pass-rate"]["data"]
    # Task 1's attempts a = 0..3 succeed where (1 + a) % 10 < 1 + 2r: min(4, 2r) of 4.
    assert curve["y"] == pytest.approx([min(4, 2 * r) / 4 for r in range(5)])
    done = report(sweep, out, "--run", "ckpt-200", "--by", "model", "--force")
    assert done.returncode == 0, done.stderr
    [curve] = opened(out).charts()["pass-rate"]["data"]
    assert curve["y"] == pytest.approx([0.1])
    done = report(sweep, out, "--model", "no-such-model", "--force")
    assert done.returncode == 0, done.stderr
    assert "Nothing to show" in out.read_text(encoding="utf-8")


def test_labels_no_run_has_give_a_page_that_says_so(sweep, tmp_path):
    out = tmp_path / "r.html"
    done = report(sweep, out, "--label", "lr=1")
    assert done.returncode == 0, done.stderr
    assert "Nothing to show: this warehouse holds no runs that match." in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("args, error", [
    (["--run", "nosuch"], "no run 'nosuch' (`warehouse runs` lists them)"),
    (["--run", "job-"], "run 'job-' is ambiguous: it could be "),
    (["--by", "nosuch"], "--by is run, model, agent or label:KEY, not 'nosuch'"),
    (["--by", "label:nosuch"], "no run carries the label 'nosuch'"),
    (["--model", "no-such-model", "--by", "label:nosuch"], "no run carries the label 'nosuch'"),
])
def test_errors_are_one_line_and_write_nothing(sweep, args, error, tmp_path):
    out = tmp_path / "r.html"
    done = report(sweep, out, *args)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("Error: " + error)
    assert not out.exists() and not list(tmp_path.glob(".r.html.*"))


def test_a_filter_value_that_is_no_value_is_a_usage_error(sweep, tmp_path):
    out = tmp_path / "r.html"
    for args, error in ((["--label", "step"], "a label is key=value, got 'step'"),
                        (["--since", "last week"], "--since takes a date")):
        done = report(sweep, out, *args)
        assert done.returncode == 2 and f"Error: Invalid value: {error}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not out.exists()


def test_out_is_not_overwritten_without_force(sweep, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    done = report(sweep, out)
    assert (done.returncode, done.stderr.strip()) == (1, f"Error: {out}: exists (pass --force to replace it)")
    assert out.read_text() == "mine"
    done = report(sweep, out, "--force")
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    done = report(sweep, tmp_path)
    assert (done.returncode, done.stderr.strip()) == (
        1, f"Error: {tmp_path}: is a directory (give the HTML file to write)")


def test_a_failed_write_leaves_out_as_it_was(tmp_path):
    from warehouse.report import _write_atomically

    out = tmp_path / "r.html"
    out.write_text("before")
    with pytest.raises(UnicodeEncodeError):  # a page that cannot be encoded fails mid-write
        _write_atomically(out, "x" * 100_000 + "\udc80", force=True)
    assert out.read_text() == "before" and sorted(tmp_path.iterdir()) == [out]


def test_without_plotly_one_line_names_the_install(tmp_path):
    out = tmp_path / "r.html"
    code = ("import sys; sys.modules['plotly'] = None; sys.argv = ['warehouse', *sys.argv[1:]];"
            "from warehouse.cli.app import main; main()")
    done = subprocess.run([sys.executable, "-c", code, "--db", str(tmp_path / "w.db"), "report", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == ("Error: warehouse report needs plotly: python3 -m pip install plotly "
                                   "(or the project's extra: pip install 'trajectory-warehouse[report]')")
    assert not out.exists() and not (tmp_path / "w.db").exists()


def test_the_cli_imports_plotly_only_for_the_report(tmp_path):
    code = ("import sys; from warehouse.cli.app import _register; _register();"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'plotly' or m == 'warehouse.report'))")
    done = subprocess.run([*CLI[:1], "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


# --- the pieces ------------------------------------------------------------------------------

def test_run_titles_are_unique_and_natural_order_reads_numbers():
    rows = [{"run_key": "aaaa1111-x", "name": "ckpt"}, {"run_key": "bbbb2222-y", "name": "ckpt"},
            {"run_key": "cccc3333-z", "name": None}]
    assert run_titles(rows) == {"aaaa1111-x": "ckpt (aaaa1111)", "bbbb2222-y": "ckpt (bbbb2222)",
                                "cccc3333-z": "cccc3333"}
    assert sorted(["ckpt-1000", "ckpt-200", "ckpt-30", "base"], key=natural_key) == [
        "base", "ckpt-30", "ckpt-200", "ckpt-1000"]
