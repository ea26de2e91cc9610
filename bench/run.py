"""The benchmark: generate the datasets, measure every method in its own process several
times, print medians and ratios against baselines measured in the same run, and write
BENCHMARKS.md.

    python -m bench.run [--repeat 3] [--pg postgresql://user@host/db] [--out bench/out]

PostgreSQL methods run when --pg (or $WAREHOUSE_BENCH_PG_URL) names a database whose user may
create databases; each measurement gets a fresh database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

from bench import copy, long_trial, scale, serve, watch

ROOT = Path(__file__).resolve().parents[1]

DATASETS = {
    # name: (profile, generator arguments)
    "math": ("math", dict(episodes="last", shards=1, seed=1)),
    "tb": ("tb", dict(episodes="last", shards=1, seed=2)),
    "tb-all": ("tb", dict(episodes="all", shards=1, seed=2)),
    # The math export five times over: five runs (checkpoints) of the same tasks, four shards.
    "math-x5": ("math", dict(episodes="last", shards=4, seed=3, runs=5, rl=False)),
}

# Trial folders in the trace-directory dataset: one Harbor job, each trial a unit of its own.
TRACE_TRIALS = 300

# --- children: one measurement each, reported as one JSON line on stdout ----------------------


def _shards(dataset: Path) -> list[Path]:
    return sorted((dataset / "data").glob("*.parquet"))


def _remove_sqlite(path: Path) -> None:
    """A SQLite file gone, with the -wal and -shm beside it."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _fresh_sqlite(path: Path):
    from warehouse.db import schema
    from warehouse.db.engine import make_engine, resolve_url

    _remove_sqlite(path)
    engine = make_engine(resolve_url(str(path)))
    schema.upgrade(engine)
    return engine


def _fresh_postgres(admin_url: str):
    import psycopg
    from sqlalchemy.engine import make_url

    from warehouse.db import schema
    from warehouse.db.engine import make_engine, resolve_url

    name = f"wh_bench_{uuid.uuid4().hex[:10]}"
    admin = make_url(admin_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url).set(drivername="postgresql+psycopg", database=name)
    engine = make_engine(resolve_url(url.render_as_string(hide_password=False)))
    schema.upgrade(engine)
    return engine, name, admin


@contextlib.contextmanager
def fresh_warehouse_url(work: Path, name: str, pg: str | None):
    """The URL of a new, empty place for a warehouse: the SQLite file work/name (any old one
    removed), or with `pg` (an admin URL) a new PostgreSQL database, dropped after."""
    if pg is None:
        _remove_sqlite(work / name)
        yield str(work / name)
        return
    engine, made, admin = _fresh_postgres(pg)
    url = engine.url.render_as_string(hide_password=False)
    engine.dispose()
    try:
        yield url
    finally:
        _drop_postgres(admin, made)


def _drop_postgres(admin: str, name: str) -> None:
    import psycopg

    from warehouse.db.roles import reader_role

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f"DROP ROLE IF EXISTS {reader_role(name)}")  # its reader, which upgrade made


def child(method: str, dataset: Path, work: Path, pg: str | None) -> dict:
    from bench import floors
    from ingest.pipeline import ingest

    shards = _shards(dataset)
    db = work / f"{method}.db"
    result: dict = {}
    # Closing the connections is inside the clock, as the floors' is: no work (a last WAL
    # checkpoint) can hide after it.
    if method == "warehouse-sqlite":
        engine = _fresh_sqlite(db)
        t0 = time.perf_counter()
        summary = ingest(engine, [str(dataset)])
        engine.dispose()
        result["seconds"] = time.perf_counter() - t0
        assert not summary.errors, summary.errors
        result["db_bytes"] = db.stat().st_size
    elif method == "warehouse-postgres":
        engine, name, admin = _fresh_postgres(pg)
        t0 = time.perf_counter()
        summary = ingest(engine, [str(dataset)])
        engine.dispose()
        result["seconds"] = time.perf_counter() - t0
        assert not summary.errors, summary.errors
        result["db_bytes"] = _postgres_table_bytes(engine.url.set(drivername="postgresql")
                                                   .render_as_string(hide_password=False))
        _drop_postgres(admin, name)
    elif method in ("floor-sqlite", "floor-postgres"):
        rows = floors.normalize(shards, dataset.name)
        if method == "floor-sqlite":
            _fresh_sqlite(db).dispose()
            t0 = time.perf_counter()
            floors.sqlite_floor(rows, db)
            result["seconds"] = time.perf_counter() - t0
            result["db_bytes"] = db.stat().st_size
        else:
            engine, name, admin = _fresh_postgres(pg)
            url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
            engine.dispose()
            t0 = time.perf_counter()
            floors.postgres_floor(rows, url)
            result["seconds"] = time.perf_counter() - t0
            _drop_postgres(admin, name)
        result["distinct_text_bytes"] = floors.distinct_text_bytes(rows)
    elif method == "bound-sqlite":
        rows = floors.normalize(shards, dataset.name)
        result["seconds"] = floors.sqlite_writer_bound(rows, _fresh_sqlite(db))
    elif method == "pandas-sqlite":
        _remove_sqlite(db)
        t0 = time.perf_counter()
        floors.pandas_path(shards, db)
        result["seconds"] = time.perf_counter() - t0
    else:
        raise SystemExit(f"unknown method {method}")
    return result


# --- the parent: orchestration and the report -----------------------------------------------


def run_child(method: str, dataset: Path, work: Path, pg: str | None) -> dict:
    cmd = [sys.executable, "-m", "bench.run", "--child", method, "--dataset", str(dataset), "--work", str(work)]
    if pg:
        cmd += ["--pg", pg]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{method} on {dataset.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_rss_of(cmd: list[str]) -> tuple[float, float]:
    """Run cmd; its wall time and the peak memory of it and its descendants together (the
    ingest's reader process included), sampled every few milliseconds."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.005)
    seconds = time.perf_counter() - started
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return seconds, peak / 1024


def _tree_rss_kib(pid: int) -> int:
    """Memory of pid and all its descendants, in KiB (0 for a process that is gone): the sum
    of their proportional set sizes, so pages a forked reader shares with its parent count
    once, not twice."""
    try:
        status = Path(f"/proc/{pid}/smaps_rollup").read_text()
        total = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Pss:")), 0)
        children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return 0
    return total + sum(_tree_rss_kib(c) for c in children)


def median(values: list[float]) -> float:
    return statistics.median(values)


def generate(out: Path) -> dict[str, dict]:
    from tools.generate import generate_dataset

    info = {}
    for name, (profile, kwargs) in DATASETS.items():
        target = out / "data" / name
        marker = target / ".generated.json"
        if marker.exists() and json.loads(marker.read_text()).get("kwargs") == kwargs:
            info[name] = json.loads(marker.read_text())
            continue
        shutil.rmtree(target, ignore_errors=True)
        g = generate_dataset(target, profile, **kwargs)
        info[name] = dict(kwargs=kwargs, rows=g.n_rows, turns=g.n_turns, text_bytes=g.text_bytes,
                          distinct_text_bytes=g.distinct_text_bytes)
        marker.write_text(json.dumps(info[name]))
    traces = out / "data" / "traces"
    if not (traces / ".generated").exists():
        shutil.rmtree(traces, ignore_errors=True)
        sys.path.insert(0, str(ROOT / "tests"))
        from trace_trees import make_trace_tree  # the tests' generator of Harbor job and trial folders

        make_trace_tree(traces, seed=1, job_trials=TRACE_TRIALS, rl_trials=0, with_fixtures=False)
        (traces / ".generated").write_text("")
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg", default=os.environ.get("WAREHOUSE_BENCH_PG_URL"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--child")
    parser.add_argument("--dataset", type=Path)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--no-write", action="store_true", help="print the table, leave BENCHMARKS.md alone")
    parser.add_argument("--only", choices=sorted(PARTS), action="append",
                        help="measure only these parts (repeatable): whole-process rows, the canned "
                             "queries, or the viewer's pages (serve); prints, writes nothing")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dataset, args.work, args.pg)))
        return
    sqlite_utils_command()  # missing: said now, not after minutes of measuring

    out: Path = args.out
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    print("generating datasets …", file=sys.stderr)
    info = generate(out)
    data = {name: out / "data" / name for name in DATASETS}
    results = _Results()  # (measurement, median, baseline, ratio), echoed to stderr as they come

    # What a user waits for, whole processes from the command to the prompt: the headline rows.
    compile_bytecode()
    for name in args.only or WHOLE_PROCESS:
        results.extend(PARTS[name](data, work, args))
    if args.only:  # a partial table: printed, not written
        args.no_write = True
        report(results, info, args)
        return

    def measure(method: str, dataset: str) -> list[dict]:
        return measure_together([method], dataset)[method]

    def measure_together(methods: list[str], dataset: str) -> dict[str, list[dict]]:
        """Each method once per round, round after round. The machine is shared and its speed
        drifts over minutes: methods whose figures make a ratio meet the same drift."""
        runs: dict[str, list[dict]] = {method: [] for method in methods}
        for i in range(args.repeat):
            for method in methods:
                print(f"  {method} on {dataset} ({i + 1}/{args.repeat})", file=sys.stderr)
                runs[method].append(run_child(method, data[dataset], work, args.pg))
        return runs

    # Ingest against its floors and the pandas path.
    for dataset in ("math", "tb"):
        sqlite_methods = ["warehouse-sqlite", "floor-sqlite", "pandas-sqlite"]
        if dataset == "math":
            sqlite_methods.append("bound-sqlite")
        runs = measure_together(sqlite_methods, dataset)
        m_ours, m_floor, m_pandas = (median([r["seconds"] for r in runs[method]]) for method in sqlite_methods[:3])
        results.append((f"ingest {dataset} → SQLite", f"{m_ours:.2f} s", f"sqlite3 floor {m_floor:.2f} s",
                        f"{m_ours / m_floor:.2f}× floor"))
        results.append((f"pandas path {dataset} → SQLite", f"{m_pandas:.2f} s", f"warehouse {m_ours:.2f} s",
                        f"pandas takes {m_pandas / m_ours:.2f}× the warehouse's time"))
        if dataset == "math":
            bound = median([r["seconds"] for r in runs["bound-sqlite"]])
            results.append(("bound of the design, math → SQLite", f"{bound:.2f} s", f"sqlite3 floor {m_floor:.2f} s",
                            f"{bound / m_floor:.2f}× floor"))
        if args.pg:
            pg_runs = measure_together(["warehouse-postgres", "floor-postgres"], dataset)
            a, b = (median([r["seconds"] for r in pg_runs[method]])
                    for method in ("warehouse-postgres", "floor-postgres"))
            results.append((f"ingest {dataset} → PostgreSQL", f"{a:.2f} s", f"COPY floor {b:.2f} s",
                            f"{a / b:.2f}× floor"))

    # Trace directories: many small units, so per-unit costs (transaction, lookups, summary
    # refresh) rather than text volume.
    data["traces"] = out / "data" / "traces"
    for method, backend in (("warehouse-sqlite", "SQLite"), ("warehouse-postgres", "PostgreSQL")):
        if method == "warehouse-postgres" and not args.pg:
            continue
        seconds = median([r["seconds"] for r in measure(method, "traces")])
        results.append((f"ingest trace folders ({TRACE_TRIALS} trials) → {backend}", f"{seconds:.2f} s", "",
                        f"{seconds / TRACE_TRIALS * 1000:.1f} ms per trial"))

    # Database size against distinct content (all-episodes terminal-bench profile).
    tb_all = measure("warehouse-sqlite", "tb-all")
    floor_tb_all = run_child("floor-sqlite", data["tb-all"], work, None)
    size = median([r["db_bytes"] for r in tb_all])
    distinct = floor_tb_all["distinct_text_bytes"]
    results.append(("SQLite size, tb all-episodes", f"{size / 1e6:.1f} MB", f"distinct text {distinct / 1e6:.1f} MB",
                    f"{size / distinct:.2f}× distinct text"))
    floor_size = floor_tb_all["db_bytes"]
    results.append(("SQLite size, tb all-episodes, against its floor", f"{size / 1e6:.1f} MB",
                    f"sqlite3 floor {floor_size / 1e6:.1f} MB", f"{size / floor_size:.2f}× floor"))
    results.append(_stored_turns_row(work / "warehouse-sqlite.db"))
    if args.pg:
        pg_size = run_child("warehouse-postgres", data["tb-all"], work, args.pg)["db_bytes"]
        results.append(("PostgreSQL size (tables), tb all-episodes", f"{pg_size / 1e6:.1f} MB",
                        f"distinct text {distinct / 1e6:.1f} MB", f"{pg_size / distinct:.2f}× distinct text"))

    results.extend(search_results(data["tb-all"], work, args.repeat))

    # Five times the math export in four shards: whole-process ingest, re-ingest, peak RSS.
    db = work / "math-x5.db"
    _remove_sqlite(db)
    cli = [sys.executable, "-m", "warehouse", "--db", str(db), "ingest", str(data["math-x5"])]
    first_s, first_rss = peak_rss_of(cli)
    results.append(("ingest math×5 (4 shards), whole process", f"{first_s:.2f} s", "", f"peak RSS {first_rss:.0f} MB"))
    small_db = work / "math-rss.db"
    _remove_sqlite(small_db)
    small_s, small_rss = peak_rss_of([sys.executable, "-m", "warehouse", "--db", str(small_db), "ingest",
                                      str(data["math"])])
    results.append(("peak RSS: math×5 vs math", f"{first_rss:.0f} MB", f"math {small_rss:.0f} MB",
                    f"{first_rss / small_rss:.2f}× for 5× the data"))
    again = [peak_rss_of(cli)[0] for _ in range(args.repeat)]
    results.append(("re-ingest math×5, whole process", f"{median(again):.2f} s", "", "all shards skipped"))

    results.extend(upgrade_results(db, data["math-x5"], work, args))
    results.extend(query_results(db, data["math-x5"], args.repeat))
    if args.pg:  # the canned queries on PostgreSQL against SQLite, and the statistics' cost
        from bench import queries

        results.append(queries.statistics_cost(data["math"], args.pg))
        results.extend(queries.on_postgres(db, data["math-x5"], args.repeat, args.pg))
    report(results, info, args)


class _Results(list):
    def append(self, row) -> None:
        print("  => " + " | ".join(row), file=sys.stderr)
        super().append(row)

    def extend(self, rows) -> None:
        for row in rows:
            self.append(row)


def upgrade_results(db: Path, dataset: Path, work: Path, args) -> list[tuple[str, str, str, str]]:
    """Migration 0014 at size: math×5 at 0013 (loaded at head, then downgraded: untimed)
    upgraded in place to head, whole process, with its peak memory; then `db check`."""
    rows = []
    targets = [("SQLite", None)] + ([("PostgreSQL", args.pg)] if args.pg else [])
    for backend, pg in targets:
        made = None
        if pg is None:
            url = str(_copy_of(db, work / "math-x5-upgrade.db"))
        else:
            engine, made, admin = _fresh_postgres(pg)
            url = engine.url.render_as_string(hide_password=False)
            engine.dispose()
            subprocess.run(warehouse_command("--db", url, "ingest", str(dataset)), check=True, capture_output=True)
        try:
            subprocess.run(warehouse_command("--db", url, "db", "downgrade", "0013", "--yes"), check=True,
                           capture_output=True)
            seconds, rss = peak_rss_of(warehouse_command("--db", url, "db", "upgrade"))
            check = subprocess.run(warehouse_command("--db", url, "db", "check"), capture_output=True, text=True)
            if check.returncode != 0:
                raise SystemExit(f"db check after the upgrade:\n{check.stderr}")
        finally:
            if made is not None:
                _drop_postgres(admin, made)
        rows.append((f"upgrade math×5 0013 → head in place → {backend}, whole process", f"{seconds:.2f} s", "",
                     f"peak RSS {rss:.0f} MB; db check passes"))
    return rows


def search_results(dataset: Path, work: Path, repeat: int) -> list[tuple[str, str, str, str]]:
    """What the optional trigram index costs in size and gains in search speed (SQLite)."""
    from bench.queries import median_ms
    from ingest.pipeline import ingest
    from warehouse.db.engine import resolve_url
    from warehouse.search import build_index, search

    db = work / "search.db"
    engine = _fresh_sqlite(db)
    ingest(engine, [str(dataset)])
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    before = db.stat().st_size
    url = resolve_url(str(db))
    needles = ["error: no such file", "Traceback", "pytest"]
    scan = median_ms(lambda: [search(url, n, limit=20) for n in needles], repeat)
    t0 = time.perf_counter()
    build_index(engine)
    build_s = time.perf_counter() - t0
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    after = db.stat().st_size
    indexed = median_ms(lambda: [search(url, n, limit=20) for n in needles], repeat)
    engine.dispose()
    return [
        ("search index size, tb all-episodes (SQLite)", f"{(after - before) / 1e6:.1f} MB",
         f"database without it {before / 1e6:.1f} MB", f"+{(after - before) / before:.0%}, built in {build_s:.1f} s"),
        ("search, 3 needles, tb all-episodes (SQLite)", f"{indexed:.1f} ms with index",
         f"scan {scan:.1f} ms", f"{scan / indexed:.1f}× faster with the index"),
    ]


def query_results(db: Path, dataset: Path, repeat: int) -> list[tuple[str, str, str, str]]:
    """Each canned query on the loaded warehouse against DuckDB over the raw Parquet."""
    try:
        from bench import queries
    except ImportError:
        return []
    return queries.compare(db, dataset, repeat)


# --- whole processes: commands timed from outside, start-up included ------------------------

# Rounds of each start-up command per --repeat: one run is a few hundred milliseconds, so more
# rounds cost little and steady the medians.
STARTUP_ROUNDS_PER_REPEAT = 5
SAMPLE = ROOT / "examples" / "sample"


def compile_bytecode() -> None:
    """Compile this tree's modules once, as an installed package's are: the commands below run
    it from source, and with PYTHONDONTWRITEBYTECODE set each start-up would compile it anew,
    which no installed copy does (sqlite-utils, from site-packages, is compiled)."""
    import compileall

    for package in ("warehouse", "ingest", "migrations", "tools", "bench"):
        compileall.compile_dir(ROOT / package, quiet=1)


def warehouse_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "warehouse", *args]


def sqlite_utils_command() -> list[str]:
    """The sqlite-utils script beside this interpreter (a shim on the PATH, such as pyenv's,
    would add its own start-up)."""
    beside = Path(sys.executable).parent / "sqlite-utils"
    found = str(beside) if beside.exists() else shutil.which("sqlite-utils")
    if found is None:
        raise SystemExit("sqlite-utils is missing: python3 -m pip install -e '.[bench]'")
    return [found]


def time_commands(commands: dict[str, Callable[[], list[str]]], rounds: int,
                  warm_up: bool = True) -> dict[str, list[float]]:
    """Wall seconds of each command, a whole process each time, the commands taking turns round
    after round (A, B, A, B, …) so that they meet the shared machine's drift alike. Each entry
    prepares its run (untimed) and returns the command line; warm_up runs each once first,
    untimed (the file cache is then warm for all)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(-1 if warm_up else 0, rounds):
        for name, prepare in commands.items():
            cmd = prepare()
            if i >= 0:
                print(f"  {name} ({i + 1}/{rounds})", file=sys.stderr)
            started = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            seconds = time.perf_counter() - started
            if proc.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
            if i >= 0:
                times[name].append(seconds)
    return times


def _copy_of(template: Path, path: Path) -> Path:
    _remove_sqlite(path)
    shutil.copyfile(template, path)
    return path


def _sqlite_template(work: Path) -> Path:
    """A SQLite file holding the schema and nothing else, made by the migrations, copied for
    each whole-process run (so that both sides of a ratio start from the same file)."""
    template = work / "template.db"
    _fresh_sqlite(template).dispose()  # closing checkpoints the WAL: the file is the whole database
    return template


def startup_results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    """`warehouse --help`, `warehouse query runs` and `warehouse sql "select 1"` on a small
    warehouse (the bundled sample) against `sqlite-utils query DB "select 1"`, whole processes."""
    db = _copy_of(_sqlite_template(work), work / "startup.db")
    subprocess.run(warehouse_command("--db", str(db), "ingest", str(SAMPLE)), cwd=ROOT, check=True,
                   capture_output=True)
    baseline = "sqlite-utils query"
    commands = {
        "python3 -c pass": [sys.executable, "-c", "pass"],
        baseline: [*sqlite_utils_command(), "query", str(db), "select 1"],
        "warehouse --help": warehouse_command("--help"),
        "warehouse query runs": warehouse_command("--db", str(db), "query", "runs"),
        'warehouse sql "select 1"': warehouse_command("--db", str(db), "sql", "select 1"),
    }
    times = time_commands({name: (lambda cmd=cmd: cmd) for name, cmd in commands.items()},
                          args.repeat * STARTUP_ROUNDS_PER_REPEAT)
    ms = {name: median(values) * 1000 for name, values in times.items()}
    rows = [("start-up: python3 -c pass (the interpreter alone)", f"{ms['python3 -c pass']:.0f} ms", "", "")]
    rows += [(f"start-up: {name}, whole process", f"{ms[name]:.0f} ms", f"{baseline} {ms[baseline]:.0f} ms",
              f"{ms[name] / ms[baseline]:.2f}× sqlite-utils")
             for name in commands if name.startswith("warehouse")]
    return rows


def whole_ingest_results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    """`warehouse ingest DATASET` as a command against its whole-process floor
    (bench.floor_sqlite, bench.floor_postgres), both into a database holding only the schema."""
    rows = []
    template = _sqlite_template(work)
    ours, floor = work / "whole-warehouse.db", work / "whole-floor.db"
    dataset = data["math"]
    times = time_commands({
        "warehouse ingest math → SQLite": lambda: warehouse_command(
            "--db", str(_copy_of(template, ours)), "ingest", str(dataset)),
        "sqlite3 floor math": lambda: [sys.executable, "-m", "bench.floor_sqlite", str(dataset),
                                       str(_copy_of(template, floor))],
    }, args.repeat, warm_up=False)
    _same_rows(_sqlite_counts(ours), _sqlite_counts(floor), "math → SQLite")
    a, b = (median(values) for values in times.values())
    rows.append(("ingest math → SQLite, whole process", f"{a:.2f} s", f"sqlite3 floor, whole process {b:.2f} s",
                 f"{a / b:.2f}× floor"))
    if not args.pg:
        return rows
    engine, template_name, admin = _fresh_postgres(args.pg)
    engine.dispose()  # a template database must have no connections while it is copied
    try:
        for name in ("math", "math-x5"):
            rows.append(_whole_ingest_postgres(data[name], name, admin, template_name, args))
    finally:
        _drop_postgres(admin, template_name)
    return rows


def _whole_ingest_postgres(dataset: Path, name: str, admin: str, template: str, args) -> tuple[str, str, str, str]:
    import psycopg
    from sqlalchemy.engine import make_url

    made: dict[str, str] = {}

    def fresh(side: str) -> str:
        """A new database cloned from the template (the previous run's dropped first)."""
        if side in made:
            _drop_postgres(admin, made[side])
        made[side] = f"wh_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{made[side]}" TEMPLATE "{template}"')
        return make_url(admin).set(database=made[side]).render_as_string(hide_password=False)

    try:
        times = time_commands({
            "ours": lambda: warehouse_command("--db", fresh("ours"), "ingest", str(dataset)),
            "floor": lambda: [sys.executable, "-m", "bench.floor_postgres", str(dataset), fresh("floor")],
        }, args.repeat, warm_up=False)
        counts = {side: _postgres_counts(make_url(admin).set(database=db).render_as_string(hide_password=False))
                  for side, db in made.items()}
        _same_rows(counts["ours"], counts["floor"], f"{name} → PostgreSQL")
    finally:
        for db in made.values():
            _drop_postgres(admin, db)
    a, b = median(times["ours"]), median(times["floor"])
    label = name.replace("-x5", "×5")
    return (f"ingest {label} → PostgreSQL, whole process", f"{a:.2f} s", f"COPY floor, whole process {b:.2f} s",
            f"{a / b:.2f}× floor")


# The tables both sides write; the floor writes the same rows, so the counts must agree.
_COUNTED = ("runs", "tasks", "trials", "episodes", "turns", "messages")


def _sqlite_counts(path: Path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _COUNTED}
    finally:
        conn.close()


def _postgres_counts(conninfo: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _COUNTED}


def _postgres_table_bytes(conninfo: str) -> int:
    """The bytes of the warehouse's tables, their indexes and TOAST included (not the catalog
    every database has)."""
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return int(conn.execute("""SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                                   JOIN pg_namespace n ON n.oid = c.relnamespace
                                   WHERE n.nspname = 'public' AND c.relkind = 'r'""").fetchone()[0])


def _stored_turns_row(db: Path) -> tuple[str, str, str, str]:
    """Across the trials of a warehouse, the most turns a trial stores against its longest
    episode's: 1× when every episode is a prefix of the longest."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        stored, longest = conn.execute("""
            SELECT s.n, l.n FROM (SELECT c.trial_id, count(*) AS n FROM conversation_turns ct
                                  JOIN conversations c ON c.id = ct.conversation_id GROUP BY c.trial_id) s
            JOIN (SELECT trial_id, max(n_turns) AS n FROM episodes GROUP BY trial_id) l ON l.trial_id = s.trial_id
            ORDER BY s.n * 1.0 / l.n DESC LIMIT 1""").fetchone()
        episodes = conn.execute("SELECT count(*) FROM episodes").fetchone()[0]
    finally:
        conn.close()
    return ("turns a trial stores, tb all-episodes (its worst trial)", f"{stored:,} turn rows",
            f"its longest episode {longest:,} turns", f"{stored / longest:.2f}× ({episodes:,} episodes in all)")


def _same_rows(ours: dict[str, int], floor: dict[str, int], what: str) -> None:
    if ours != floor:
        raise SystemExit(f"{what}: the floor wrote other rows than the warehouse: {floor} against {ours}")


def canned_query_results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    """The canned queries alone (`--only queries`): math×5 loaded into SQLite by the command,
    then every query against DuckDB and, with --pg, on PostgreSQL against SQLite."""
    from bench import queries

    db = work / "math-x5-queries.db"
    _remove_sqlite(db)
    subprocess.run(warehouse_command("--db", str(db), "ingest", str(data["math-x5"])), check=True,
                   stdout=subprocess.DEVNULL)
    results = queries.compare(db, data["math-x5"], args.repeat)
    if args.pg:
        results.extend(queries.on_postgres(db, data["math-x5"], args.repeat, args.pg))
    return results


# The whole-process rows, by the name `--only` knows them by.
WHOLE_PROCESS: dict[str, Callable] = {"startup": startup_results, "ingest": whole_ingest_results,
                                      "long": lambda data, work, args: long_trial.results(work, args)}
# What `--only` can measure alone: those, the canned queries, the viewer's pages, db copy, watch
# mode, and the ingest at 1×, 5× and 20× (scale: about 15 minutes with PostgreSQL), or at 1×
# against its floors alone (floors).
PARTS: dict[str, Callable] = {**WHOLE_PROCESS, "queries": canned_query_results, "serve": serve.results,
                              "copy": copy.results, "watch": watch.results, "scale": scale.results,
                              "floors": scale.floors}


KEPT_MARKER = "<!-- Below: kept by bench.run when it rewrites the table above. -->"


def report(results, info, args) -> None:
    lines = ["| measurement | median | baseline (same run) | ratio |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in results]
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return
    datasets = "\n".join(
        f"| {name} | {v['rows']:,} | {v['turns']:,} | {v['text_bytes'] / 1e6:.1f} MB | {v['distinct_text_bytes'] / 1e6:.1f} MB |"
        for name, v in info.items())
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    # What follows the marker is written by hand from `--only` parts (scale) and kept.
    kept = ""
    if (ROOT / "BENCHMARKS.md").exists():
        _, found, tail = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").partition(KEPT_MARKER)
        kept = found + tail
    (ROOT / "BENCHMARKS.md").write_text(f"""# Benchmarks

Reproduce with `python3 -m pip install -e '.[bench]' && python3 -m bench.run --pg postgresql://…`
(PostgreSQL rows appear only with `--pg`). Each figure is the median of {args.repeat} runs, each run in
its own process; every ratio compares two figures measured in the same run on the same machine
({machine}), on {time.strftime('%Y-%m-%d')}, the methods of a ratio taking turns run by run (the
machine is shared, and its speed drifts).

{table}

Datasets (from `tools.generate`, fixed seeds):

| dataset | rows | turns | text | distinct text |
|---|---|---|---|---|
{datasets}

- *whole process*: the command timed from outside, a new process each run (`python -m warehouse
  …`), from its start to its exit: interpreter start-up, imports, engine, schema check, the
  reader process, the ingest and its last commit. Both sides of a ratio start from a copy of the
  same database holding only the schema (made by the migrations, untimed). The whole-process
  floors (`python -m bench.floor_sqlite DATASET DB`, `python -m bench.floor_postgres DATASET URL`)
  start an interpreter, read the Parquet with pyarrow into the normalized rows the warehouse
  stores (through the ingest's own row reader, `bench.floors.normalize`) and insert them with
  plain `executemany` / `COPY` in one transaction, in one process; the rows they write are
  checked to be the warehouse's, table by table. This tree's modules are compiled to bytecode
  first, as an installed package's are.
- *start-up*: whole processes on a small warehouse (the bundled `examples/sample`), the commands
  taking turns, {args.repeat * STARTUP_ROUNDS_PER_REPEAT} rounds after one untimed round;
  `sqlite-utils query DB "select 1"` is the bar. (sqlite-utils imports pandas when it is
  installed, as the `bench` extra does, which is much of its start-up here.)
- *ingest*: `ingest()` on a fresh database, in process, until its engine is closed (so no
  work, such as a last WAL checkpoint, can happen after the clock stops); the reader process it
  forks is inside the clock.
- *sqlite3 floor / COPY floor*: the same normalized rows (runs, tasks, messages, trials,
  conversations, episodes, conversation turns: each conversation stored once) inserted with plain `executemany` / `COPY` into a database made by the
  warehouse's migrations (same schema, indexes and SQLite page size), in one transaction;
  rows built before the clock starts; no dedup lookups, ledger, provenance, summaries or
  conflict checks.
- *bound of the design*: the ingest's two processes with nothing left to compute: the reader
  process sends the floor's rows (ids assigned) and the provenance rows, batch by batch; the
  writer only runs plain `executemany` (as the floor does), the summary refresh, the ledger
  update and the commit, in one unit's transaction: about the least an ingest built this way
  can take (`bench.floors.sqlite_writer_bound`). The ingest's own inserts bind faster than plain
  `executemany` (NULL columns as literals, bytes as bytearrays), so it can come nearer.
- *trace folders*: a Harbor job of synthetic trial folders (`tests/trace_trees.py`: config,
  result, ATIF trajectory of 6 agent steps, verifier output), each trial a unit of its own.
- *pandas path*: `pandas.read_parquet`, explode `conversations` to one row per message,
  `DataFrame.to_sql` into SQLite: what a user does without the warehouse.
- *canned queries* (in process, execute and fetch, read connections pooled): against DuckDB
  answering the same question over the raw Parquet (`bench/queries.py`). `pass-at-k` and
  `compare-test` answer with bootstrap intervals (2000 resamples), so DuckDB's side computes
  them too, resampling the tasks row by row as its user would; the row after each gives DuckDB's
  estimate alone. On PostgreSQL: against the same query on SQLite, right after the ingest;
  and a few as commands, whole processes (start-up and connecting included), the two backends
  taking turns.
- *peak RSS*: the largest sum, sampled every 5 ms, of the proportional set sizes (PSS) of the
  ingest process and its reader process (pages the fork shares count once).

Where an ingest's time goes: `python -m bench.profile [--dataset math] [--pg URL]` profiles the
writer's process and, separately, the reader's work.
{kept}""")


if __name__ == "__main__":
    main()
