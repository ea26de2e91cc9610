"""A reader process: it runs generators (jobs) and this process consumes their items.

Reading and preparing a Parquet shard (decoding, hashing, shaping rows) is Python work, and
so is writing it; two threads would take turns on the GIL, and the writer's many short
database calls would wait for it each time. A forked process does the reading on another
core while this one writes.

The process is forked once, before the writer has grown (its database page cache, its
per-unit caches), and then serves every shard of the ingest: a process forked later would
carry a copy of all that memory.

Items cross in a ring of shared memory: the reader pickles each into the ring and sends only
its place through a pipe; the consumer unpickles it from there and gives the room back. An
item of a megabyte through a pipe would cross in a ping-pong of partial writes and reads, in
which each side waits for the other to be scheduled (measured: most of the time the writer
spent waiting for batches). The ring holds up to AHEAD_BYTES, so the reader keeps working while
the writer flushes, and memory stays bounded.

An exception in a job is raised here. If this side stops consuming a job early (an error
while writing, Ctrl-C), the process is stopped and a new one serves the next job.

The reader never outlives this process. The kernel kills it when this process dies (Linux's
parent-death signal), and every wait of its own (for a job, for room in the ring, to send
through the pipe) ends when this side is gone. Nor does it keep this process's connections
alive: the fork copied every open socket (a PostgreSQL session, holding the ingest's write lock
inside a unit), and a copy held by a reader that lived on would keep the server from seeing
this side die. The reader replaces each inherited socket with /dev/null as it starts. Signals
are this side's to handle (Ctrl-C reaches the whole process group; SIGTERM ends an ingest here,
which stops the reader). Without `fork` (not Linux), jobs simply run in this process.
"""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import os
import pickle
import select
import signal
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ingest.process import collector

T = TypeVar("T")

_ITEM, _DONE, _ERROR = "item", "done", "error"

# Bytes of pickled items the reader may have ready before the consumer takes them (the size of
# the ring): enough to keep producing through a flush of the writer's queued rows, and a bound
# on their memory. Room is counted in units of ROOM_UNIT bytes.
AHEAD_BYTES = 8 << 20
ROOM_UNIT = 1 << 16
# An item larger than this goes through the pipe instead (a row of many megabytes): the ring
# takes items of up to half its size, so one always fits once the items before it are taken.
RING_ITEM_MAX = AHEAD_BYTES // 2
# Where an item is: (offset in the ring, or -1 when it follows through the pipe; its length;
# the units of room it took, to give back).
_PLACE = struct.Struct("qqq")
# The reader's Arrow read-ahead thread waits for the GIL after every blocking call; at the
# default 5 ms switch interval, behind the reader's own Python, that wait would delay every
# batch. Switching more often costs the reader little.
SWITCH_INTERVAL = 0.0005  # seconds
# The reader works ahead of the writer, which (with the database server) decides when the
# ingest ends: where they compete for a core, the writer should have it (measured on 2 idle
# cores, at nice 10: ingests 3-5 % faster on both backends than at the writer's own priority).
# Only a little nicer, though: on a machine busy with other work, a reader at nice 10 gets a
# tenth of a normal process's share and the writer waits for it (measured at load 20 on 2 cores,
# SQLite, math, whole process, medians of 3: 53.5 s at nice 10, 29.0 s at nice 0, 26.5 s at
# nice 2 against 25.1 s at nice 0).
READER_NICENESS = 2
# How often a reader waiting for room checks that its consumer is still there.
ROOM_POLL = 0.05  # seconds
_STOPS = {signal.SIGINT, signal.SIGTERM}
# prctl(2): the signal the kernel sends this process when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


class WorkerDied(Exception):
    """The reader ended without saying why (killed, out of memory)."""


class Reader:
    """Runs jobs in one forked process, one job at a time. Use as a context manager; the
    process is forked for the first job (an ingest that skips every shard forks nothing)."""

    def __init__(self) -> None:
        self._process = None
        self._forkable = "fork" in multiprocessing.get_all_start_methods()
        self._jobs_sent = 0
        self._open_job: int | None = None  # the job sent whose items are not all taken yet

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def run(self, produce: Callable[..., Iterator[T]], *args: Any) -> Iterator[T]:
        """The items of produce(*args), made in the reader process, which starts on them at
        once: the caller may prepare the unit meanwhile. Items left untaken (the iterator
        closed or dropped) stop the process; the next job gets a new one."""
        if not self._forkable:
            return produce(*args)
        if self._open_job is not None:  # the last job's iterator was dropped before it was done
            self._stop()
        if self._process is None:
            self._start()
        try:
            self._jobs.send((produce, args))
        except OSError:  # it died between jobs: a new one takes this job
            self._stop()
            self._start()
            self._jobs.send((produce, args))
        self._jobs_sent += 1
        self._open_job = self._jobs_sent
        return self._job_items(self._jobs_sent)

    def _job_items(self, job: int) -> Iterator[Any]:
        try:
            while True:
                kind, value = self._receive()
                if kind == _ITEM:
                    yield value
                else:
                    self._open_job = None
                    if kind == _ERROR:
                        raise value
                    return
        finally:
            # Still producing this job's items: start afresh next time. (An iterator dropped
            # after the next job began, and collected only then, leaves that job alone.)
            if self._open_job == job:
                self._stop()

    def _receive(self) -> tuple[str, Any]:
        try:
            offset, length, units = _PLACE.unpack(self._items.recv_bytes())
            if offset < 0:
                return pickle.loads(self._items.recv_bytes())
        except EOFError:
            self._process.join()
            raise WorkerDied(f"the reader process ended unexpectedly (exit code {self._process.exitcode})") from None
        with memoryview(self._ring) as ring:
            message = pickle.loads(ring[offset:offset + length])
        for _ in range(units):
            self._room.release()
        return message

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")
        self._items, items_out = context.Pipe(duplex=False)
        jobs_in, self._jobs = context.Pipe(duplex=False)
        self._ring = mmap.mmap(-1, AHEAD_BYTES)  # anonymous and shared: the fork maps it too
        self._room = context.Semaphore(AHEAD_BYTES // ROOM_UNIT)
        outbox = _Outbox(items_out, self._ring, self._room, os.getpid())
        self._process = context.Process(target=_serve, args=(jobs_in, outbox, (self._items, self._jobs)),
                                        name="ingest-reader", daemon=True)
        # The fork starts with Ctrl-C and SIGTERM blocked, so that one landing before _serve
        # ignores them cannot end it with a traceback of its own (seen 1 in 200 stops); here
        # they wait until the fork is made, and are then taken as ever.
        stops = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, stops)
        jobs_in.close()
        items_out.close()

    def _stop(self) -> None:
        self._open_job = None
        if self._process is None:
            return
        self._jobs.close()  # a reader waiting for a job sees the end and exits
        self._items.close()  # a reader sending items, or waiting for room, sees its pipe broken
        self._process.join(timeout=1)
        if self._process.is_alive():  # (it ignores SIGTERM: see _serve)
            self._process.kill()
            self._process.join()
        self._process = None
        self._ring.close()


class _Outbox:
    """The reader's end: items pickled into the ring, their places sent through the pipe."""

    def __init__(self, pipe, ring: mmap.mmap, room, consumer: int) -> None:
        self.pipe = pipe
        self.ring = ring
        self.room = room
        self.consumer = consumer  # its process id
        self.end = 0  # where the next item goes, unless it must wrap around to 0

    def put(self, message: tuple) -> None:
        """Raises BrokenPipeError when the consumer is gone. A send waits no longer than the
        consumer lives: its end of the pipe closes with it (this process closed its copy)."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > RING_ITEM_MAX:
            self.pipe.send_bytes(_PLACE.pack(-1, len(data), 0))
            self.pipe.send_bytes(data)
            return
        wraps = self.end + len(data) > len(self.ring)
        offset = 0 if wraps else self.end
        # The room taken includes the ring's tail an item wrapping around skips. Items are
        # taken in order, so once these units are ours, [offset, offset + len) holds no item
        # the consumer has not taken yet.
        taken = len(data) + (len(self.ring) - self.end if wraps else 0)
        units = -(-taken // ROOM_UNIT)
        for _ in range(units):
            while not self.room.acquire(timeout=ROOM_POLL):
                if self._consumer_gone():
                    raise BrokenPipeError
        self.ring[offset:offset + len(data)] = data
        self.end = offset + len(data)
        self.pipe.send_bytes(_PLACE.pack(offset, len(data), units))

    def _consumer_gone(self) -> bool:
        if os.getppid() != self.consumer:  # it died (this process now belongs to another)
            return True
        # The write end of a pipe whose read end is closed polls as an error.
        poll = select.poll()
        poll.register(self.pipe.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0))

    def close(self) -> None:
        self.pipe.close()


def _serve(jobs, outbox: _Outbox, consumer_ends) -> None:
    """The reader process: run each job it is sent until the job pipe closes."""
    _die_with(outbox.consumer)
    # The fork copied the consumer's ends of both pipes; while this process holds them it
    # would never see the consumer close them.
    for end in consumer_ends:
        end.close()
    _release_inherited_sockets()
    # Ctrl-C and SIGTERM are the consumer's to handle: it stops this process by closing the
    # pipes (or, failing that, kills it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # blocked since the fork: now ignored
    sys.setswitchinterval(SWITCH_INTERVAL)
    os.nice(READER_NICENESS)
    try:
        while True:
            try:
                produce, args = jobs.recv()
            except EOFError:
                return
            if not _run(produce, args, outbox):
                return
    finally:
        outbox.close()


def _die_with(consumer: int) -> None:
    """Have the kernel kill this process when the consumer dies (Linux; elsewhere the waits'
    own checks must do), and exit now if it died before that was set. (Strictly, when the
    consumer's thread that forked it ends: the one running the ingest, which outlives it.)"""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        pass
    else:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != consumer:
        os._exit(0)


def _release_inherited_sockets() -> None:
    """Point every socket the fork copied (past stdin, stdout and stderr) at /dev/null: the
    consumer's database connections stay its own, and close when it dies. The descriptors stay
    taken, so an object of the consumer's still holding one (never used here) cannot close a
    file this process opened since."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc (not Linux)
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            if fd > 2 and fd != null:
                try:
                    if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                        os.dup2(null, fd)
                except OSError:  # (the descriptor listdir itself used, closed since)
                    continue
    finally:
        os.close(null)


def _run(produce: Callable[..., Iterator[Any]], args: tuple, outbox: _Outbox) -> bool:
    """Send a job's items; False when the consumer is gone."""
    with collector.paused():
        return _send_items(produce, args, outbox)


def _send_items(produce: Callable[..., Iterator[Any]], args: tuple, outbox: _Outbox) -> bool:
    try:
        try:
            for item in produce(*args):
                outbox.put((_ITEM, item))
            outbox.put((_DONE, None))
        except (BrokenPipeError, ConnectionResetError):  # the consumer is gone
            return False
        except BaseException as exc:  # the job's own error: raised again on the consumer's side
            try:
                outbox.put((_ERROR, exc))
            except (pickle.PicklingError, TypeError, AttributeError):
                outbox.put((_ERROR, RuntimeError(f"{type(exc).__name__}: {exc}")))
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True
