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
                kind, value = receive.recv()
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
    try:
        for item in produce(*args):
            send.send((_ITEM, item))
        send.send((_DONE, None))
    except BrokenPipeError:
        return  # the consumer is gone: nothing to report to
    except BaseException as exc:  # raised again on the consumer's side
        try:
            send.send((_ERROR, exc))
        except (pickle.PicklingError, TypeError, AttributeError):
            send.send((_ERROR, RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        send.close()
