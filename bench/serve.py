"""What a page of `warehouse serve` costs (`--only serve`): math×5 and one trial of 1,000 agent
steps (tools.long_trial) ingested by the command into a fresh SQLite file and, with --pg, a
fresh PostgreSQL database; then the real `warehouse serve --port 0` process, and each page
asked for over one kept-alive HTTP connection from this process, the pages taking turns round
after round (the machine's drift meets them alike), after one untimed request of each.

Each request's wall time, from sending it to its body's last byte, is what a browser waits
for on this machine; the page's `Server-Timing: app;dur=…` header is the application's own
share (its reads and its template), without the HTTP server's and the socket's. The bar is the
issue's: under 100 ms a page, under 300 ms the 1,000-turn trial's.
"""

from __future__ import annotations

import http.client
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

BAR_MS = 100.0
LONG_BAR_MS = 300.0
LONG_STEPS = 1_000
REQUESTS_PER_REPEAT = 20  # timed requests of each page, per --repeat
# The search page's needles, by how often they occur (tools.generate's texts): in every few
# turns; in one text (RARE, found in the warehouse); nowhere; and two common words joined by
# punctuation, in 107 texts: the worst shape for PostgreSQL's pg_trgm, which indexes words.
COMMON, ABSENT, JOINED = "error", "Traceback", "installed_version"
RARE = re.compile(r"\b[0-9a-f]{16}\b")  # a random 64-bit token of a terminal line
_SERVING = re.compile(r" at (http://\S+/) \(read-only")


def results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    from bench.run import fresh_warehouse_url, warehouse_command
    from tools.long_trial import write_trial

    long_job = work / "serve-long" / f"long-{LONG_STEPS}-steps"
    if not long_job.exists():
        write_trial(work / "serve-long", LONG_STEPS)
    rounds = REQUESTS_PER_REPEAT * max(1, args.repeat)
    rows: list[tuple[str, str, str, str]] = []
    targets = [("SQLite", None)] + ([("PostgreSQL", args.pg)] if args.pg else [])
    for backend, pg in targets:
        with fresh_warehouse_url(work, "serve.db", pg) as url:
            for source in (data["math-x5"], long_job):
                print(f"  serve: ingest {source.name} → {backend}", file=sys.stderr)
                subprocess.run(warehouse_command("--db", url, "ingest", str(source)), check=True,
                               capture_output=True)
            pages, searches = _pages(url)
            serve = warehouse_command("--db", url, "serve", "--port", "0")
            print(f"  serve: {len(pages)} pages × {rounds} requests on {backend}", file=sys.stderr)
            timed = _measure(serve, {**pages, **{f"{label}, no index": path for label, path in searches.items()}},
                             rounds)
            started = time.perf_counter()
            subprocess.run(warehouse_command("--db", url, "index", "build"), check=True, capture_output=True)
            built = time.perf_counter() - started
            rows.append((f"serve: warehouse index build ({backend}, math×5), whole process", f"{built:.1f} s", "",
                         "once, before the indexed searches below"))
            timed.update(_measure(serve, {f"{label}, indexed": path for label, path in searches.items()}, rounds))
        for label, (status, wall, server, failed) in timed.items():
            bar = LONG_BAR_MS if label.startswith("trial of") else BAR_MS
            name = f"serve: {label} ({backend}, math×5)"
            if status != 200 or not wall:
                rows.append((name, f"HTTP {status}: not measured", f"bar {bar:.0f} ms", ""))
                continue
            med, p95 = statistics.median(wall), _p95(wall)
            verdict = "under the bar" if p95 < bar else ("median under the bar, p95 over" if med < bar else "OVER the bar")
            if failed:
                verdict += f"; {failed} of {failed + len(wall)} requests past the page's time limit"
            rows.append((name, f"{med:.1f} ms, p95 {p95:.1f} ms",
                         f"bar {bar:.0f} ms; server's own {statistics.median(server):.1f} ms, p95 {_p95(server):.1f} ms",
                         verdict))
    return rows


def _p95(values: list[float]) -> float:
    """The 95th percentile, interpolated between the two nearest of the sorted values."""
    ordered = sorted(values)
    rank = 0.95 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _pages(url: str) -> tuple[dict[str, str], dict[str, str]]:
    """The pages measured, by label: their paths, built from what the warehouse holds (the
    first run of math×5, one of its tasks and trials; the long trial's run); and the searches,
    measured without and with the index."""
    from warehouse.readonly import run_readonly
    from warehouse.serve.app import run_url, trial_url

    def one(sql: str, **params) -> tuple:
        return run_readonly(url, sql, params, max_rows=1).rows[0]

    (run,) = one("SELECT run_key FROM runs WHERE run_key NOT LIKE 'long-%' ORDER BY run_key LIMIT 1")
    trial, task = one("SELECT t.trial_name, k.name FROM trials t JOIN runs r ON r.id = t.run_id "
                      "JOIN tasks k ON k.id = t.task_id WHERE r.run_key = :run ORDER BY t.trial_name LIMIT 1",
                      run=run)
    (text,) = one("SELECT content FROM messages WHERE content LIKE '% 0.______ %' ORDER BY id LIMIT 1")
    rare = RARE.search(text).group(0)
    long_run, long_trial = one("SELECT r.run_key, t.trial_name FROM trials t JOIN runs r ON r.id = t.run_id "
                               "WHERE r.run_key LIKE 'long-%' LIMIT 1")
    return {
        "runs": "/",
        "a run's trials, first page": run_url(run),
        "a run's trials, by reward descending": run_url(run, sort="reward", desc=1),
        "a run's trials, page 50": run_url(run, page=50),
        "a run's trials, a task glob": run_url(run, task=task[:-2] + "*"),
        "solve matrix": "/matrix",
        "query pass-rate": "/query/pass-rate",
        "query leaderboard": "/query/leaderboard",
        "trial page": trial_url(run, trial),
        f"trial of {LONG_STEPS:,} turns": trial_url(long_run, long_trial),
    }, {f"search {label} {needle!r}": f"/search?q={needle}"
        for label, needle in (("common", COMMON), ("rare", rare), ("absent", ABSENT), ("joined words", JOINED))}


def _measure(command: list[str], pages: dict[str, str],
             rounds: int) -> dict[str, tuple[int, list[float], list[float], int]]:
    """(status of the untimed request, wall ms, server ms, requests not answered 200) of each
    page, asked `rounds` times of the server `command` starts (and stops, with SIGINT, as Ctrl-C
    does)."""
    from bench.run import ROOT

    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        found = _SERVING.search(line)
        if not found:
            raise SystemExit(f"warehouse serve did not start: {line}{server.stderr.read() if server.poll() else ''}")
        # The server logs each request to stderr: read, or its pipe fills and the server waits on it.
        threading.Thread(target=server.stderr.read, daemon=True).start()
        where = urlsplit(found.group(1))
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
        status = {label: _get(conn, path)[0] for label, path in pages.items()}  # the untimed round
        wall: dict[str, list[float]] = {label: [] for label in pages}
        own: dict[str, list[float]] = {label: [] for label in pages}
        failed: dict[str, int] = {}
        for _ in range(rounds):
            for label, path in pages.items():
                if status[label] != 200:
                    continue
                code, seconds, server_ms = _get(conn, path)
                if code != 200:  # the page's time limit, on a loaded machine: said in its row
                    failed[label] = failed.get(label, 0) + 1
                    continue
                wall[label].append(seconds * 1000)
                own[label].append(server_ms)
        conn.close()
    finally:
        server.send_signal(2)  # SIGINT: the server's Ctrl-C
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return {label: (status[label], wall[label], own[label], failed.get(label, 0)) for label in pages}


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, float, float]:
    """(status, wall seconds to the body's last byte, the server's own ms from Server-Timing)."""
    started = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    seconds = time.perf_counter() - started
    timing = re.search(r"app;dur=([\d.]+)", response.getheader("Server-Timing") or "")
    return response.status, seconds, float(timing.group(1)) if timing else float("nan")


if __name__ == "__main__":
    sys.exit("run it as a part of the benchmark: python3 -m bench.run --only serve")
