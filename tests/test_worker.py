"""The reader process: items arrive in order, its errors are raised here, its death is
reported, and it is stopped when the consumer stops early."""

from __future__ import annotations

import os
import time

import pytest

from ingest.process.worker import Reader, WorkerDied


def in_worker(produce, *args):
    with Reader() as reader:
        yield from reader.run(produce, *args)


def _count(n: int):
    for i in range(n):
        yield {"i": i, "pid": os.getpid(), "text": "é\x00" * i}


def test_items_arrive_in_order_from_another_process():
    items = list(in_worker(_count, 50))
    assert [item["i"] for item in items] == list(range(50))
    assert items[3]["text"] == "é\x00" * 3
    assert {item["pid"] for item in items} != {os.getpid()}


def _niceness():
    yield os.nice(0)


def test_the_reader_yields_the_cores_to_the_writer_when_they_compete():
    from ingest.process.worker import READER_NICENESS

    assert list(in_worker(_niceness)) == [min(19, os.nice(0) + READER_NICENESS)]


def _fails_after(n: int):
    yield from range(n)
    raise ValueError("row 7: episode 'x' is not 'episode-N'")


def test_an_error_in_the_worker_is_raised_here_with_its_message():
    seen = []
    with pytest.raises(ValueError, match="row 7: episode 'x'"):
        for item in in_worker(_fails_after, 3):
            seen.append(item)
    assert seen == [0, 1, 2]


def _dies():
    yield 1
    os._exit(3)


def test_a_worker_that_dies_is_reported():
    with pytest.raises(WorkerDied, match="exit code 3"):
        list(in_worker(_dies))


def _forever(path: str):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    i = 0
    while True:
        yield i
        i += 1


def test_stopping_early_stops_the_worker(tmp_path):
    marker = tmp_path / "pid"
    items = in_worker(_forever, str(marker))
    assert next(items) == 0
    items.close()
    pid = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the worker still runs after its consumer stopped")


def test_one_reader_serves_several_jobs_and_exits_by_itself():
    with Reader() as reader:
        first = list(reader.run(_count, 3))
        process = reader._process
        second = list(reader.run(_count, 2))
    assert [i["i"] for i in first + second] == [0, 1, 2, 0, 1]
    assert {i["pid"] for i in first} == {i["pid"] for i in second}  # the same process
    # Closing the job pipe is enough for it to exit (it was not terminated).
    assert process.exitcode == 0


def test_after_a_reader_dies_the_next_job_gets_a_new_one_and_nothing_is_left_open():
    open_before = len(os.listdir("/proc/self/fd"))
    with Reader() as reader:
        with pytest.raises(WorkerDied):
            list(reader.run(_dies))
        items = list(reader.run(_count, 2))
    assert [i["i"] for i in items] == [0, 1]
    assert len(os.listdir("/proc/self/fd")) == open_before  # the dead reader's pipes are closed too


def _collector_state():
    import gc

    yield gc.isenabled()


def test_the_reader_produces_with_the_garbage_collector_paused_and_restores_it():
    import gc

    with Reader() as reader:
        assert list(reader.run(_collector_state)) == [False]
        assert list(reader.run(_collector_state)) == [False]
    assert gc.isenabled()  # this process's collector is untouched


def test_a_job_whose_items_were_never_taken_does_not_leak_into_the_next():
    with Reader() as reader:
        dropped = reader.run(_count, 40)  # started at once, never iterated
        del dropped
        items = list(reader.run(_count, 3))
    assert [i["i"] for i in items] == [0, 1, 2]


def test_an_unfinished_job_collected_after_the_next_began_leaves_the_next_alone():
    with Reader() as reader:
        first = reader.run(_count, 40)
        assert next(first)["i"] == 0
        second = reader.run(_count, 3)  # stops the reader of the first, which is collected only now
        del first
        assert [i["i"] for i in second] == [0, 1, 2]


def _sized(sizes: list[int]):
    import hashlib

    for i, size in enumerate(sizes):
        data = hashlib.sha256(str(i).encode()).digest() * (size // 32)
        yield i, data


def test_items_of_every_size_cross_intact_and_in_order():
    # Items cross in a ring of shared memory, wrapping around its end; one larger than the ring
    # takes goes through the pipe instead.
    from ingest.process.worker import AHEAD_BYTES, RING_ITEM_MAX

    sizes = [100, 3 << 20, 2 << 20, 64 << 10, RING_ITEM_MAX + (1 << 20), 3 << 20, 1, 3 << 20, AHEAD_BYTES,
             (1 << 20) - 7, 3 << 20, 5]
    expected = list(_sized(sizes))
    assert list(in_worker(_sized, sizes)) == expected


def _reports_then_sleeps(path: str):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    yield 0
    time.sleep(3600)  # no check of its own that the consumer is still there
    yield 1


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_reader_dies_with_its_consumer_whatever_its_job_is_doing(tmp_path):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    marker = tmp_path / "pid"
    consumer = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path[:0] = [{str(Path(__file__).parent)!r}]
from ingest.process.worker import Reader
from test_worker import _reports_then_sleeps
with Reader() as reader:
    items = reader.run(_reports_then_sleeps, {str(marker)!r})
    next(items)
    time.sleep(3600)
"""])
    try:
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text()):
            assert consumer.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        reader = int(marker.read_text())
        assert _running(reader)
        consumer.send_signal(signal.SIGKILL)
        consumer.wait()
        deadline = time.monotonic() + 30
        while _running(reader):
            assert time.monotonic() < deadline, "the reader outlived its consumer"
            time.sleep(0.01)
    finally:
        consumer.kill()
        consumer.wait()
        if marker.exists() and marker.read_text() and _running(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)  # (after a failure: leave nothing running)


def _is_socket(fd: int):
    yield os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    yield from _forever(os.devnull)


def test_the_reader_holds_no_copy_of_the_consumers_sockets():
    # A database connection of the consumer (here a socket pair) must close when the consumer
    # closes it, or dies: a copy held by the reader would keep the server's end open.
    import socket

    ours, peer = socket.socketpair()
    peer.settimeout(30)
    try:
        with Reader() as reader:
            items = reader.run(_is_socket, ours.fileno())
            assert next(items) is False  # the reader's descriptor is no socket any more
            assert next(items) == 0  # and the reader still runs
            ours.close()
            assert peer.recv(1) == b""  # the other end sees this one closed
            items.close()
    finally:
        ours.close()
        peer.close()
