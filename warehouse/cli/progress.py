"""The ingest's progress on a terminal: one line for the whole ingest (units and bytes done of
the total, rate, time left, the source and file being loaded), redrawn in place with `\\r`, as
pip and gh draw theirs. It implements ingest.report.Progress (not imported: the CLI starts
without the ingest modules)."""

from __future__ import annotations

import os
import time
from typing import IO

from warehouse.display import printable

# Redraws at most this often: a trace root of many small trials starts units faster than a
# terminal is worth repainting.
_REDRAW_SECONDS = 0.1
_SEP = " · "


class ProgressLine:
    """Counts against the totals `plan` gave; the last line drawn stays, done, when it closes."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._units = self._bytes = 0  # the totals
        self._units_done = self._bytes_done = 0  # the units before the current one
        self._current = ""  # the source and file of the current unit
        self._current_bytes = 0
        self._fraction = 0.0  # of the current unit, by its rows
        self._started = self._drawn_at = 0.0
        self._shown = False  # a line is on the screen, the cursor at its end
        self._active = False  # a unit is under way

    # --- ingest.report.Progress ----------------------------------------------------------------

    def plan(self, units: int, nbytes: int) -> None:
        self._units, self._bytes = units, nbytes
        self._started = time.monotonic()

    def unit(self, source: str, name: str, nbytes: int) -> None:
        self._end_unit()
        self._active = True
        self._current = f"{source} {name}".strip()
        self._current_bytes, self._fraction = nbytes, 0.0
        self._draw()

    def rows(self, done: int, total: int) -> None:
        self._fraction = min(done / total, 1.0) if total else 1.0
        self._draw()

    def close(self) -> None:
        self._end_unit()
        if self._units:
            self._draw(final=True)
            self._out.write("\n")
            self._out.flush()
            self._shown = False

    # --- for the CLI -----------------------------------------------------------------------------

    def clear(self) -> None:
        """Take the line off the screen, so that a message can be printed where it was; the next
        update draws it again."""
        if self._shown:
            self._out.write("\r\x1b[K")
            self._out.flush()
            self._shown = False
            self._drawn_at = 0.0

    # --- drawing ---------------------------------------------------------------------------------

    def _end_unit(self) -> None:
        if self._active:
            self._units_done += 1
            self._bytes_done += self._current_bytes
            self._active = False
            self._current, self._current_bytes, self._fraction = "", 0, 0.0

    def _draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and self._shown and now - self._drawn_at < _REDRAW_SECONDS:
            return
        self._drawn_at = now
        line = self._line(now - self._started, final)
        self._out.write("\r" + line + "\x1b[K")
        self._out.flush()
        self._shown = True

    def _line(self, elapsed: float, final: bool) -> str:
        done_bytes = self._bytes_done + self._current_bytes * self._fraction
        parts = [f"{self._units_done}/{self._units} units"]
        if self._bytes:
            parts.append(f"{_size(done_bytes, self._bytes)}/{_size(self._bytes, self._bytes)}")
        # The rate and the time left go by bytes where there are any (shards differ in size),
        # else by units (trial directories).
        done, total = (done_bytes, self._bytes) if self._bytes else (self._units_done, self._units)
        if elapsed > 0 and done:
            rate = done / elapsed
            parts.append(f"{_size(rate, rate)}/s" if self._bytes else f"{rate:.1f} units/s")
        if final:
            parts.append(f"done in {_duration(elapsed)}")
        else:
            left = elapsed * (total - done) / done if done else None
            parts.append(f"ETA {_duration(left)}")
            if self._current:
                parts.append(printable(self._current))
        line = _SEP.join(parts)
        width = _width(self._out) - 1  # the last column would wrap on some terminals
        return line if len(line) <= width else _cut(line, width)


def _size(n: float, scale: float) -> str:
    """`n` bytes in the unit that suits `scale` (so that done and total share one unit)."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6)):
        if scale >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n / 1e3:.0f} kB"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _width(out: IO[str]) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns or 80  # 0: a terminal that never said
    except (OSError, ValueError, AttributeError):
        return 80


def _cut(line: str, width: int) -> str:
    """The line shortened in the middle of its last part (the file name, whose end says which
    shard it is), or cut at the end when the counts alone are too wide."""
    head, _, name = line.rpartition(_SEP)
    room = width - len(head) - len(_SEP)
    if head and room >= 9:
        keep = room - 1
        return f"{head}{_SEP}{name[:keep // 2]}…{name[len(name) - (keep - keep // 2):]}"
    return line[:width]


class WatchLine:
    """`ingest --watch` on a terminal: one line, redrawn, of what the watch has done so far and
    how far each job it follows is (its trials done of its total, as Harbor's result.json counts
    them); a failure is printed above it, as a line of its own."""

    def __init__(self, out: IO[str], what: str) -> None:
        self._out, self._what = out, what
        self._shown = False
        self._last = ""

    def update(self, totals, last: str | None) -> None:
        """`totals`: an ingest.watch.Totals (not imported: the CLI starts without the ingest modules)."""
        parts = [f"watching {self._what}", f"{totals.loaded} loaded", f"{totals.failed} failed"]
        for job, (done, total) in list(totals.jobs.items())[-3:]:
            if total:
                parts.append(f"{printable(os.path.basename(job))} {done}/{total} trials done")
        if last:
            self._last = last
        if self._last:
            parts.append(f"last: {printable(self._last)}")
        line = _SEP.join(parts)
        width = _width(self._out) - 1
        self._out.write("\r" + (line if len(line) <= width else _cut(line, width)) + "\x1b[K")
        self._out.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._out.write("\r\x1b[K")
            self._out.flush()
            self._shown = False

    def close(self) -> None:
        if self._shown:
            self._out.write("\n")
            self._out.flush()
            self._shown = False
