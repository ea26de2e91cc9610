"""The bounds every trace directory is read within, so that no input can take an ingest past
about 1 GB of memory (measured in tests/test_bad_input.py): each has a default and is set by an
environment variable, read when it is used (the reader process inherits it). A unit past one is
refused in one line naming the file; the rest still load."""

from __future__ import annotations

import os
from dataclasses import dataclass

from warehouse.errors import WarehouseError


@dataclass(frozen=True)
class Limit:
    variable: str
    default: int

    def get(self) -> int:
        raw = os.environ.get(self.variable, "").strip()
        if not raw:
            return self.default
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise WarehouseError(f"{self.variable}={raw!r}: expected a whole number above 0")
        return value


# The bytes of one file the reader reads whole (JSON, verifier output, exception.txt), and of
# all the files one trial is read from together (its own, its job's, a job result.json above
# it). These are what bound a trial's memory: JSON read, kept and written takes up to about 70
# times its size ({"":{}} is 7 bytes of text, 248 of Python objects, and as many again on its way
# to the database): 12 MiB of it measured 0.9 GB, the worst input known.
FILE_BYTES = Limit("WAREHOUSE_MAX_FILE_BYTES", 12 << 20)
TRIAL_BYTES = Limit("WAREHOUSE_MAX_TRIAL_BYTES", 12 << 20)
# A trial's result.json is read as a stream that skips its token ids and chat log (RL rollouts
# reach hundreds of MB that way): on disk it may be this many times FILE_BYTES; what is left of
# it counts against FILE_BYTES and TRIAL_BYTES.
RESULT_FILE_FACTOR = 64
# Steps of one trajectory (a file, or one embedded in it): each becomes a turn or two, built
# before the episodes are.
STEPS = Limit("WAREHOUSE_MAX_STEPS", 100_000)
# Turns one trial's conversations store: a trajectory's episodes share its turns, so n agent
# steps with observations store 2n + 1 (1,000: 2,001). The byte bounds keep a trial far below
# the default; a lower setting refuses one sooner.
TURN_ROWS = Limit("WAREHOUSE_MAX_TURN_ROWS", 2_000_000)

ALL = (FILE_BYTES, TRIAL_BYTES, STEPS, TURN_ROWS)


def check() -> None:
    """Every limit's setting, checked before an ingest begins: a mistyped one is one error."""
    for limit in ALL:
        limit.get()
