"""What keeping a lake current costs (issue 31): `warehouse lake sync` of a whole warehouse into a
new lake, then a one-run ingest and the sync after it, each a whole process. The bar: the sync
after a one-run ingest into math×20 takes time proportional to that run, not the warehouse, so
it is set beside the ingest of the same run (which costs the same however much the warehouse
holds) and beside the full sync.

    python -m bench.lake --db WAREHOUSE --run RUN_DATA --out LAKE [--repeat 3] [--iceberg CATALOG]

WAREHOUSE is written (RUN_DATA is ingested into it): give a copy (`warehouse db copy`, or cp of a
SQLite file), never a warehouse to keep. LAKE must be missing or empty; it is left as synced.
The figures: the full sync, the ingest, the sync after it (the runs and files it wrote), a sync
with nothing new, and the incremental sync's share of the full one. With --iceberg, every sync
publishes the lake's tables to that Iceberg catalog too (a new SQLite file, say).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _warehouse(*args: str) -> list[str]:
    return [sys.executable, "-m", "warehouse", *args]


def _timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return elapsed, done


def _sync(db: str, out: Path, iceberg: str | None) -> tuple[float, dict]:
    publish = ["--iceberg", iceberg] if iceberg else []
    elapsed, done = _timed(_warehouse("--db", db, "lake", "sync", str(out), "--json", *publish))
    return elapsed, json.loads(done.stdout)


def _trials(db: str) -> int:
    done = subprocess.run(_warehouse("--db", db, "sql", "SELECT count(*) AS n FROM trials", "--format", "csv"),
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def measure(db: str, run_data: str | Path, out: Path, repeat: int = 1,
            iceberg: str | None = None) -> list[tuple[str, str]]:
    """Time (whole process) a full sync of `db` into `out`, the ingest of `run_data`, the sync
    after it, and a sync with nothing new; the figures, also printed. `repeat` > 1 repeats the
    full sync (into fresh folders beside `out`) and the nothing-new sync, reporting medians; the
    ingest and its sync happen once (a second ingest would load nothing)."""
    trials_before = _trials(db)
    full_times = []
    for i in range(repeat):
        target = out if i == repeat - 1 else out.with_name(f"{out.name}-full-{i}")
        elapsed, full = _sync(db, target, iceberg if target == out else None)
        full_times.append(elapsed)
    full_s = sorted(full_times)[len(full_times) // 2]
    ingest_s, _ = _timed(_warehouse("--db", db, "ingest", str(run_data)))
    incremental_s, incremental = _sync(db, out, iceberg)
    idle = sorted(_sync(db, out, iceberg)[0] for _ in range(repeat))[repeat // 2]
    trials_after = _trials(db)
    rows = [
        ("warehouse", f"{trials_before} trials before, {trials_after} after ({trials_after - trials_before} new)"),
        ("full sync (whole process)", f"{full_s:.2f} s, {full['files_written']} files, "
                                      f"{full['bytes_written'] / 1e6:.1f} MB"),
        ("ingest of the run (whole process)", f"{ingest_s:.2f} s"),
        ("sync after it (whole process)", f"{incremental_s:.2f} s: {len(incremental['runs_new'])} new, "
                                          f"{len(incremental['runs_changed'])} changed, {incremental['runs_unchanged']} "
                                          f"unchanged runs; {incremental['files_written']} files, "
                                          f"{incremental['bytes_written'] / 1e6:.1f} MB"),
        ("sync with nothing new (whole process)", f"{idle:.2f} s"),
        ("sync after the ingest / full sync", f"{incremental_s / full_s:.2f}×"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the warehouse (a copy: the run is ingested into it)")
    parser.add_argument("--run", required=True, help="what to ingest as the one new run")
    parser.add_argument("--out", required=True, type=Path, help="the lake folder (missing or empty)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--iceberg", help="an Iceberg catalog every sync of OUT publishes to (lake sync --iceberg)")
    args = parser.parse_args()
    measure(args.db, args.run, args.out, args.repeat, args.iceberg)


if __name__ == "__main__":
    main()
