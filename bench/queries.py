"""Each canned query on the loaded warehouse against DuckDB answering the same question over
the raw Parquet files: what a user would do without us.

Both sides are timed in this process, execute and fetch, median of several runs after one
warm-up (the file cache is warm for both)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

# DuckDB's version of each canned query over the Hub rows (one row per trial: episodes=last).
# A row's run is its run_id; success is a numeric result >= 1.0, as the warehouse's default.
DUCKDB = {
    "runs": """
        SELECT run_id, count(*) AS trials, avg(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1.0 ELSE 0 END),
               avg(try_cast(result AS DOUBLE)), count(*) FILTER (WHERE result IS NOT NULL
               AND try_cast(result AS DOUBLE) IS NULL), string_agg(DISTINCT agent, ', '),
               string_agg(DISTINCT model, ', '), min(date), max(date)
        FROM rows GROUP BY run_id ORDER BY run_id""",
    "pass-rate": """
        SELECT run_id, count(*), sum(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1 ELSE 0 END),
               avg(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1.0 ELSE 0 END), avg(try_cast(result AS DOUBLE))
        FROM rows GROUP BY run_id ORDER BY run_id""",
    "solve-matrix": """
        SELECT task, run_id, count(*) AS attempts,
               sum(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1 ELSE 0 END) AS successes
        FROM rows GROUP BY task, run_id ORDER BY task, run_id""",
    "pass-at-k": """
        WITH nc AS (
            SELECT run_id, task, count(*) AS n,
                   sum(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1 ELSE 0 END) AS c
            FROM rows GROUP BY run_id, task),
        ks AS (SELECT unnest([1, 5, 10]) AS k)
        SELECT run_id, k, avg(CASE WHEN n < k THEN NULL WHEN n - c < k THEN 1.0
                                   ELSE 1 - exp(lgamma(n - c + 1) - lgamma(n - c - k + 1)
                                                - lgamma(n + 1) + lgamma(n - k + 1)) END)
        FROM nc, ks GROUP BY run_id, k ORDER BY run_id, k""",
    "compare": """
        WITH per AS (
            SELECT task, run_id, max(CASE WHEN try_cast(result AS DOUBLE) >= 1 THEN 1 ELSE 0 END) AS solved
            FROM rows WHERE run_id IN ($a, $b) GROUP BY task, run_id)
        SELECT task, max(solved) FILTER (WHERE run_id = $a), max(solved) FILTER (WHERE run_id = $b)
        FROM per GROUP BY task ORDER BY task""",
    "failures": """
        SELECT run_id, result, count(*) FROM rows
        WHERE result IS NOT NULL AND try_cast(result AS DOUBLE) IS NULL
        GROUP BY run_id, result ORDER BY run_id, 3 DESC""",
    "lengths": """
        WITH per AS (
            SELECT run_id, len(conversations) AS turns,
                   list_sum(list_transform(conversations, lambda m: length(m.content))) AS chars
            FROM rows)
        SELECT run_id, median(turns), quantile_cont(turns, 0.9), max(turns),
               median(chars), quantile_cont(chars, 0.9), max(chars)
        FROM per GROUP BY run_id ORDER BY run_id""",
}
# compare-test's input is compare's; its test and bootstrap are Python's, which DuckDB's side leaves out.
DUCKDB["compare-test"] = DUCKDB["compare"]


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(max(repeat, 5)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def compare(db: Path, dataset: Path, repeat: int) -> list[tuple[str, str, str, str]]:
    import duckdb

    from warehouse.db.engine import resolve_url
    from warehouse.queries import catalog
    from warehouse.queries.registry import run_canned

    url = resolve_url(str(db))
    runs = run_canned(url, catalog.QUERIES["runs"]).rows
    a, b = runs[0][0], runs[1][0]
    params = {"compare": {"a": a, "b": b}, "compare-test": {"a": a, "b": b}}

    duck = duckdb.connect()
    files = str(dataset / "data" / "*.parquet")
    view = f"CREATE VIEW rows AS SELECT * FROM read_parquet('{files}')"
    duck.execute(view)
    results = []
    for name, query in catalog.QUERIES.items():
        ours = median_ms(lambda: run_canned(url, query, params.get(name, {})), repeat)
        sql = DUCKDB[name]
        duck_params = {"a": a, "b": b} if name in params else None
        theirs = median_ms(lambda: duck.execute(sql, duck_params).fetchall(), repeat)
        results.append((f"query {name} (SQLite, math×5)", f"{ours:.1f} ms", f"DuckDB on Parquet {theirs:.1f} ms",
                        f"{ours / theirs:.2f}× DuckDB's time"))
    return results
