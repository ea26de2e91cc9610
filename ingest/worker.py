"""A reader process: it runs generators (jobs) and this process consumes their items.

Reading and preparing a Parquet shard (decoding, hashing, shaping rows) is Python work, and
so is writing it; two threads would take turns on the GIL, and the writer's many short
database calls would wait for it each time. A forked process does the reading on another
core while this one writes.

The process is forked once, before the writer has grown (its database page cache, its
per-unit caches), and then serves every shard of the ingest: a process forked later would
carry a copy of all that memory. It prepares up to AHEAD_BYTES of items ahead of the
consumer, so it keeps working while the writer flushes, and memory stays bounded.

An exception in a job is raised here. If this side stops consuming a job early (an error
while writing, Ctrl-C), the process is stopped and a new one serves the next job; if this
process dies, the reader's next send fails and it exits. Without `fork` (not Linux), jobs
simply run in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_ITEM, _DONE, _ERROR = "item", "done", "error"

# Bytes of pickled items the reader may have ready before the consumer takes them: enough to
# keep producing through a flush of the writer's queued rows, and a bound on their memory.
AHEAD_BYTES = 8 << 20
# The reader's sender and Arrow read-ahead threads each wait for the GIL after every
# blocking call; at the default 5 ms switch interval, behind the reader's own Python, that
# wait would delay every batch. Switching more often costs the reader little.
SWITCH_INTERVAL = 0.0005  # seconds
# The reader works ahead of the writer, which (with the database server) decides when the
# ingest ends: where they compete for a core, the writer should have it. Measured on 2 cores:
# ingests 3-5 % faster on both backends than at the writer's own priority.
READER_NICENESS = 10
# A batch is a megabyte or more; through the default 64 KiB pipe it would cross in dozens of
# round trips between the two processes. Linux lets an unprivileged process grow a pipe up
# to /proc/sys/fs/pipe-max-size (1 MiB by default).
PIPE_BYTES = 1 << 20


class WorkerDied(Exception):
    """The reader ended without saying why (killed, out of memory)."""


class Reader:
    """Runs jobs in one forked process, one job at a time. Use as a context manager; the
    process is forked for the first job (an ingest that skips every shard forks nothing)."""

    def __init__(self) -> None:
        self._process = None
        self._forkable = "fork" in multiprocessing.get_all_start_methods()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def run(self, produce: Callable[..., Iterator[T]], *args: Any) -> Iterator[T]:
        """The items of produce(*args), made in the reader process."""
        if not self._forkable:
            yield from produce(*args)
            return
        if self._process is None:
            self._start()
        try:
            self._jobs.send((produce, args))
        except OSError:  # it died between jobs: a new one takes this job
            self._stop()
            self._start()
            self._jobs.send((produce, args))
        finished = False
        try:
            while True:
                try:
                    kind, value = pickle.loads(self._items.recv_bytes())
                except EOFError:
                    self._process.join()
                    raise WorkerDied(
                        f"the reader process ended unexpectedly (exit code {self._process.exitcode})") from None
                if kind == _ITEM:
                    yield value
                else:
                    finished = True
                    if kind == _ERROR:
                        raise value
                    return
        finally:
            if not finished:
                self._stop()  # it is still producing this job's items: start afresh next time

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")
        self._items, items_out = context.Pipe(duplex=False)
        jobs_in, self._jobs = context.Pipe(duplex=False)
        _widen(items_out)
        self._process = context.Process(target=_serve, args=(jobs_in, items_out, (self._items, self._jobs)),
                                        name="ingest-reader", daemon=True)
        self._process.start()
        jobs_in.close()
        items_out.close()

    def _stop(self) -> None:
        if self._process is None:
            return
        self._jobs.close()  # a reader waiting for a job sees the end and exits
        self._items.close()  # a reader sending items sees a broken pipe
        self._process.join(timeout=1)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        self._process = None


def _widen(connection) -> None:
    try:
        import fcntl

        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or a lower limit: the default size works, only slower


def _serve(jobs, items, consumer_ends) -> None:
    """The reader process: run each job it is sent until the job pipe closes."""
    # The fork copied the consumer's ends of both pipes; while this process holds them it
    # would never see the consumer close them.
    for end in consumer_ends:
        end.close()
    # Ctrl-C is the consumer's to handle: it stops this process by closing the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.setswitchinterval(SWITCH_INTERVAL)
    os.nice(READER_NICENESS)
    try:
        while True:
            try:
                produce, args = jobs.recv()
            except EOFError:
                return
            if not _run(produce, args, items):
                return
    finally:
        items.close()


def _run(produce: Callable[..., Iterator[Any]], args: tuple, items) -> bool:
    """Send a job's items, pickled here and written by a sender thread, so producing goes on
    while the consumer is busy and not reading. False when the consumer is gone."""
    outbox: queue.Queue[bytes | None] = queue.Queue()
    room = threading.Semaphore(AHEAD_BYTES >> 16)  # in 64 KiB units
    gone = threading.Event()

    def sender() -> None:
        try:
            while (data := outbox.get()) is not None:
                items.send_bytes(data)
                for _ in range(_units(data)):
                    room.release()
        except OSError:  # BrokenPipeError, ConnectionResetError: the consumer closed its end
            gone.set()

    def put(message: tuple) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        for _ in range(_units(data)):
            while not room.acquire(timeout=0.1):
                if gone.is_set():
                    raise BrokenPipeError
        outbox.put(data)

    thread = threading.Thread(target=sender, name="ingest-reader-send", daemon=True)
    thread.start()
    try:
        try:
            for item in produce(*args):
                put((_ITEM, item))
            put((_DONE, None))
        except BrokenPipeError:
            return False
        except BaseException as exc:  # raised again on the consumer's side
            try:
                put((_ERROR, exc))
            except (pickle.PicklingError, TypeError, AttributeError):
                put((_ERROR, RuntimeError(f"{type(exc).__name__}: {exc}")))
    except BrokenPipeError:
        return False
    finally:
        outbox.put(None)
        thread.join()
    return not gone.is_set()


def _units(data: bytes) -> int:
    # An item larger than the whole allowance still goes, alone.
    return max(1, min(len(data) >> 16, AHEAD_BYTES >> 16))
