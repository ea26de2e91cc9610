"""What an ingest costs as the data grows, and against what a user would otherwise run
(`--only scale`; issue 31). Every figure is a whole process, `python -m warehouse ingest` from
start-up to exit, into a new, empty SQLite file or PostgreSQL database (the first ingest
creates the schema too):

- at 1× (the math profile), ours against the least-work floor and the pandas path
  (bench.least_floor), the three taking turns;
- ours at 1×, 5× and 20× (math, math-x5 and math-x20: 15,651 / 78,255 / 313,020 trials),
  the scales taking turns: seconds, per trial, the database's size and the process's peak
  resident memory (the reader process it forks included);
- on each scale's warehouse, every canned query and one ad-hoc scan over every turn, in this
  process (execute and fetch; BENCHMARKS.md's 10⁸-turn section extrapolates from these).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

SCALES = {"1×": "math", "5×": "math-x5", "20×": "math-x20"}
# math×20: twenty runs of the math profile's tasks in sixteen shards (2.4 GB of text).
MATH_X20 = dict(episodes="last", shards=16, seed=4, runs=20, rl=False)


def results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    data = {**data, "math-x20": _math_x20(data["math"].parent / "math-x20")}
    rows: list[tuple[str, str, str, str]] = []
    backends = [("SQLite", None)] + ([("PostgreSQL", args.pg)] if args.pg else [])
    for backend, pg in backends:
        rows += _against_floors(data["math"], work, pg, backend, args.repeat)
    for backend, pg in backends:
        rows += _scales(data, work, pg, backend, max(1, args.repeat - 1))
    return rows


def floors(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    """`--only floors`: the 1× rows alone (ours against the least-work floor and pandas), the
    minutes the 5× and 20× loads take left out."""
    backends = [("SQLite", None)] + ([("PostgreSQL", args.pg)] if args.pg else [])
    return [row for backend, pg in backends for row in _against_floors(data["math"], work, pg, backend, args.repeat)]


def _math_x20(target: Path) -> Path:
    from tools.generate import generate_dataset

    marker = target / ".generated.json"
    if not (marker.exists() and json.loads(marker.read_text()).get("kwargs") == MATH_X20):
        print("  scale: generating math-x20 …", file=sys.stderr)
        g = generate_dataset(target, "math", **MATH_X20)
        marker.write_text(json.dumps(dict(kwargs=MATH_X20, rows=g.n_rows, turns=g.n_turns, text_bytes=g.text_bytes,
                                          distinct_text_bytes=g.distinct_text_bytes)))
    return target


@contextlib.contextmanager
def _empty_target(work: Path, name: str, pg: str | None):
    """A new SQLite path (nothing there) or a new, empty PostgreSQL database (no schema)."""
    from bench.run import _drop_postgres, _remove_sqlite

    if pg is None:
        path = work / f"{name}.db"
        _remove_sqlite(path)
        try:
            yield str(path)
        finally:
            _remove_sqlite(path)
        return
    import psycopg
    from sqlalchemy.engine import make_url

    admin = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    made = f"wh_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{made}"')
    try:
        yield make_url(admin).set(database=made).render_as_string(hide_password=False)
    finally:
        _drop_postgres(admin, made)


# Run by a small Python of its own, which starts the command and waits for it: Linux gives an
# exec'd process the peak memory of the one it was spawned from as its own starting peak, so a
# command started by this process (grown by the generator and the queries' results to hundreds of
# MB) would report at least that much.
_MEASURED = """
import os, sys, time
started = time.perf_counter()
pid = os.posix_spawn(sys.executable, sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(f"\\n{time.perf_counter() - started} {usage.ru_maxrss}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak resident KiB of the process and the children it waited for) of a
    Python command."""
    from bench.run import ROOT

    assert command[0] == sys.executable
    done = subprocess.run([sys.executable, "-c", _MEASURED, *command], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    seconds, peak = stderr.strip().rsplit("\n", 1)[-1].split()
    return float(seconds), int(peak)


def _size(target: str) -> int:
    if not target.startswith("postgresql"):
        return sum(Path(f"{target}{s}").stat().st_size for s in ("", "-wal") if Path(f"{target}{s}").exists())
    import psycopg

    with psycopg.connect(target) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])


def _against_floors(dataset: Path, work: Path, pg: str | None, backend: str,
                    repeat: int) -> list[tuple[str, str, str, str]]:
    from bench.run import warehouse_command

    def commands(target: str) -> dict[str, list[str]]:
        return {
            "ours": warehouse_command("--db", target, "ingest", str(dataset)),
            "least": [sys.executable, "-m", "bench.least_floor", "least", str(dataset), target],
            "pandas": [sys.executable, "-m", "bench.least_floor", "pandas", str(dataset), target],
        }

    times: dict[str, list[float]] = {"ours": [], "least": [], "pandas": []}
    for i in range(repeat):
        for method in times:  # taking turns: the machine's drift meets each alike
            with _empty_target(work, f"floor-{method}", pg) as target:
                print(f"  scale: {method} math → {backend} ({i + 1}/{repeat})", file=sys.stderr)
                times[method].append(_run(commands(target)[method])[0])
    ours, least, pandas = (statistics.median(times[m]) for m in ("ours", "least", "pandas"))
    return [
        (f"ingest math → {backend}, whole process, new database", f"{ours:.2f} s",
         f"least-work floor {least:.2f} s; pandas {pandas:.2f} s",
         f"{ours / least:.2f}× the floor; {ours / pandas:.2f}× pandas"),
    ]


def _scales(data: dict[str, Path], work: Path, pg: str | None, backend: str,
            repeat: int) -> list[tuple[str, str, str, str]]:
    from bench.run import warehouse_command

    trials = {scale: json.loads((data[name] / ".generated.json").read_text())["rows"]
              for scale, name in SCALES.items()}
    seen: dict[str, list[tuple[float, int, int]]] = {scale: [] for scale in SCALES}
    queried: dict[str, dict[str, float]] = {}
    for i in range(repeat):
        for scale, name in SCALES.items():
            with _empty_target(work, f"scale-{name}", pg) as target:
                print(f"  scale: ours {name} → {backend} ({i + 1}/{repeat})", file=sys.stderr)
                seconds, rss = _run(warehouse_command("--db", target, "ingest", str(data[name])))
                seen[scale].append((seconds, rss, _size(target)))
                if i == repeat - 1:  # the queries, on the last round's warehouse of each scale
                    print(f"  scale: queries on {name} → {backend}", file=sys.stderr)
                    queried[scale] = _queries(target)
    rows = []
    first = None
    for scale, runs in seen.items():
        seconds = statistics.median(s for s, _, _ in runs)
        per_trial = seconds / trials[scale] * 1000
        first = first or per_trial
        rss = max(r for _, r, _ in runs) / 1024
        size = runs[-1][2] / 1e6
        # Each round's own ratio too (its 1× ran minutes before): the machine's speed drifts
        # between rounds by more than the ratio's distance from 1.
        rounds = sorted((s / trials[scale]) / (one / trials["1×"]) for (s, _, _), (one, _, _)
                        in zip(runs, seen["1×"]))
        spread = f" (rounds {rounds[0]:.2f}–{rounds[-1]:.2f}×)" if scale != "1×" else ""
        rows.append((f"ingest math {scale} → {backend}, whole process, new database",
                     f"{seconds:.1f} s ({per_trial:.3f} ms a trial)",
                     f"{trials[scale]:,} trials; {size:,.0f} MB; peak RSS {rss:,.0f} MB",
                     f"{per_trial / first:.2f}× the per-trial cost at 1×{spread}"))
    for name in queried["1×"]:
        ms = {scale: queried[scale][name] for scale in SCALES}
        rows.append((f"{name} on math 1× / 5× / 20× ({backend}), in process",
                     " / ".join("–" if ms[scale] != ms[scale] else f"{ms[scale]:.1f}" for scale in SCALES) + " ms",
                     "execute and fetch, median of 5 after a warm-up",
                     f"5× → 20×: {ms['20×'] / ms['5×']:.1f}× the time for 4× the data"))
    return rows


# A question no canned query asks, over every stored turn: what `warehouse sql` users write.
AD_HOC_SCAN = ("SELECT ct.role, count(*) AS turns, sum(m.n_chars) AS chars FROM conversation_turns ct "
               "JOIN messages m ON m.id = ct.message_id GROUP BY ct.role ORDER BY ct.role")


def _queries(target: str) -> dict[str, float]:
    """Each canned query (its default parameters; compare and compare-test on the first two
    runs) and the ad-hoc scan, milliseconds to execute and fetch, in this process."""
    from bench.queries import _params, median_ms
    from warehouse.db.engine import resolve_url
    from warehouse.queries import catalog
    from warehouse.queries.registry import run_canned
    from warehouse.readonly import run_readonly

    url = resolve_url(target)
    run_keys = [row[0] for row in run_canned(url, catalog.QUERIES["runs"]).rows]
    out = {}
    for name, query in catalog.QUERIES.items():
        if {"a", "b"} <= {p.name for p in query.params} and len(run_keys) < 2:
            out[f"query {name}"] = float("nan")  # math 1× holds one run: nothing to compare
            continue
        out[f"query {name}"] = median_ms(lambda q=query: run_canned(url, q, _params(q, run_keys)), 5)
    out["sql: every turn's role and characters (ad hoc)"] = median_ms(
        lambda: run_readonly(url, AD_HOC_SCAN, {}, max_rows=None, timeout=600), 5)
    return out


if __name__ == "__main__":
    sys.exit("run it as a part of the benchmark: python3 -m bench.run --only scale")
