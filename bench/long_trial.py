"""What a trajectory's length costs: one trace trial of 1,000 to 20,000 agent steps
(tools.long_trial) ingested whole-process, on both backends, with its floor.

The floor (`python -m bench.long_trial floor TRIAL DB`) is the least work that stores the
trajectory: start-up, its trajectory.json parsed, each step's message and observation a row
(index, role, text, the step's other fields as JSON) inserted into a plain SQLite table. It stores each turn once, as the
warehouse now does; storing every episode's turns, as Harbor's export and the warehouse before
issue 26 did, costs the square of the steps.

Each measure (time, peak memory, database bytes, stored turn rows) is fitted to a line in the
steps by least squares: the slope is the cost of a step, and the largest distance of a point
from the line, as a share of its value, says how straight it is.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

STEPS = (1_000, 2_000, 5_000, 20_000)
EXPORTED = 2_000  # the trial whose every episode `export hub` writes


def floor(trial_dir: Path, db: Path) -> None:
    data = json.loads((trial_dir / "agent" / "trajectory.json").read_text())
    rows = []
    for step in data["steps"]:
        rest = {k: v for k, v in step.items() if k not in ("source", "message", "observation")}
        rows.append((len(rows), step["source"], step.get("message"), json.dumps(rest)))
        for result in (step.get("observation") or {}).get("results", ()):
            rows.append((len(rows), "observation", result.get("content"), json.dumps(result.get("source_call_id"))))
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE turns (idx INTEGER PRIMARY KEY, role TEXT, content TEXT, extra TEXT)")
    conn.executemany("INSERT INTO turns VALUES (?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(slope, intercept, the largest |residual| / value) of the least-squares line."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    worst = max(abs(y - (intercept + slope * x)) / y for x, y in zip(xs, ys))
    return slope, intercept, worst


def results(work: Path, args) -> list[tuple[str, str, str, str]]:
    from bench.run import _drop_postgres, _remove_sqlite, median, peak_rss_of, warehouse_command
    from tools.long_trial import write_trial

    root = work / "long"
    jobs = {}
    for steps in STEPS:
        job = root / f"long-{steps}-steps"
        if not job.exists():
            write_trial(root, steps)
        jobs[steps] = job
    rows: list[tuple[str, str, str, str]] = []
    measured: dict[str, dict[int, tuple[float, float, float, int]]] = {"SQLite": {}, "PostgreSQL": {}}
    for steps, job in jobs.items():
        trial = next(p for p in job.iterdir() if p.is_dir())
        ours, floor_db = work / "long.db", work / "long-floor.db"
        runs = {"ours": [], "floor": []}
        for _ in range(args.repeat):  # the two taking turns
            _remove_sqlite(ours)
            runs["ours"].append(peak_rss_of(warehouse_command("--db", str(ours), "ingest", str(job))))
            _remove_sqlite(floor_db)
            runs["floor"].append(peak_rss_of([sys.executable, "-m", "bench.long_trial", "floor", str(trial),
                                              str(floor_db)]))
        with sqlite3.connect(ours) as conn:
            stored = conn.execute("SELECT count(*) FROM conversation_turns").fetchone()[0]
        s, rss = median([r[0] for r in runs["ours"]]), median([r[1] for r in runs["ours"]])
        fs, frss = median([r[0] for r in runs["floor"]]), median([r[1] for r in runs["floor"]])
        size = ours.stat().st_size
        measured["SQLite"][steps] = (s, rss, size, stored)
        rows.append((f"long trial, {steps:,} steps → SQLite, whole process",
                     f"{s:.2f} s, {rss:.0f} MB, {size / 1e6:.1f} MB file, {stored:,} turn rows",
                     f"floor {fs:.2f} s, {frss:.0f} MB, {floor_db.stat().st_size / 1e6:.1f} MB",
                     f"{s / fs:.2f}× floor time"))
        if args.pg:
            measured["PostgreSQL"][steps] = _postgres(job, args, warehouse_command, peak_rss_of, median,
                                                      _drop_postgres)
            s, rss, size, stored = measured["PostgreSQL"][steps]
            rows.append((f"long trial, {steps:,} steps → PostgreSQL, whole process",
                         f"{s:.2f} s, {rss:.0f} MB, {size / 1e6:.1f} MB of tables, {stored:,} turn rows", "", ""))
    # Harbor's all-episodes rows of a trajectory repeat its prefixes (n²/2 turns in the output):
    # the export reads each conversation once and holds a row group at a time.
    db, out = work / "long-export.db", work / "long-export"
    _remove_sqlite(db)
    subprocess.run(warehouse_command("--db", str(db), "ingest", str(jobs[EXPORTED])), check=True, capture_output=True)
    shutil.rmtree(out, ignore_errors=True)
    seconds, rss = peak_rss_of(warehouse_command("--db", str(db), "export", "hub", str(out)))
    rows.append((f"export hub, all {EXPORTED:,} episodes of the {EXPORTED:,}-step trial (SQLite), whole process",
                 f"{seconds:.2f} s", "", f"peak RSS {rss:.0f} MB; {EXPORTED * (EXPORTED + 2):,} turns written"))
    for backend, points in measured.items():
        if not points:
            continue
        xs = [float(steps) for steps in points]
        fits = [_fit(xs, [float(p[i]) for p in points.values()]) for i in range(4)]
        (ts, _, tw), (rs, _, rw), (bs, _, bw), (ns, _, nw) = fits
        rows.append((f"long trial → {backend}: cost of 1,000 more steps (least squares, 1k–20k)",
                     f"{ts * 1000:.2f} s, {rs * 1000:.1f} MB RSS, {bs * 1000 / 1e6:.2f} MB, {ns * 1000:,.0f} turn rows",
                     "", f"farthest point off the line: time {tw:.0%}, RSS {rw:.0%}, size {bw:.0%}, rows {nw:.0%}"))
    return rows


def _postgres(job: Path, args, warehouse_command, peak_rss_of, median, drop) -> tuple[float, float, float, int]:
    import psycopg
    from sqlalchemy.engine import make_url

    admin = make_url(args.pg)
    runs, size, stored = [], 0, 0
    for _ in range(args.repeat):
        name = f"wh_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = admin.set(database=name).render_as_string(hide_password=False)
        try:
            runs.append(peak_rss_of(warehouse_command("--db", url, "ingest", str(job))))
            with psycopg.connect(url) as conn:
                size = conn.execute("""SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
                                       JOIN pg_namespace n ON n.oid = c.relnamespace
                                       WHERE n.nspname = 'public' AND c.relkind = 'r'""").fetchone()[0]
                stored = conn.execute("SELECT count(*) FROM conversation_turns").fetchone()[0]
        finally:
            drop(args.pg, name)
    return median([r[0] for r in runs]), median([r[1] for r in runs]), float(size), stored


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        floor(Path(sys.argv[2]), Path(sys.argv[3]))
