"""Read ahead in a thread while the caller works on what was read.

Meant for items whose making releases the GIL for long stretches (Arrow reading and
decompressing a Parquet row group): the thread then runs in parallel with the caller's
Python. The queue is small: memory stays bounded by a few items, not by the file.

A consumer that stops early (its own consumer gone, an error) must never wait for the thread
for ever: every put of the thread gives up once the consumer has stopped, its last one (the
end, or an error) included, so the thread ends within one item's making."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()
# How often a thread waiting for room in the queue checks that its consumer still takes items.
PUT_POLL = 0.1  # seconds


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[Any, BaseException | None]) -> bool:
        """False once the consumer has stopped."""
        while not stop.is_set():
            try:
                q.put(entry, timeout=PUT_POLL)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            put((_DONE, exc))

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
        # The consumer stopped early (an error while writing, its consumer gone): the thread
        # ends at its next put, once the item it is making is made.
        stop.set()
        thread.join()
