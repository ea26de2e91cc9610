"""`warehouse serve`, the server's side (the browser's is tests/test_serve_browser.py): reads
never write, on SQLite (every byte, mode and mtime of the file; a read-only mount) and on
PostgreSQL (every statement in a READ ONLY transaction); only GET and HEAD; the strict headers on
every response; the host check; the lines it says and how it ends; the trials page's filters,
sorts and paging against the base tables; the canned queries' downloads against the CLI's; the
row cap and the time limit.

Server-side behaviour goes through Flask's test client over a real database; what the command
does (listening, the host check, signals) through the real process."""

from __future__ import annotations

import http.client
import json
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from html import unescape
from urllib.parse import quote, unquote, urlsplit

import pytest

from procs import CLI, run_cli
from query_fixture import _episodes, _trial, build
from test_read_never_writes import (  # noqa: F401 (fixtures)
    _READONLY_VIEW,
    _UNSHARE,
    journal_mode,
    make_target,
    probed_pg,
    readonly_mounts,
    sample_warehouse,
    snapshot,
)
from ingest.write import writer
from warehouse.db.engine import make_engine, resolve_url
from warehouse.queries import QUERIES
from warehouse.serve.app import CSP, create_app
from warehouse.serve.pages import Viewer
from warehouse.serve.server import _HostChecked

ACCESS_LOG = re.compile(r'^127\.0\.0\.1 - - \[[^]]+\] "GET / HTTP/1\.1" 200 -$')
SERVING = re.compile(r"Serving .* at (http://\S+/) \(read-only; Ctrl-C to stop\)$")


# --- the real process ------------------------------------------------------------------------

@dataclass
class Served:
    proc: subprocess.Popen
    url: str
    said: list[str]  # the lines on stderr up to and including the "Serving" one
    lines: "queue.Queue[str | None]"

    def rest(self, timeout: float = 60) -> list[str]:
        """The lines it says from now until it exits."""
        out = []
        while (line := self.lines.get(timeout=timeout)) is not None:
            out.append(line)
        return out


@contextmanager
def serving(db: str, *args: str, prefix: tuple[str, ...] = ()) -> Iterator[Served]:
    """`warehouse --db DB serve --port 0 ARGS`, once it listens; stopped by SIGINT after."""
    proc = subprocess.Popen([*prefix, *CLI, "--db", db, "serve", "--port", "0", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        for line in proc.stderr:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    said = []
    try:
        while True:
            line = lines.get(timeout=60)
            assert line is not None, f"serve exited {proc.wait()} before listening: {said}"
            said.append(line)
            found = SERVING.search(line)
            if found:
                break
        yield Served(proc, found.group(1), said, lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fetch(url: str, path: str, method: str = "GET", headers: dict[str, str] | None = None
          ) -> tuple[int, http.client.HTTPMessage, bytes]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


# --- the pages of a warehouse ----------------------------------------------------------------

def every_page(facts: dict[str, str]) -> list[str]:
    """A URL of each page (and each kind of answer) of a warehouse holding examples/sample,
    `facts` from sample_facts."""
    run, trial = quote(facts["trial_run"], safe=""), quote(facts["trial"], safe="")
    pages = ["/", "/?sort=pass_rate&desc=1", f"/run/{run}", f"/run/{run}?sort=reward&desc=1&page=1&size=5",
             f"/run/{run}?outcome=solved&task=*", f"/run/{run}/trial/{trial}", f"/diff?a={run}/{trial}&b={run}/{trial}",
             f"/trial/{facts['trial_id']}/text?source={quote(facts['source'])}&episode={facts['episode']}&turn=0",
             "/diff", "/matrix", "/queries", "/search?q=the", "/search", "/static/viewer.css", "/static/viewer.js",
             "/run/no-such-run", "/run/" + run + "?sort=xyz", "/nowhere"]
    for name, canned in QUERIES.items():
        two_runs = any(p.name == "a" for p in canned.params)
        query = f"a={quote(facts['a'])}&b={quote(facts['b'])}" if two_runs else ""
        pages += [f"/query/{name}?{query}", f"/query/{name}?{query}&format=csv", f"/query/{name}?{query}&format=json"]
    return pages


_FACTS = ("SELECT t.trial_name, r.run_key, (SELECT min(run_key) FROM runs), (SELECT max(run_key) FROM runs), "
          "e.trial_id, e.trace_source, e.episode_index "
          "FROM trials t JOIN runs r ON r.id = t.run_id JOIN episodes e ON e.trial_id = t.id ORDER BY t.id LIMIT 1")


def sample_facts(db: str) -> dict[str, str]:
    """A trial, its run and two runs' keys: on SQLite read by a connection of its own, closed
    before the test looks at the folder (a pooled one would hold a -wal and -shm open there)."""
    if "://" in db:
        from warehouse.readonly import run_readonly

        row = run_readonly(db, _FACTS).rows[0]
    else:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute(_FACTS).fetchone()
        finally:
            conn.close()
    return dict(zip(("trial", "trial_run", "a", "b", "trial_id", "source", "episode"), map(str, row)))


EXPECTED_ERRORS = {"/run/no-such-run": 404, "/nowhere": 404}


def expected_status(page: str) -> int:
    if "sort=xyz" in page:
        return 400
    return EXPECTED_ERRORS.get(page, 200)


def request_every_page(url: str, facts: dict[str, str]) -> None:
    for page in every_page(facts):
        status, headers, body = fetch(url, page)
        assert status == expected_status(page), (page, status, body[:500])
        assert headers["Content-Security-Policy"] and headers["X-Content-Type-Options"] == "nosniff", page


# --- reads never write -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["wal", "rollback"])
def test_serving_every_page_leaves_the_sqlite_file_as_it_was(kind, sample_warehouse, tmp_path):
    folder = tmp_path / "db"
    path = make_target(kind, sample_warehouse, folder)
    facts = sample_facts(str(sample_warehouse))
    before = snapshot(folder)
    with serving(str(path)) as served:
        request_every_page(served.url, facts)
    assert snapshot(folder) == before
    assert journal_mode(path) == kind.replace("rollback", "delete")


@pytest.mark.parametrize("kind", ["wal", "rollback"])
def test_serving_from_a_read_only_mount(kind, readonly_mounts, sample_warehouse, tmp_path):
    source, view = tmp_path / "archive", tmp_path / "view"
    make_target(kind, sample_warehouse, source)
    view.mkdir()
    facts = sample_facts(str(sample_warehouse))
    before = snapshot(source)
    # The server runs in a mount namespace of its own, where `view` is `source` mounted read-only.
    prefix = (*_UNSHARE, "sh", "-c", _READONLY_VIEW, "sh", str(source), str(view))
    with serving(str(view / "warehouse.db"), prefix=prefix) as served:
        request_every_page(served.url, facts)
    assert snapshot(source) == before


def test_every_page_reads_in_read_only_transactions_on_postgresql(probed_pg):
    """The probe's role may read no row outside a READ ONLY transaction (test_read_never_writes):
    every page answering means every statement of every page was read-only."""
    url, _ = probed_pg
    with serving(url) as served:
        request_every_page(served.url, sample_facts(url))


# --- GET only, and the headers of every response ---------------------------------------------

@pytest.fixture
def fixture_db(db_url) -> str:
    """The query fixture (tests/query_fixture.py) and the run `grid` (GRID below)."""
    engine = make_engine(resolve_url(db_url))
    try:
        build(engine)
        source = writer.ensure_source(engine, "parquet", "/fixture/grid", "fixture-grid")
        with writer.unit(engine, source, "unit-grid", "hash-grid") as unit:
            unit.add_trials(grid_trials())
    finally:
        engine.dispose()
    return db_url


def client(db_url: str, *, timeout: float = 10.0, max_rows: int = 10_000):
    return create_app(Viewer(resolve_url(db_url), timeout, max_rows), title="test").test_client()


def test_only_get_and_head_are_answered(fixture_db):
    web = client(fixture_db)
    for path in ("/", "/run/run-a", "/query/runs", "/matrix", "/search?q=x", "/nowhere"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            response = web.open(path, method=method, data=b"x=1")
            assert response.status_code == 405, (method, path)
            assert response.headers["Allow"] == "GET, HEAD"
        assert web.head(path).status_code == (404 if path == "/nowhere" else 200)


def test_every_response_carries_the_strict_headers(fixture_db):
    web = client(fixture_db)
    responses = {path: web.get(path) for path in (
        "/", "/run/run-a", "/run/nope", "/run/run-a?sort=xyz", "/query/runs?format=csv", "/query/runs?format=json",
        "/static/viewer.css", "/static/viewer.js", "/nowhere", "/search?q=do")}
    responses["POST /"] = web.post("/")
    for name, response in responses.items():
        assert response.headers["X-Content-Type-Options"] == "nosniff", name
        assert response.headers["Content-Security-Policy"] == CSP, name
        assert re.fullmatch(r"app;dur=\d+\.\d", response.headers["Server-Timing"]), name


# --- the host check --------------------------------------------------------------------------

def test_a_loopback_server_refuses_another_host_name(fixture_db):
    from werkzeug.test import Client

    app = create_app(Viewer(resolve_url(fixture_db), 10.0, 100))
    loopback, anywhere = Client(_HostChecked(app, loopback=True)), Client(_HostChecked(app, loopback=False))
    for host in ("evil.example:8765", "evil.example", "127.0.0.1.evil.example:8765", "localhost.evil.example"):
        refused = loopback.get("/", headers={"Host": host})
        assert refused.status_code == 400, host
        assert refused.headers["Content-Security-Policy"] == CSP and refused.headers["X-Content-Type-Options"] == "nosniff"
        assert anywhere.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1", "localhost"):
        assert loopback.get("/", headers={"Host": host}).status_code == 200, host


def test_the_real_server_refuses_another_host_name(fixture_db):
    with serving(fixture_db) as served:
        status, _, body = fetch(served.url, "/", headers={"Host": "evil.example:8765"})
        assert status == 400 and b"loopback" in body
        assert fetch(served.url, "/")[0] == 200


# --- what the command says, and how it ends --------------------------------------------------

def test_a_non_loopback_address_is_said_with_who_can_reach_it(fixture_db):
    with serving(fixture_db, "--host", "0.0.0.0") as served:
        assert served.said[0] == ("warning: serving on 0.0.0.0: anyone who can reach this machine on the network, "
                                  "on any of its addresses can read this warehouse (no login)")
        port = urlsplit(served.url).port
        status, _, _ = fetch(f"http://127.0.0.1:{port}/", "/", headers={"Host": "evil.example"})
        assert status == 200  # bound to every address, it answers any name: that is what it said


def test_a_loopback_address_says_no_warning(fixture_db):
    with serving(fixture_db) as served:
        assert len(served.said) == 1 and served.url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_ends_it_in_one_line(fixture_db, stop):
    with serving(fixture_db) as served:
        assert fetch(served.url, "/")[0] == 200
        served.proc.send_signal(stop)
        rest = served.rest()
        code = served.proc.wait(timeout=30)
    # Werkzeug logs each request (one line each); the stop is said in one line of its own.
    assert [line for line in rest if not ACCESS_LOG.match(line)] == ["Stopped."], rest
    assert code == 0


def test_a_port_in_use_is_one_line(fixture_db):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(fixture_db, "serve", "--port", str(port), timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_missing_warehouse_is_said_before_listening(tmp_path):
    path = tmp_path / "absent" / "warehouse.db"
    done = run_cli(str(path), "serve", "--port", "0", timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"Error: no warehouse at {path}: `warehouse ingest …` or `warehouse db upgrade` "
                                   f"creates one")


# --- a run's trials: filters, sorts, paging --------------------------------------------------

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)


def grid_trials():
    """The run `grid`: 14 trials whose every sortable column has ties and NULLs."""
    rewards = [1.0, 0.0, None, 0.5, 1.0, 0.0, None, 0.5, 1.0, 0.25, 0.0, None, 1.0, 0.5]
    tasks = ["alpha", "beta", "gamma", None]
    exceptions = [None, None, "RuntimeError", None, "AgentTimeoutError", None, None]
    trials = []
    for i, reward in enumerate(rewards):
        started = None if i % 5 == 3 else T0 + timedelta(minutes=7 * ((i * 3) % 8))
        finished = None if started is None or i % 4 == 1 else started + timedelta(seconds=30 * ((i * 5) % 6))
        turns = (i * 7) % 4  # 0: no episode at all
        conversation = [("user", f"q{k}") if k % 2 == 0 else ("assistant", f"a{k}") for k in range(turns * 2)]
        trials.append(_trial(
            "grid", f"g{i:02d}", tasks[i % 4], reward, exc=exceptions[i % 7],
            status="incomplete" if i in (6, 11) else "complete",
            episodes=_episodes(conversation) if turns else [],
            n_input_tokens=None if i % 3 == 0 else 100 * ((i * 3) % 5), n_output_tokens=None if i % 6 == 5 else i % 3,
            cost_usd=None if i % 2 else round(0.01 * ((i * 7) % 5), 2), started_at=started, finished_at=finished,
            rewards=None if reward is None else {"reward": reward, "style": float(i % 3)}))
    return trials


def base_rows(db_url: str) -> list[dict]:
    """Each trial of `grid` from the base tables (not the page's summary joins): the values the
    page sorts by, computed apart from it."""
    from sqlalchemy import text

    engine = make_engine(resolve_url(db_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("""
                SELECT t.trial_name, k.name AS task, t.reward, t.status, t.exception_type,
                       (SELECT max(e.n_turns) FROM episodes e WHERE e.trial_id = t.id) AS turns,
                       t.n_input_tokens, t.n_output_tokens, t.cost_usd, t.started_at, t.finished_at
                FROM trials t JOIN runs r ON r.id = t.run_id LEFT JOIN tasks k ON k.id = t.task_id
                WHERE r.run_key = 'grid'""")).mappings().all()
    finally:
        engine.dispose()
    out = []
    for row in rows:
        row = dict(row)
        for key in ("started_at", "finished_at"):
            if isinstance(row[key], str):
                row[key] = datetime.fromisoformat(row[key])
            if row[key] is not None and row[key].tzinfo is None:
                row[key] = row[key].replace(tzinfo=timezone.utc)
        out.append(row)
    assert len(out) == 14
    return out


SORT_VALUES = {
    "trial": lambda r: r["trial_name"], "task": lambda r: r["task"], "reward": lambda r: r["reward"],
    "status": lambda r: r["status"], "exception": lambda r: r["exception_type"], "turns": lambda r: r["turns"],
    "input_tokens": lambda r: r["n_input_tokens"], "output_tokens": lambda r: r["n_output_tokens"],
    "cost": lambda r: r["cost_usd"], "started": lambda r: r["started_at"],
    "time": lambda r: (r["finished_at"] - r["started_at"]) if r["started_at"] and r["finished_at"] else None,
}


def expected_order(rows: list[dict], sort: str, desc: bool) -> list[str]:
    """Values in order (the other way with desc), ties by name; the trials without one last."""
    value = SORT_VALUES[sort]
    have = sorted((r for r in rows if value(r) is not None), key=lambda r: r["trial_name"])
    have.sort(key=value, reverse=desc)  # stable: equal values keep the names' order
    missing = sorted((r for r in rows if value(r) is None), key=lambda r: r["trial_name"])
    return [r["trial_name"] for r in have + missing]


def shown(response) -> tuple[list[str], int]:
    """(the trial names of a trials page, in order; the count it says match)."""
    assert response.status_code == 200, response.data[:500]
    html = response.get_data(as_text=True)
    names = [unquote(n) for n in re.findall(r'<td><a href="/run/[^"]+/trial/([^"?]+)">', html)]
    total = re.search(r'<p class="meta">([\d,]+) trials?', html)
    return names, int(total.group(1).replace(",", ""))


def test_the_trials_page_sorts_by_every_column_both_ways_nulls_last(fixture_db):
    web, rows = client(fixture_db), base_rows(fixture_db)
    for sort in SORT_VALUES:
        values = [SORT_VALUES[sort](r) for r in rows]
        assert None in values or sort in ("trial", "status"), sort  # the NULLs' place is tested where it can be
        assert len(set(values)) < len(values) or sort == "trial", sort  # and the ties'
        for desc in (False, True):
            names, total = shown(web.get(f"/run/grid?sort={sort}&desc={int(desc)}"))
            assert (names, total) == (expected_order(rows, sort, desc), 14), (sort, desc)


def test_the_trials_page_pages(fixture_db):
    web, rows = client(fixture_db), base_rows(fixture_db)
    order = expected_order(rows, "reward", True)
    pages = [shown(web.get(f"/run/grid?sort=reward&desc=1&size=4&page={n}")) for n in (1, 2, 3, 4)]
    assert [total for _, total in pages] == [14] * 4
    assert [names for names, _ in pages] == [order[0:4], order[4:8], order[8:12], order[12:14]]
    past = shown(web.get("/run/grid?sort=reward&desc=1&size=4&page=5"))
    assert past == ([], 14)
    assert "page 2 of 4" in web.get("/run/grid?size=4&page=2").get_data(as_text=True)


@pytest.mark.parametrize("params, keep", [
    ("task=alpha", lambda r: r["task"] == "alpha"),
    ("task=*a", lambda r: r["task"] in ("alpha", "beta", "gamma")),
    ("task=B?TA", lambda r: r["task"] == "beta"),
    ("outcome=solved", lambda r: r["reward"] is not None and r["reward"] >= 1),
    ("outcome=unsolved", lambda r: r["reward"] is None or r["reward"] < 1),
    ("outcome=error", lambda r: r["exception_type"] is not None),
    ("outcome=unsolved&task=beta", lambda r: (r["reward"] is None or r["reward"] < 1) and r["task"] == "beta"),
], ids=["task", "glob", "one-character", "solved", "unsolved", "error", "both"])
def test_the_trials_page_filters(fixture_db, params, keep):
    web, rows = client(fixture_db), base_rows(fixture_db)
    kept = [r for r in rows if keep(r)]
    assert 0 < len(kept) < len(rows)
    for sort, desc in (("trial", False), ("cost", True)):
        names, total = shown(web.get(f"/run/grid?{params}&sort={sort}&desc={int(desc)}&size=3&page=2"))
        assert total == len(kept)
        assert names == expected_order(kept, sort, desc)[3:6]


@pytest.mark.parametrize("path, line", [
    ("/run/grid?sort=xyz", "sort must be one of trial, task, reward, status, exception, turns, input_tokens, "
                           "output_tokens, cost, started, time, not 'xyz'"),
    ("/run/grid?page=0", "page must be 1 or more, not 0"),
    ("/run/grid?page=-3", "page must be 1 or more, not -3"),
    ("/run/grid?page=abc", "page must be a whole number, not 'abc'"),
    ("/run/grid?size=5000", "size must be from 1 to 1000, not 5000"),
    ("/run/grid?size=0", "size must be from 1 to 1000, not 0"),
    ("/run/grid?outcome=maybe", "outcome must be one of solved, unsolved, error, not 'maybe'"),
    ("/?sort=xyz", "sort must be one of name, trials, pass_rate, mean_reward, errors, first_started, not 'xyz'"),
    ("/query/runs?format=xml", "format must be html, csv or json, not 'xml'"),
    ("/query/pass-at-k?k=abc", None),
    ("/query/pass-rate?by=nonsense", None),
    ("/query/nope", None),
    ("/search?q=x&limit=abc", "limit must be a whole number, not 'abc'"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("/") else "")
def test_a_bad_value_is_a_400_page_of_one_line(fixture_db, path, line):
    response = client(fixture_db).get(path)
    assert response.status_code == 400, response.data[:800]
    messages = re.findall(r'<p class="error">(.*?)</p>', response.get_data(as_text=True), re.S)
    assert len(messages) == 1 and "\n" not in messages[0] and messages[0].strip()
    if line is not None:
        assert unescape(messages[0]) == line


def test_an_unknown_run_is_a_404(fixture_db):
    response = client(fixture_db).get("/run/no-such-run")
    assert response.status_code == 404
    assert "no run" in response.get_data(as_text=True)


# --- the canned queries: downloads, the row cap, the time limit ------------------------------

@pytest.mark.parametrize("name, params, options", [
    ("runs", "", []),
    ("pass-rate", "by=model&run=run-a&run=run-b", ["--by", "model", "--run", "run-a", "--run", "run-b"]),
    ("leaderboard", "by=model&task=task*", ["--by", "model", "--task", "task*"]),
    ("compare", "a=run-a&b=run-b", ["--a", "run-a", "--b", "run-b"]),
    ("solve-matrix", "run=grid", ["--run", "grid"]),
])
@pytest.mark.parametrize("form", ["csv", "json"])
def test_a_download_is_what_the_cli_prints(fixture_db, name, params, options, form):
    assert name in QUERIES
    response = client(fixture_db).get(f"/query/{name}?{params}&format={form}")
    assert response.status_code == 200, response.data[:500]
    assert response.headers["Content-Disposition"] == f'attachment; filename="{name}.{form}"'
    done = run_cli(fixture_db, "query", name, *options, "--format", form)
    assert done.returncode == 0, done.stderr
    assert response.get_data(as_text=True) == done.stdout
    if form == "json":
        assert json.loads(done.stdout)  # rows, not an empty answer


def test_the_row_cap_cuts_a_page_and_says_so(fixture_db):
    full = client(fixture_db).get("/query/solve-matrix?format=json")
    n = len(json.loads(full.data))
    assert n > 3
    capped = client(fixture_db, max_rows=3)
    page = capped.get("/query/solve-matrix").get_data(as_text=True)
    assert "3 rows (more not shown: the page shows at most this many)" in page
    assert json.loads(capped.get("/query/solve-matrix?format=json").data) == json.loads(full.data)[:3]
    assert len(capped.get("/query/solve-matrix?format=csv").get_data(as_text=True).splitlines()) == 1 + 3
    uncapped = client(fixture_db, max_rows=n).get("/query/solve-matrix").get_data(as_text=True)
    assert f"{n} rows" in uncapped and "more not shown" not in uncapped


@pytest.fixture
def slow_db(db_url) -> str:
    """The fixture plus a trial whose one turn holds 40 MB of text: a search for a needle it
    lacks reads all of it, more than a millisecond's work on any machine."""
    engine = make_engine(resolve_url(db_url))
    try:
        build(engine)
        big = ("the quick brown fox jumps over the lazy dog " * 1_000_000)[:40_000_000]
        source = writer.ensure_source(engine, "parquet", "/fixture/big", "fixture-big")
        with writer.unit(engine, source, "unit-big", "hash-big") as unit:
            unit.add_trials([_trial("big", "big__0", "big", 1.0, episodes=_episodes([("user", big), ("assistant", "ok")]))])
    finally:
        engine.dispose()
    return db_url


def test_the_time_limit_ends_a_slow_page_in_one_line(slow_db):
    response = client(slow_db, timeout=0.001).get("/search?q=needle-that-is-nowhere")
    assert response.status_code == 400, response.data[:500]
    messages = re.findall(r'<p class="error">(.*?)</p>', response.get_data(as_text=True), re.S)
    assert [unescape(m) for m in messages] == ["the query ran longer than the time limit (0.001 s; see --timeout)"]
    found = client(slow_db, timeout=60).get("/search?q=needle-that-is-nowhere")
    assert found.status_code == 200  # the same page, given the time


def test_the_time_limit_is_checked_before_listening(fixture_db):
    done = run_cli(fixture_db, "serve", "--port", "0", "--timeout", "0", timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: the time limit must be a number of seconds more than 0 and at most 86400, not 0.0"


# --- the solve matrix, whose cells are made in Python ------------------------------------------

def test_the_matrix_escapes_task_names_and_links_each_cell_to_its_trials(db_url):
    hostile = 'a"><script>alert(1)</script>&b=<img src=x onerror=alert(2)>'
    engine = make_engine(resolve_url(db_url))
    try:
        source = writer.ensure_source(engine, "parquet", "/fixture/hostile", "fixture-hostile")
        with writer.unit(engine, source, "unit-hostile", "hash-hostile") as unit:
            unit.add_trials([_trial("run/x", "h0", hostile, 1.0), _trial("run/x", "h1", hostile, 0.0),
                             _trial("run/x", "p0", "plain", 1.0)])
    finally:
        engine.dispose()
    web = client(db_url)
    html = web.get("/matrix").get_data(as_text=True)
    assert "<script>" not in html and "<img" not in html
    cells = re.findall(r'<td class="cell (\w+)"><a href="([^"]+)">([^<]*)</a></td>', html)
    assert sorted((how, text) for how, _, text in cells) == [("all", "1/1"), ("some", "1/2")]
    for how, href, _ in cells:
        # The link, as a browser reads the attribute, opens the trials of that task in that run.
        names, total = shown(web.get(unescape(href)))
        assert total == (2 if how == "some" else 1)
