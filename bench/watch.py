"""How soon `warehouse ingest --watch` makes a finished trial answer a query (`--only watch`).

The real `warehouse ingest --watch` process follows an empty folder; a writer in this process
then writes a Harbor job into it at TRIALS_PER_SECOND, as Harbor does (each trial's files, then
its result.json, then the job's result.json rewritten), while a reader in this process asks the
warehouse, every POLL_SECONDS on a read-only connection, which trials it holds. A trial's delay
is from its result.json being written to the first answer that holds it: what a user watching a
dashboard waits. Median and p95, on SQLite and, with --pg, PostgreSQL.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TRIALS = 200
TRIALS_PER_SECOND = 10.0
POLL_SECONDS = 0.02
SETTLES = (None, 0.1)  # the command's default (0.5 s), and a short one: what settling costs


def results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    from bench.run import fresh_warehouse_url
    from bench.serve import _p95

    rows = []
    targets = [("SQLite", None)] + ([("PostgreSQL", args.pg)] if args.pg else [])
    for backend, pg in targets:
        for settle in SETTLES:  # each into a new warehouse
            with fresh_warehouse_url(work, "watch.db", pg) as url:
                delays, missed = _measure(url, work / "watch-job", settle)
            rows.append((f"watch: result.json written → trial answers a query ({backend}, "
                         f"{TRIALS_PER_SECOND:g} trials/s, --settle {settle or 0.5:g})",
                         f"{statistics.median(delays) * 1000:.0f} ms, p95 {_p95(delays) * 1000:.0f} ms",
                         f"{len(delays)} trials", f"max {max(delays) * 1000:.0f} ms"
                         + (f"; {missed} never seen" if missed else "")))
    return rows


def _measure(url: str, folder: Path, settle: float | None) -> tuple[list[float], int]:
    from bench.run import ROOT, warehouse_command
    from warehouse.readonly import run_readonly

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # The warehouse made (its schema) before the clock starts: what is timed is the watch.
    subprocess.run(warehouse_command("--db", url, "ingest", str(folder)), capture_output=True)
    command = warehouse_command("--db", url, "ingest", "--watch", str(folder),
                                *(("--settle", str(settle)) if settle else ()))
    watch = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    written: dict[str, float] = {}
    seen: dict[str, float] = {}
    try:
        if not watch.stderr.readline().startswith("watching"):
            raise SystemExit(f"warehouse ingest --watch did not start: {watch.stderr.read()}")
        log = folder.parent / "watch.log"  # its lines (a pipe to drain), kept to read after
        threading.Thread(target=lambda: log.write_text(watch.stderr.read()), daemon=True).start()
        writer = threading.Thread(target=_write_job, args=(folder / "job", written), daemon=True)
        writer.start()
        deadline = None
        while len(seen) < TRIALS:
            now = time.time()
            for (name,) in run_readonly(url, "SELECT trial_name FROM trials", max_rows=TRIALS * 2).rows:
                seen.setdefault(name, now)
            if not writer.is_alive():
                deadline = deadline or now + 30
                if now > deadline:
                    break
            time.sleep(POLL_SECONDS)
    finally:
        watch.send_signal(2)
        try:
            watch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watch.kill()
    delays = [seen[name] - at for name, at in written.items() if name in seen]
    return delays, len(written) - len(delays)


def _write_job(job: Path, written: dict[str, float]) -> None:
    """A Harbor job of TRIALS trials at TRIALS_PER_SECOND: `written` gets each trial's name and
    the time its result.json was written."""
    from bench.run import ROOT

    sys.path.insert(0, str(ROOT / "tests"))
    from trace_trees import make_trial  # the tests' generator of Harbor trial folders

    rng = random.Random(5)
    staging = job.parent.parent / "watch-staging"
    shutil.rmtree(staging, ignore_errors=True)
    job.mkdir()
    job_id = "0b1c2d3e-0000-4000-8000-00000000beef"
    (job / "config.json").write_text(json.dumps({"job_name": "job", "n_attempts": 1}))

    def job_result(done: int, finished: bool) -> None:
        (job / "result.json").write_text(json.dumps({
            "id": job_id, "started_at": "2026-12-01T10:00:00", "finished_at": "2026-12-01T11:00:00" if finished else None,
            "n_total_trials": TRIALS, "stats": {"n_completed_trials": done, "n_errored_trials": 0, "evals": {}}}))

    job_result(0, False)
    started = time.time()
    for i in range(TRIALS):
        name = f"task-{i % 20}__{rng.getrandbits(32):08x}"
        made = make_trial(staging / name, rng, task=f"demo/task-{i % 20}", job_id=job_id, n_agent_steps=6, words=60)
        result = (made / "result.json").read_bytes()
        (made / "result.json").unlink()
        shutil.copytree(made, job / name)
        time.sleep(max(0.0, started + (i + 0.5) / TRIALS_PER_SECOND - time.time()))
        (job / name / "result.json").write_bytes(result)
        written[name] = time.time()
        job_result(i + 1, i + 1 == TRIALS)
        time.sleep(max(0.0, started + (i + 1) / TRIALS_PER_SECOND - time.time()))
    shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    sys.exit("run it as a part of the benchmark: python3 -m bench.run --only watch")
