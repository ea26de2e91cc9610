"""The cyclic garbage collector, paused while a unit is read and written.

An ingest allocates millions of short tuples, strings and dicts, none of them in reference
cycles, and keeps many of them in its per-unit caches: each of the collector's passes, triggered
by the allocations alone, rescans what the caches hold, and frees nothing that reference counting
would not. Measured on the math profile (one unit): the writer's batches 8 % and the reader's
work 17 % faster with it paused. Whatever cycles a unit does make wait for its end, when the
collector runs again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    if not gc.isenabled():  # paused already (a unit inside an ingest that paused it)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
