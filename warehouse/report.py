"""The sweep report: one HTML file, self-contained, that shows what the canned queries answer.

`warehouse report OUT.html` reads runs, pass-rate, solve-matrix, failures and lengths through
the canned queries' read-only path (so the report never writes the warehouse) and draws them
with plotly, whose JavaScript bundle is inlined once: the page opens offline, from a file or a
mail attachment, with nothing fetched. plotly is imported here only, when a report is built.

Sections: the runs table; pass rate per run (or per value of `--by`) with its 95 % interval
(pass-rate's, clustered by task) as error bars, the best and the groups statistically tied with
it filled (leaderboard); the solve matrix as a heat map of tasks x runs, hardest task first;
exception types per run; and the median, p90 and max of each run's turns and characters (what
the lengths query answers: it holds no quartiles, so there is no box to draw).
"""

from __future__ import annotations

import html
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from warehouse.db.engine import redact
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.outdir import check_parent, write_error
from warehouse.queries import QUERIES, run_canned
from warehouse.readonly import DEFAULT_TIMEOUT, ReadResult
from warehouse.runs import labels_of, natural_key

INSTALL_HINT = "python3 -m pip install plotly (or the project's extra: pip install 'trajectory-warehouse[report]')"
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# The sections' div ids: stable, so a reader (and the browser test) can find each chart.
CHARTS = ("pass-rate", "solve-matrix", "failures", "lengths")


@dataclass(frozen=True)
class ReportData:
    """What the canned queries answered, one result each."""

    runs: ReadResult
    pass_rate: ReadResult
    leaderboard: ReadResult  # its tie groups, over the same groups as pass_rate
    solve_matrix: ReadResult
    failures: ReadResult
    lengths: ReadResult
    by: str
    labels: Mapping[str, Mapping[str, str]]  # each run's labels, by run_key


@dataclass(frozen=True)
class ReportInfo:
    out: Path
    runs: int
    tasks: int
    charts: tuple[str, ...]  # the ids of the charts drawn (none for an empty warehouse)
    bytes: int
    note: str | None = None  # a filter value that matched nothing (Filters.unmatched)


def require_plotly() -> None:
    """One line naming the install command, before anything is read or written."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise WarehouseError(f"warehouse report needs plotly: {INSTALL_HINT}") from None


def check_out(out: Path, force: bool) -> None:
    """OUT must not exist, unless `force`; its folder must (warehouse.outdir.check_parent)."""
    check_parent(out)
    if out.is_dir():
        raise WarehouseError(f"{out}: is a directory (give the HTML file to write)")
    if (out.exists() or out.is_symlink()) and not force:
        raise WarehouseError(f"{out}: exists (pass --force to replace it)")


def write_report(engine: Engine, out: Path, *, filters: Filters = Filters(), by: str = "run",
                 force: bool = False, timeout: float = DEFAULT_TIMEOUT, errors: str = "fail",
                 metric: str | None = None) -> ReportInfo:
    """Build the report of the warehouse behind `engine` (a reading engine) and write it to
    `out`, atomically: OUT is either the whole page or left as it was."""
    require_plotly()
    check_out(out, force)
    data = gather(engine, filters=filters, by=by, timeout=timeout, errors=errors, metric=metric)
    page, charts = render(data, source=redact(engine.url), narrowed=_describe(filters, by, errors, metric))
    _write_atomically(out, page, force)
    tasks = len({row[0] for row in data.solve_matrix.rows})
    # The filters' note (every query's alike), then the choice of --errors and --metric (pass-rate's).
    notes = (getattr(data.runs, "note", None) or "").splitlines()
    notes += [line for line in (getattr(data.pass_rate, "note", None) or "").splitlines() if line not in notes]
    return ReportInfo(out, len(data.runs.rows), tasks, charts, len(page.encode("utf-8")),
                      "\n".join(notes) or None)


# --- reading -----------------------------------------------------------------------------------

def gather(engine: Engine, *, filters: Filters = Filters(), by: str = "run",
           timeout: float = DEFAULT_TIMEOUT, errors: str = "fail", metric: str | None = None) -> ReportData:
    """The canned queries' answers, each narrowed by `filters` as `warehouse query` narrows
    it. `by` is run, model, agent or label:KEY (pass-rate's own --by); `errors` and `metric`
    are the success queries' --errors and --metric (warehouse.queries.outcome)."""
    label = _label_key(by)
    with engine.connect() as conn:
        filters.run_ids(conn)  # an unknown or ambiguous run: one line, before any query
        keys = dict(conn.execute(text("SELECT id, run_key FROM runs")).all())
        labels = {keys[run_id]: values for run_id, values in labels_of(conn).items()}
    if label and keys and not any(label in values for values in labels.values()):
        raise WarehouseError(f"no run carries the label {label!r}")

    def ask(name: str, **values: Any) -> ReadResult:
        return run_canned(engine.url, QUERIES[name], values, filters=filters, timeout=timeout)

    chosen = {"errors": errors, "metric": metric}
    return ReportData(runs=ask("runs"), pass_rate=ask("pass-rate", by=by, **chosen),
                      leaderboard=ask("leaderboard", by=by, **chosen), solve_matrix=ask("solve-matrix", **chosen),
                      failures=ask("failures"), lengths=ask("lengths"), by=by, labels=labels)


def _label_key(by: str) -> str | None:
    if by in ("run", "model", "agent"):
        return None
    kind, _, key = by.partition(":")
    if kind != "label" or not key:
        raise WarehouseError(f"--by is run, model, agent or label:KEY, not {by!r}")
    return key


# --- the page ----------------------------------------------------------------------------------

def render(data: ReportData, *, source: str, narrowed: str = "") -> tuple[str, tuple[str, ...]]:
    """The page's HTML and the ids of the charts it draws."""
    require_plotly()
    rows = _dicts(data.runs)
    titles = run_titles(rows)
    order = sorted(titles, key=lambda key: natural_key(titles[key]))
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (f"<h1>Sweep report</h1><p class=meta>{_e(source)} · {len(rows)} run{_s(len(rows))}"
            f"{' · ' + _e(narrowed) if narrowed else ''} · generated {generated}</p>")
    if not rows:
        body = "<p class=empty>Nothing to show: this warehouse holds no runs" + \
               (" that match." if narrowed else ". Load some with <code>warehouse ingest</code>.") + "</p>"
        return _page(head + body), ()

    sections = [("Runs", _runs_table(rows, order, titles, data.labels), None)]
    figures = [
        ("pass-rate", "Pass rate" + ("" if data.by == "run" else f" by {_grouping(data.by)}"),
         pass_rate_figure(data.pass_rate, data.by, titles, order, _tied_with_best(data.leaderboard)),
         "Successes over trials; the bars are 95 % intervals clustered by task (pass-rate's). Filled: the "
         "best and those statistically tied with it (leaderboard: paired tests over the shared tasks, "
         "Holm-adjusted over every pair)."),
        ("solve-matrix", "Solve matrix", solve_matrix_figure(data.solve_matrix, titles, order),
         "Share of each task's attempts that succeeded, per run; hardest tasks (fewest successes "
         "over all runs) on top, blank where a run did not attempt the task." + solve_matrix_note(data.solve_matrix)),
        ("failures", "Failures", failures_figure(data.failures, titles, order),
         "Trials that ended in an exception, by type."),
        ("lengths", "Trajectory lengths", lengths_figure(data.lengths, titles, order),
         "Median, p90 and max per run, of each trial's turns and characters."),
    ]
    drawn = []
    for div_id, title, figure, note in figures:
        if figure is None:
            sections.append((title, f"<p class=empty>{_e(_NOTHING[div_id])}</p>", div_id))
            continue
        # The bundle goes in with the first chart drawn, once for the page.
        chart = figure.to_html(full_html=False, include_plotlyjs=not drawn, div_id=div_id,
                               config=PLOTLY_CONFIG, default_height=figure.layout.height or 420)
        sections.append((title, f"<p class=note>{_e(note)}</p>{chart}", div_id))
        drawn.append(div_id)
    body = "".join(f"<section id='section-{_e(div_id or 'runs')}'><h2>{_e(title)}</h2>{content}</section>"
                   for title, content, div_id in sections)
    return _page(head + body), tuple(drawn)


_NOTHING = {
    "pass-rate": "No trials to count.",
    "solve-matrix": "No trial names its task.",
    "failures": "No trial ended in an exception.",
    "lengths": "No trial has a trajectory to measure.",
}

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta, .note { color: #666; } .empty { font-style: italic; color: #666; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .key { font-family: ui-monospace, monospace; font-size: 12px; }
.scroll { overflow-x: auto; }
"""


def _page(body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>Sweep report</title><style>{_CSS}</style></head><body>{body}</body></html>\n")


def _runs_table(rows: list[dict[str, Any]], order: list[str], titles: Mapping[str, str],
               labels: Mapping[str, Mapping[str, str]]) -> str:
    by_key = {row["run_key"]: row for row in rows}
    columns = [("run", None), ("run_key", None), ("labels", None), ("trials", "{:,}"), ("complete", "{:,}"),
               ("incomplete", "{:,}"), ("pass_rate", "{:.1%}"), ("mean_reward", "{:.3f}"),
               ("errors", "{:,}"), ("agents", None), ("models", None), ("first_started", None),
               ("last_started", None), ("sources", None)]
    rows = [{**by_key[key], "run": titles[key],
             "labels": ", ".join(f"{k}={v}" for k, v in labels.get(key, {}).items()) or None} for key in order]
    # Only the columns some run has a value in (no labels column in a warehouse without labels).
    columns = [(name, form) for name, form in columns if any(row.get(name) is not None for row in rows)]
    head = "".join(f"<th>{_e(name.replace('_', ' '))}</th>" for name, _ in columns)
    lines = []
    for row in rows:
        cells = []
        for name, form in columns:
            value = row.get(name)
            if value is None:
                cells.append("<td></td>")
            elif form:
                cells.append(f"<td class=num>{form.format(value)}</td>")
            elif isinstance(value, datetime):
                cells.append(f"<td>{value:%Y-%m-%d %H:%M:%S}</td>")
            else:
                cells.append(f"<td{' class=key' if name == 'run_key' else ''}>{_e(value)}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table></div>"


# --- the charts --------------------------------------------------------------------------------

def _tied_with_best(result: ReadResult) -> dict[Any, bool]:
    """leaderboard's answer: each group's tied_with_best."""
    return {row[result.columns[1]]: row["tied_with_best"] for row in _dicts(result)}


def pass_rate_figure(result: ReadResult, by: str, titles: Mapping[str, str], order: list[str],
                     tied: Mapping[Any, bool]):
    import plotly.graph_objects as go

    rows = [row for row in _dicts(result) if row["trials"]]
    if not rows:
        return None
    group = result.columns[0]  # run_key, model, agent or the label's values
    if group == "run_key":
        rank = {key: i for i, key in enumerate(order)}
        rows.sort(key=lambda row: rank.get(row["run_key"], len(rank)))
        x = [titles.get(row["run_key"], row["run_key"]) for row in rows]
    else:  # in the order given: a label's values sorted as a sweep is read
        x = ["(none)" if row[group] is None else str(row[group]) for row in rows]
    ties = [tied.get(row[group], False) for row in rows]
    y, low, high = [], [], []
    for row in rows:
        y.append(row["pass_rate"])
        low.append(row["pass_rate"] - row["pass_rate_low"])
        high.append(row["pass_rate_high"] - row["pass_rate"])
    hover = [f"{_e(name)}<br>{row['successes']:,} of {row['trials']:,} trials"
             + (f" in {row['runs']} run{_s(row['runs'])}" if "runs" in row else "")
             + f"<br>pass rate {row['pass_rate']:.1%}" + ("<br>tied with the best" if tie else "")
             for name, row, tie in zip(x, rows, ties)]
    # A line joins only what a sweep orders: the values of one label. Runs, models and agents
    # are unrelated points, and the runs without the label, "(none)", are no step of the sweep.
    swept = group not in ("run_key", "model", "agent")
    labelled = [i for i, row in enumerate(rows) if not swept or row[group] is not None]
    unlabelled = [i for i, row in enumerate(rows) if swept and row[group] is None]
    traces = [(labelled, "lines+markers" if swept else "markers", "pass rate"), (unlabelled, "markers", "(none)")]
    figure = go.Figure([go.Scatter(
        x=[_e(x[i]) for i in part], y=[y[i] for i in part], mode=mode, name=name,
        error_y=dict(type="data", symmetric=False, array=[high[i] for i in part],
                     arrayminus=[low[i] for i in part], thickness=1.5, width=6),
        hovertext=[hover[i] for i in part], hoverinfo="text", showlegend=False,
        marker=dict(size=9, symbol=["circle" if ties[i] else "circle-open" for i in part]))
        for part, mode, name in traces if part])
    figure.update_layout(_layout(height=420), xaxis_title=_grouping(by),
                         yaxis=dict(title="pass rate", range=[0, 1.02], tickformat=".0%"))
    figure.update_xaxes(type="category", categoryorder="array", categoryarray=[_e(name) for name in x])
    return figure


# The solve matrix's rows: each named, ROW_PIXELS high; past MATRIX_TASKS tasks only the hardest
# are drawn (a taller heatmap outgrows what a browser draws as one image) and the note says so.
MATRIX_TASKS = 500
ROW_PIXELS = 16


def solve_matrix_note(result: ReadResult) -> str:
    """What the matrix leaves out, and how to narrow it; empty when it shows every task."""
    tasks = len({row["task"] for row in _dicts(result)})
    if tasks <= MATRIX_TASKS:
        return ""
    return (f" Showing the {MATRIX_TASKS:,} hardest of {tasks:,} tasks: narrow with --task, --run or "
            f"--label to see the others.")


def solve_matrix_figure(result: ReadResult, titles: Mapping[str, str], order: list[str]):
    import plotly.graph_objects as go

    cells: dict[tuple[str, str], tuple[int, int]] = {}
    totals: dict[str, list[int]] = {}
    for row in _dicts(result):
        cells[row["task"], row["run_key"]] = (row["attempts"], row["successes"])
        total = totals.setdefault(row["task"], [0, 0])
        total[0] += row["attempts"]
        total[1] += row["successes"]
    if not cells:
        return None
    # Difficulty: the share of all of a task's attempts, over every run, that failed.
    tasks = sorted(totals, key=lambda task: (totals[task][1] / totals[task][0], natural_key(task)))
    tasks = tasks[:MATRIX_TASKS]  # the hardest; render() says how many of how many
    runs = [key for key in order if any((task, key) in cells for task in tasks)]
    z, hover = [], []
    for task in tasks:
        z.append([None if (task, key) not in cells else cells[task, key][1] / cells[task, key][0]
                  for key in runs])
        hover.append([f"{_e(task)}<br>{_e(titles.get(key, key))}<br>" + (
            "not attempted" if (task, key) not in cells else
            f"{cells[task, key][1]} of {cells[task, key][0]} attempts succeeded") for key in runs])
    height = max(320, ROW_PIXELS * len(tasks) + 160)
    figure = go.Figure(go.Heatmap(
        z=z, x=[_e(titles.get(key, key)) for key in runs], y=[_e(task) for task in tasks],
        zmin=0, zmax=1, colorscale="Viridis", hovertext=hover, hoverinfo="text", xgap=1, ygap=1,
        colorbar=dict(title="solved", tickformat=".0%")))
    figure.update_layout(_layout(height=height))
    figure.update_xaxes(type="category", side="top")
    # Hardest on top, every row named: the page grows a row's height per task, and scrolls.
    figure.update_yaxes(type="category", autorange="reversed", showticklabels=True, dtick=1)
    return figure


def failures_figure(result: ReadResult, titles: Mapping[str, str], order: list[str]):
    import plotly.graph_objects as go

    rows = _dicts(result)
    if not rows:
        return None
    runs = [key for key in order if any(row["run_key"] == key for row in rows)]
    types = sorted({row["exception_type"] for row in rows},
                   key=lambda t: -sum(row["trials"] for row in rows if row["exception_type"] == t))
    figure = go.Figure()
    for kind in types:
        mine = {row["run_key"]: row for row in rows if row["exception_type"] == kind}
        figure.add_trace(go.Bar(
            name=_e(kind), x=[_e(titles.get(key, key)) for key in runs],
            y=[mine[key]["trials"] if key in mine else 0 for key in runs],
            hovertext=[f"{_e(kind)}<br>{_e(titles.get(key, key))}<br>" + (
                f"{mine[key]['trials']} trials ({mine[key]['share']:.1%} of the run), "
                f"{mine[key]['tasks']} tasks" if key in mine else "none") for key in runs],
            hoverinfo="text"))
    figure.update_layout(_layout(height=420), barmode="stack", yaxis_title="trials", legend_title="exception")
    figure.update_xaxes(type="category")
    return figure


def lengths_figure(result: ReadResult, titles: Mapping[str, str], order: list[str]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = {(row["run_key"], row["measure"]): row for row in _dicts(result) if row["n"]}
    measures = [m for m in ("turns", "chars") if any(measure == m for _, measure in rows)]
    if not measures:
        return None
    runs = [key for key in order if any((key, m) in rows for m in measures)]
    figure = make_subplots(rows=1, cols=len(measures), subplot_titles=[f"{m} per trial" for m in measures])
    colours = {"median": "#1f77b4", "p90": "#ff7f0e", "max": "#7f7f7f"}
    for col, measure in enumerate(measures, start=1):
        for stat, colour in colours.items():
            figure.add_trace(go.Bar(
                name=stat, legendgroup=stat, showlegend=col == 1, marker_color=colour,
                x=[_e(titles.get(key, key)) for key in runs],
                y=[rows[key, measure][stat] if (key, measure) in rows else None for key in runs],
                hovertext=[f"{_e(titles.get(key, key))}<br>{measure} {stat}: "
                           f"{rows[key, measure][stat]:,.6g} (n = {rows[key, measure]['n']:,})"
                           if (key, measure) in rows else "" for key in runs],
                hoverinfo="text"), row=1, col=col)
        figure.update_xaxes(type="category", row=1, col=col)
    figure.update_layout(_layout(height=420), barmode="group")
    return figure


def _layout(height: int) -> dict[str, Any]:
    return dict(template="plotly_white", height=height, margin=dict(l=60, r=30, t=50, b=60))


# --- helpers -----------------------------------------------------------------------------------

def run_titles(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each run's label in the charts: its name, or its key's first 8 characters where it has
    none; a name two runs share gets each run's key prefix too, so no two titles are equal."""
    names = [row["name"] or row["run_key"][:8] for row in rows]
    titles = {}
    for row, name in zip(rows, names):
        titles[row["run_key"]] = name if names.count(name) == 1 else f"{name} ({row['run_key'][:8]})"
    if len(set(titles.values())) < len(titles):  # key prefixes too alike: the whole key
        return {row["run_key"]: row["run_key"] for row in rows}
    return titles


def _describe(filters: Filters, by: str, errors: str = "fail", metric: str | None = None) -> str:
    parts = [f"runs {', '.join(filters.runs)}"] if filters.runs else []
    parts += [f"{what} {', '.join(values)}" for what, values in
              (("tasks", filters.tasks), ("models", filters.models), ("agents", filters.agents)) if values]
    parts += [f"{key}={value}" for key, value in filters.labels]
    if filters.times:
        parts.append(f"trials started {filters.window_text()}")
    if by != "run":
        parts.append(f"pass rate by {by}")
    if metric is not None:
        parts.append(f"success on rewards[{metric!r}]")
    if errors != "fail":
        parts.append("trials with an exception and no reward left out")
    return ", ".join(parts)


def _grouping(by: str) -> str:
    """What --by groups by, as an axis title: run, model, agent, or the label's key."""
    return by.partition(":")[2] if by.startswith("label:") else by


def _dicts(result: ReadResult) -> list[dict[str, Any]]:
    return [{column: _number(value) for column, value in zip(result.columns, row)} for row in result.rows]


def _number(value: Any) -> Any:
    """PostgreSQL's sums come as Decimals, which neither mix with floats nor go to JSON."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _e(value: Any) -> str:
    """Text for HTML, and for plotly's labels, which read their text as HTML too."""
    return html.escape(printable(str(value)), quote=True)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _write_atomically(out: Path, page: str, force: bool) -> None:
    """Write beside OUT and rename over it, so OUT is never half-written: an error (a full disk,
    Ctrl-C) leaves it as it was and removes the temporary file."""
    temp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
    try:
        # os.open honours the umask, as the page written in place would (mkstemp's files are 0600).
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w", encoding="utf-8") as f:
            f.write(page)
            f.flush()
            os.fsync(f.fileno())
        check_out(out, force)  # again: a file may have appeared while the report was built
        os.replace(temp, out)
    except BaseException as exc:
        try:
            temp.unlink(missing_ok=True)
        except OSError:  # (never made: a folder that cannot be written)
            pass
        if isinstance(exc, OSError):
            raise write_error(out, exc) from None
        raise
