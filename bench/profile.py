"""Where an ingest's time goes: the writer's process under cProfile, then the reader's work
(reading and preparing the shards) under cProfile on its own, then (SQLite) the bound of this
design: what an ingest would take if the writer had nothing left to do but execute rows.

    python -m bench.profile [--dataset math] [--pg postgresql://…] [--top 15]

Uses the datasets bench.run generated (bench/out/data/NAME). In the writer's profile, time
spent waiting for the reader shows up as `posix.read` (the pipe) and waiting for PostgreSQL
as `wait` (psycopg); the reader's own threads are not in it, hence its separate profile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pickle
import pstats
import sys
import time
from pathlib import Path

from bench.run import ROOT, _drop_postgres, _fresh_postgres, _fresh_sqlite, _shards


def _top(profile: cProfile.Profile, n: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


def writer_profile(dataset: Path, pg: str | None, top: int) -> None:
    from ingest.pipeline import ingest

    if pg:
        engine, name, admin = _fresh_postgres(pg)
    else:
        engine = _fresh_sqlite(ROOT / "bench" / "out" / "work" / "profile.db")
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    summary = ingest(engine, [str(dataset)])
    engine.dispose()
    profile.disable()
    seconds = time.perf_counter() - started
    if pg:
        _drop_postgres(admin, name)
    assert not summary.errors, summary.errors
    print(f"== writer process: {dataset.name} into {'PostgreSQL' if pg else 'SQLite'}, {seconds:.2f} s "
          "(under the profiler)")
    print(_top(profile, top))


def reader_profile(dataset: Path, top: int) -> None:
    from ingest.pipeline import _prepared_batches

    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    pickled = sum(len(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
                  for shard in _shards(dataset) for batch in _prepared_batches(shard, dataset.name, None))
    profile.disable()
    seconds = time.perf_counter() - started
    print(f"== reader's work alone: {dataset.name}, {seconds:.2f} s, {pickled / 1e6:.0f} MB pickled for the writer "
          "(main thread only: the Arrow read-ahead thread is not profiled)")
    print(_top(profile, top))


_BOUND_TABLES: list[tuple[str, tuple, list]] = []


def _bound_batches(n_batches: int):
    for i in range(n_batches):
        yield [(name, cols, data[i * len(data) // n_batches:(i + 1) * len(data) // n_batches])
               for name, cols, data in _BOUND_TABLES]


def execute_only_bound(dataset: Path, repeat: int = 3) -> None:
    """The ingest's two-process design with the writer's work cut to the bone: the reader
    process sends the floor's rows (ids assigned) and the provenance rows in batches as the
    ingest's are, and the writer only runs executemany, the summary refresh and the commit.
    Against the sqlite3 floor measured in the same process: the least this design can cost."""
    from sqlalchemy import text

    from bench import floors
    from ingest.worker import Reader
    from ingest.writer import ensure_source
    from warehouse import summaries
    from warehouse.db.session import write_transaction

    rows = floors.normalize(_shards(dataset), dataset.name)
    provenance = [("episode_loads", ("load_id", "row_number", "episode_id"),
                   [(1, i, episode[0]) for i, episode in enumerate(rows.episodes)]),
                  ("trial_loads", ("trial_id", "load_id"), [(trial[0], 1) for trial in rows.trials])]
    # The reader process is forked at its first job and inherits the rows from here.
    _BOUND_TABLES[:] = [*rows.tables(), *provenance]
    n_batches = max(1, len(rows.episodes) // 128)  # the ingest's batch size

    db = ROOT / "bench" / "out" / "work" / "bound.db"
    bound, floor = [], []
    for _ in range(repeat):
        engine = _fresh_sqlite(db)
        source_id = ensure_source(engine, "parquet", "bound", "bound")
        started = time.perf_counter()
        with Reader() as reader, write_transaction(engine, check_references=False) as conn:
            conn.execute(text(
                "INSERT INTO loads (id, source_id, unit, content_hash, status, started_at, finished_at, tool_version, "
                "n_rows, n_trials, n_episodes_new, n_episodes_duplicate, n_conflicts, n_rejected, n_turns, n_bytes) "
                "VALUES (1, :source, 'bound', 'bound', 'loading', '2026-01-01', '2026-01-01', '-', 0, 0, 0, 0, 0, 0, "
                "0, 0)"), {"source": source_id})
            cur = conn.connection.driver_connection.cursor()
            for batch in reader.run(_bound_batches, n_batches):
                for name, cols, data in batch:
                    cur.executemany(f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                    data)
            summaries.refresh(conn, 1, [trial[0] for trial in rows.trials])
            conn.execute(text("UPDATE loads SET status = 'loaded' WHERE id = 1"))
        engine.dispose()
        bound.append(time.perf_counter() - started)
        _fresh_sqlite(db).dispose()
        started = time.perf_counter()
        floors.sqlite_floor(rows, db)
        floor.append(time.perf_counter() - started)
    b, f = sorted(bound)[len(bound) // 2], sorted(floor)[len(floor) // 2]
    print(f"== bound of the design: {dataset.name} into SQLite, rows ready, writer only executes: {b:.2f} s; "
          f"sqlite3 floor {f:.2f} s; {b / f:.2f}x (medians of {repeat})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="math")
    parser.add_argument("--pg")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    dataset = ROOT / "bench" / "out" / "data" / args.dataset
    if not dataset.exists():
        sys.exit(f"{dataset}: not generated yet; run python -m bench.run first")
    writer_profile(dataset, args.pg, args.top)
    reader_profile(dataset, args.top)
    if not args.pg:
        execute_only_bound(dataset)


if __name__ == "__main__":
    main()
