"""The canned questions on a lake against the same on its warehouse (issue 31, part 5: what the
lake and Spark take over past one machine's database): each canned query and the ad-hoc scan
over every turn, answered by the warehouse (SQLite or PostgreSQL), by DuckDB over the lake and by
Spark in local mode over the lake, in this process, median of N after a warm-up (Spark's JVM
start is paid once, before, and reported apart).

    python -m bench.lake_queries --db WAREHOUSE --lake LAKE [--engines duckdb,spark] [--repeat 3]

LAKE is what `warehouse lake sync` wrote from WAREHOUSE (read only, as is the warehouse).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from bench.queries import _params, median_ms
from bench.scale import AD_HOC_SCAN


def measure(db: str, lake: Path, engines: list[str], repeat: int) -> list[tuple[str, ...]]:
    from warehouse.db.engine import resolve_url
    from warehouse.lake import Lake
    from warehouse.lake.engines import lake_session
    from warehouse.queries import catalog
    from warehouse.queries.registry import run_canned
    from warehouse.readonly import run_readonly

    url = resolve_url(db)
    targets = {"warehouse": url, **{engine: Lake(lake, engine) for engine in engines}}
    run_keys = [row[0] for row in run_canned(url, catalog.QUERIES["runs"]).rows]
    started = {}
    if "spark" in engines:  # the JVM and the session, once per process: not a query's time
        t0 = time.perf_counter()
        run_canned(targets["spark"], catalog.QUERIES["runs"])
        started["spark"] = time.perf_counter() - t0
    rows = []
    for name, query in catalog.QUERIES.items():
        params = _params(query, run_keys)
        ms = {}
        for label, target in targets.items():
            print(f"  lake queries: {name} on {label}", file=sys.stderr)
            ms[label] = median_ms(lambda t=target: run_canned(t, query, params, timeout=3600), repeat, least=1)
        rows.append((f"query {name}", *(ms[label] for label in targets)))

    def scan_on_lake(engine: str):
        def scan():
            with lake_session(Lake(lake, engine), timeout=3600) as session:
                session.fetch(AD_HOC_SCAN)
        return scan

    scans = {"warehouse": lambda: run_readonly(url, AD_HOC_SCAN, {}, max_rows=None, timeout=3600),
             **{engine: scan_on_lake(engine) for engine in engines}}
    rows.append(("sql: every turn's role and characters (ad hoc)",
                 *(median_ms(scans[label], repeat, least=1) for label in targets)))
    header = ("measurement", f"{url.get_backend_name()} (ms)", *(f"{e} on the lake (ms)" for e in engines))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, *values in rows:
        print(f"| {name} | " + " | ".join("–" if math.isnan(v) else f"{v:,.1f}" for v in values) + " |")
    for engine, seconds in started.items():
        print(f"{engine}: session start and first answer {seconds:.1f} s (once per process)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the warehouse the lake was synced from")
    parser.add_argument("--lake", required=True, type=Path, help="its lake folder")
    parser.add_argument("--engines", default="duckdb,spark")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    measure(args.db, args.lake, [e for e in args.engines.split(",") if e], args.repeat)


if __name__ == "__main__":
    main()
