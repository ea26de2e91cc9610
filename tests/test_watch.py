"""`warehouse ingest --watch`: a job written trial by trial while the watch runs ends as a
one-shot ingest of the finished folder would (order never matters, nor when the watch looked);
running trials as snapshots with --running; shards as they appear; a bad trial reported and the
rest still loaded; a lost PostgreSQL connection waited out; the CLI's lines and its one-line end.
On both backends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import canonical
from conftest import another_warehouse
from helpers import hub_row, next_line, read_terminal, write_shard
from ingest.pipeline import ingest
from trace_trees import make_trace_tree
from warehouse import Warehouse
from warehouse.db.engine import make_engine, resolve_url

PROVENANCE = ("sources", "loads", "trial_loads", "conflicts", "run_sources")
SETTLE = 0.2
CAUGHT_UP = 60.0  # seconds a watch may take to hold what was written (a loaded CI machine)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished job of 8 trials (and 2 RL trials beside it), as the watched folder ends."""
    return make_trace_tree(tmp_path_factory.mktemp("finished"), seed=7, job_trials=8, rl_trials=2,
                           with_fixtures=False)


class Watching:
    """Warehouse.watch in a thread, until stop(); its events kept."""

    def __init__(self, url: str, folder: Path, **options) -> None:
        self.events = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url, folder, options), daemon=True)
        self.thread.start()

    def _run(self, url, folder, options) -> None:
        try:
            Warehouse(url).watch(folder, on_event=self.events.append, stop=self.stop_event,
                                 settle=options.pop("settle", SETTLE), **options)
        except BaseException as exc:  # the test asserts there was none
            self.error = exc

    def kinds(self, kind: str) -> list[str]:
        return [e.text for e in self.events if e.kind == kind]

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the watch did not stop"
        assert self.error is None, repr(self.error)


def _state(url: str) -> dict[str, list[str]]:
    engine = make_engine(resolve_url(url))
    try:
        # One snapshot for all the tables (the watch may be writing meanwhile); SQLite reads each
        # table in a snapshot of its own, so a dump there may catch a unit half-way: _caught_up.
        dump = canonical.dump(engine.execution_options(isolation_level="REPEATABLE READ")
                              if engine.dialect.name == "postgresql" else engine, order_independent=True)
    finally:
        engine.dispose()
    return {table: rows for table, rows in dump.items() if table not in PROVENANCE}


def _caught_up(url: str, expected: dict[str, list[str]]) -> bool:
    try:
        return _state(url) == expected
    except (KeyError, AssertionError):  # a table read before a unit committed, another after
        return False


def _wait_for(condition, what: str, seconds: float = CAUGHT_UP) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f} s: {what}")
        time.sleep(0.2)


def _job_result(final: dict, done: list[str], total: int, finished: bool) -> dict:
    """The job's result.json as Harbor rewrites it while the job runs: trials done so far."""
    value = dict(final)
    value["stats"] = dict(final["stats"], n_trials=len(done))
    if not finished:
        value["finished_at"] = None
    value["n_total_trials"] = total
    return value


def write_in_stages(finished: Path, watched: Path, pause: float = 0.05) -> None:
    """Copy the finished tree into `watched` as Harbor writes it: the job's config.json and
    result.json first; each trial's files but result.json, then (a moment later) its result.json,
    the job's result.json rewritten after each trial; the job's final result.json last."""
    job, target = finished / "job-a", watched / "job-a"
    target.mkdir(parents=True)
    final = json.loads((job / "result.json").read_text())
    shutil.copy(job / "config.json", target / "config.json")
    trials = sorted(p for p in job.iterdir() if p.is_dir())
    done: list[str] = []
    (target / "result.json").write_text(json.dumps(_job_result(final, done, len(trials), False)))
    for trial in trials:
        shutil.copytree(trial, target / trial.name, ignore=shutil.ignore_patterns("result.json"))
        time.sleep(pause)
        shutil.copy(trial / "result.json", target / trial.name / "result.json")
        done.append(trial.name)
        (target / "result.json").write_text(json.dumps(_job_result(final, done, len(trials), False)))
    shutil.copytree(finished / "rl-sweep", watched / "rl-sweep")
    shutil.copy(job / "result.json", target / "result.json")


@pytest.mark.parametrize("poll", [None, 0.1], ids=["notices", "polling"])
def test_a_job_written_while_watched_ends_as_a_one_shot_ingest(backend, db_url, finished, tmp_path, request, poll):
    watched = tmp_path / "watched"
    watched.mkdir()
    watch = Watching(db_url, watched, poll=poll)
    try:
        write_in_stages(finished, watched)
        with another_warehouse(backend, tmp_path / "one-shot", request,
                               lambda engine: ingest(engine, [str(watched)])) as one_shot:
            expected = _state(one_shot)
        try:
            _wait_for(lambda: _caught_up(db_url, expected), "the watched warehouse equal to the one-shot ingest")
        except AssertionError:
            assert canonical.differences(expected, _state(db_url)) == []
            raise
    finally:
        watch.stop()
    loaded = watch.kinds("loaded")
    assert len([t for t in loaded if "job-a/task-" in t]) >= 8  # each trial, as it finished
    assert watch.kinds("failed") == []


def test_a_running_trial_is_a_snapshot_until_it_finishes(db_url, finished, tmp_path):
    watched = tmp_path / "watched"
    trial = next(p for p in sorted((finished / "job-a").iterdir()) if p.is_dir())
    target = watched / "rl" / trial.name
    shutil.copytree(trial, target, ignore=shutil.ignore_patterns("result.json"))
    engine = make_engine(resolve_url(db_url))

    def status() -> list[str]:
        with engine.connect() as conn:
            return [s for (s,) in conn.execute(text("SELECT status FROM trials"))]

    watch = Watching(db_url, watched, running=True)
    try:
        _wait_for(lambda: status() == ["incomplete"], "the running trial stored as incomplete")
        shutil.copy(trial / "result.json", target / "result.json")
        _wait_for(lambda: status() == ["complete"], "the finished trial replacing its snapshot")
    finally:
        watch.stop()
        engine.dispose()


def test_without_running_a_trial_waits_for_its_result(db_url, finished, tmp_path):
    watched = tmp_path / "watched"
    trial = next(p for p in sorted((finished / "job-a").iterdir()) if p.is_dir())
    shutil.copytree(trial, watched / "rl" / trial.name, ignore=shutil.ignore_patterns("result.json"))
    watch = Watching(db_url, watched)
    try:
        time.sleep(1.5)
        assert watch.kinds("loaded") == []
        shutil.copy(trial / "result.json", watched / "rl" / trial.name / "result.json")
        _wait_for(lambda: watch.kinds("loaded"), "the trial loaded once its result.json is written")
    finally:
        watch.stop()


def test_a_unit_is_read_only_once_its_files_have_settled(db_url, finished, tmp_path):
    watched = tmp_path / "watched"
    watched.mkdir()
    watch = Watching(db_url, watched, settle=2.5)
    try:
        time.sleep(0.5)  # the watch is following the folder
        started = time.monotonic()
        shutil.copytree(finished / "rl-sweep", watched / "rl-sweep")
        _wait_for(lambda: len(watch.kinds("loaded")) == 2, "both RL trials loaded")
        assert time.monotonic() - started >= 2.5
    finally:
        watch.stop()


def test_new_shards_are_loaded_as_they_appear(db_url, tmp_path):
    dataset = tmp_path / "dataset"
    (dataset / "data").mkdir(parents=True)
    rows = [hub_row(f"t{i}", 0, [("user", f"question {i}"), ("assistant", f"answer {i}\x00ü")]) for i in range(6)]
    write_shard(dataset / "data" / "train-00000.parquet", rows[:3])
    watch = Watching(db_url, dataset)
    try:
        _wait_for(lambda: len(watch.kinds("loaded")) == 1, "the first shard loaded")
        staged = tmp_path / "staged.parquet"
        write_shard(staged, rows[3:])
        shutil.move(staged, dataset / "data" / "train-00001.parquet")
        _wait_for(lambda: len(watch.kinds("loaded")) == 2, "the second shard loaded")
    finally:
        watch.stop()
    engine = make_engine(resolve_url(db_url))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 6
            assert conn.execute(text("SELECT count(*) FROM loads")).scalar() == 2
    finally:
        engine.dispose()


def test_a_bad_trial_is_reported_and_the_rest_still_load(db_url, finished, tmp_path):
    watched = tmp_path / "watched"
    shutil.copytree(finished / "rl-sweep", watched / "rl-sweep")
    bad = next((watched / "rl-sweep" / "trace_jobs").iterdir())
    (bad / "agent" / "trajectory.json").write_text("{not json")
    watch = Watching(db_url, watched)
    try:
        _wait_for(lambda: watch.kinds("loaded") and watch.kinds("failed"), "one trial loaded, one failed")
        assert len(watch.kinds("failed")) == 1 and "trajectory.json" in watch.kinds("failed")[0]
        time.sleep(1)
        assert len(watch.kinds("failed")) == 1  # said once, not at every look
    finally:
        watch.stop()


def test_a_job_file_caught_mid_write_is_tried_again_not_reported(db_url, finished, tmp_path):
    """Harbor rewrites a job's result.json in place as each trial starts and ends: a trial read
    while it is empty is tried again at the next look, and loads once the file is whole."""
    watched = tmp_path / "watched"
    job = watched / "job-a"
    job.mkdir(parents=True)
    shutil.copy(finished / "job-a" / "config.json", job / "config.json")
    (job / "result.json").write_text("")  # caught between Harbor's truncation and its write
    trial = next(p for p in sorted((finished / "job-a").iterdir()) if p.is_dir())
    shutil.copytree(trial, job / trial.name)
    watch = Watching(db_url, watched)
    try:
        time.sleep(1.5)  # several looks, each failing on the empty file
        assert watch.kinds("loaded") == [] and watch.kinds("failed") == []
        shutil.copy(finished / "job-a" / "result.json", job / "result.json")
        _wait_for(lambda: watch.kinds("loaded"), "the trial loaded once its job's file is whole")
        assert watch.kinds("failed") == []
    finally:
        watch.stop()


def test_a_source_that_cannot_be_read_is_said_once(db_url, tmp_path):
    """A dataset whose card cannot be read fails at every look the watch takes of it: it is
    said once, not at every new file."""
    dataset = tmp_path / "dataset"
    (dataset / "data").mkdir(parents=True)
    (dataset / "README.md").write_text("---\nwarehouse_labels: " + "[" * 150 + "]" * 150 + "\n---\n")
    write_shard(dataset / "data" / "train-00000.parquet", [hub_row("t0", 0, [("user", "q")])])
    watch = Watching(db_url, dataset)
    try:
        _wait_for(lambda: watch.kinds("failed"), "the source's failure said")
        for i in range(3):  # each a notice, and a new look at the source
            (dataset / f"note-{i}.txt").write_text("x")
            time.sleep(0.5)
        assert len(watch.kinds("failed")) == 1 and "nested more than 100 levels" in watch.kinds("failed")[0]
    finally:
        watch.stop()


class Outage:
    """A TCP relay to the PostgreSQL server that can go down as a restarting server does, from
    the client's side: every connection through it cut, new ones refused, until it comes back
    (on the same port)."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self.target = (host, port)
        self._socket = socket
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # down
            server = self._socket.create_connection(self.target)
            with self.lock:
                self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def down(self) -> None:
        self.listener.close()
        with self.lock:
            for client, server in self.pairs:
                for s in (client, server):
                    try:
                        s.shutdown(self._socket.SHUT_RDWR)
                    except OSError:
                        pass
            self.pairs.clear()

    def up(self) -> None:
        self.listener = self._socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()


def test_a_lost_postgresql_connection_is_waited_out(finished, tmp_path, request):
    from sqlalchemy.engine import make_url

    from conftest import fresh_warehouse

    if not os.environ.get("WAREHOUSE_TEST_PG_URL"):
        pytest.skip("PostgreSQL tests need WAREHOUSE_TEST_PG_URL")
    maker = fresh_warehouse("postgresql", tmp_path, request)
    url = make_url(next(maker))
    relay = Outage(url.host or "localhost", url.port or 5432)
    through = url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    watched = tmp_path / "watched"
    trials = sorted((finished / "rl-sweep" / "trace_jobs").iterdir())
    shutil.copytree(trials[0], watched / "trace_jobs" / trials[0].name)
    watch = Watching(through, watched)
    try:
        _wait_for(lambda: len(watch.kinds("loaded")) == 1, "the first trial loaded")
        relay.down()
        shutil.copytree(trials[1], watched / "trace_jobs" / trials[1].name)
        _wait_for(lambda: watch.kinds("waiting"), "the watch waiting for the database")
        time.sleep(1.5)
        relay.up()
        _wait_for(lambda: len(watch.kinds("loaded")) == 2, "the second trial loaded once the server is back")
        assert watch.kinds("reconnected") and watch.kinds("failed") == []
    finally:
        watch.stop()
        relay.down()
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 2
    finally:
        engine.dispose()
        next(maker, None)


def _cli(db: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "warehouse", "--db", db, "ingest", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_the_command_says_each_event_and_ends_in_one_line(db_url, finished, tmp_path, stop):
    watched = tmp_path / "watched"
    watched.mkdir()
    process = _cli(db_url, "--watch", "--settle", "0.2", str(watched))
    try:
        assert next_line(process).startswith(f"watching {watched} (change notices)")
        shutil.copytree(finished / "rl-sweep", watched / "rl-sweep")
        lines = [next_line(process), next_line(process)]
        assert all(line.startswith(f"loaded: {watched}/rl-sweep/trace_jobs/math-") for line in lines), lines
        process.send_signal(stop)
        process.wait(timeout=30)
        process.reader.join(5)  # every line it wrote, read
        rest = list(process.lines.queue)
    finally:
        process.kill()
    assert [line.rstrip("\n") for line in rest] == ["Stopped: 2 units loaded, 0 failed, 0 unchanged; the unit being written, "
                                 "if any, was rolled back."]
    assert process.returncode == 0


@pytest.mark.parametrize("args", [["--running"], ["--poll", "1"], ["--settle", "1"]])
def test_watch_options_need_watch(tmp_path, args):
    process = _cli(str(tmp_path / "w.db"), *args, str(tmp_path))
    _, err = process.communicate(timeout=60)
    assert err.splitlines() == [f"Error: {args[0]} goes with --watch"]
    assert process.returncode != 0
    assert not (tmp_path / "w.db").exists()


@pytest.mark.parametrize("value", ["0", "-1", "7200"])
def test_a_bad_interval_is_one_line(tmp_path, value):
    process = _cli(str(tmp_path / "w.db"), "--watch", "--poll", value, str(tmp_path))
    _, err = process.communicate(timeout=60)
    assert len(err.splitlines()) == 1 and "poll must be above 0 and at most 3600 seconds" in err, err
    assert process.returncode != 0


def test_on_a_terminal_one_line_shows_each_jobs_trials_done(db_url, finished, tmp_path):
    """The line redrawn on a terminal counts what was loaded and each job's trials done of its
    total, as its result.json says them; the end is one line below it."""
    import fcntl
    import pty
    import struct
    import termios

    watched = tmp_path / "watched"
    watched.mkdir()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "warehouse", "--db", db_url, "ingest", "--watch", "--settle",
                                "0.2", str(watched)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=slave)
    os.close(slave)
    reader, screen = read_terminal(master)
    try:
        _wait_for(lambda: b"watching" in screen, "the watch following the folder")
        write_in_stages(finished, watched)
        _wait_for(lambda: b"job-a 8/8 trials done" in screen and b"10 loaded" in screen, "every trial counted")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        reader.join(5)
    finally:
        process.kill()
        os.close(master)
    lines = screen.decode().replace("\r\n", "\n").split("\n")
    assert lines[-2].startswith("Stopped: 10 units loaded, 0 failed") and lines[-1] == ""
    frames = [part.split("\x1b[K")[0] for part in screen.decode().split("\r") if part.startswith("watching ")]
    assert frames and all(len(frame) < 160 for frame in frames)
