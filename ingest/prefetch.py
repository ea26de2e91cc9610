"""Read ahead in a thread while the caller works on what was read.

Meant for items whose making releases the GIL for long stretches (Arrow reading and
decompressing a Parquet row group): the thread then runs in parallel with the caller's
Python. The queue is small: memory stays bounded by a few items, not by the file."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            q.put((_DONE, exc))

    thread = threading.Thread(target=produce, name="ingest-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = q.get()
            if item is _DONE:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        # The consumer stopped early (an error while writing): let the reader finish quietly.
        stop.set()
        thread.join()
