"""Where an ingest's time goes: the writer's process under cProfile, then the reader's work
(reading and preparing the shards) under cProfile on its own.

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


if __name__ == "__main__":
    main()
