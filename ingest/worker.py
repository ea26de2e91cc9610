"""Run a generator in a worker process and consume its items here.

Reading and preparing a Parquet shard (decoding, hashing, shaping rows) is Python work, and
so is writing it; two threads would take turns on the GIL, and the writer's many short
database calls would wait for it each time. A forked process does the reading on another
core while this one writes. Items come back over a pipe; the worker is at most one item
ahead, so memory stays bounded by a couple of batches.

An exception in the worker is raised here. If this side stops early (an error while
writing, Ctrl-C), the worker is stopped; if this process dies, the worker's next send fails
and it exits. Without `fork` (not Linux), the generator simply runs in this process.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_ITEM, _DONE, _ERROR = "item", "done", "error"


class WorkerDied(Exception):
    """The worker ended without saying why (killed, out of memory)."""


def in_worker(produce: Callable[..., Iterator[T]], *args: Any) -> Iterator[T]:
    if "fork" not in multiprocessing.get_all_start_methods():
        yield from produce(*args)
        return
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    _widen(send)
    process = context.Process(target=_run, args=(send, produce, args), name="ingest-reader", daemon=True)
    process.start()
    send.close()
    try:
        while True:
            try:
                kind, value = pickle.loads(receive.recv_bytes())
            except EOFError:
                process.join()
                raise WorkerDied(f"the reader process ended unexpectedly (exit code {process.exitcode})") from None
            if kind == _ITEM:
                yield value
            elif kind == _DONE:
                return
            else:
                raise value
    finally:
        receive.close()
        if process.is_alive():
            process.terminate()
        process.join()


# Items the worker may have ready before the consumer takes them: enough to keep producing
# through a flush of the writer's queued rows, few enough to bound the memory they hold.
AHEAD = 8
SWITCH_INTERVAL = 0.0005  # seconds

# A batch is a few megabytes; through the default 64 KiB pipe it would cross in dozens of
# round trips between the two processes. Linux lets an unprivileged process grow a pipe up
# to /proc/sys/fs/pipe-max-size (1 MiB by default).
PIPE_BYTES = 1 << 20


def _widen(connection) -> None:
    try:
        import fcntl

        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # not Linux, or a lower limit: the default size works, only slower


def _run(send, produce: Callable[..., Iterator[Any]], args: tuple) -> None:
    """The worker: produce items, pickle them, and hand them to a sender thread, so that
    producing goes on while the consumer is busy (writing a large flush) and not reading."""
    # The sender and the Arrow read-ahead thread each wait for the GIL after every blocking
    # call; at the default 5 ms switch interval that wait, behind this thread's Python, would
    # delay every batch. Switching more often costs this process little.
    sys.setswitchinterval(SWITCH_INTERVAL)
    outbox: queue.Queue[bytes | None] = queue.Queue(maxsize=AHEAD)
    gone = threading.Event()  # the consumer closed the pipe

    def sender() -> None:
        try:
            while (data := outbox.get()) is not None:
                send.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError):
            gone.set()

    thread = threading.Thread(target=sender, name="ingest-reader-send", daemon=True)
    thread.start()

    def put(message: tuple) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        while not gone.is_set():
            try:
                outbox.put(data, timeout=0.1)
                return
            except queue.Full:
                continue
        raise BrokenPipeError

    try:
        try:
            for item in produce(*args):
                put((_ITEM, item))
            put((_DONE, None))
        except BrokenPipeError:
            return  # the consumer is gone: nothing to report to
        except BaseException as exc:  # raised again on the consumer's side
            try:
                put((_ERROR, exc))
            except (pickle.PicklingError, TypeError, AttributeError):
                put((_ERROR, RuntimeError(f"{type(exc).__name__}: {exc}")))
        outbox.put(None)
        thread.join()
    except BrokenPipeError:
        return
    finally:
        send.close()
