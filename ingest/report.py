"""What an ingest tells its caller: the running summary, progress, and failed units."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ingest.write import writer
from warehouse.errors import first_line, interruption


@dataclass
class Summary:
    units_loaded: int = 0
    units_skipped: int = 0
    units_failed: int = 0
    rows: int = 0
    trials: int = 0
    trials_incomplete: int = 0
    trials_atif_problems: int = 0  # trials whose trajectories fail strict ATIF validation (detail.validation)
    trials_removed: int = 0  # unfinished trials their jobs deleted (ingest.write.removal)
    episodes_new: int = 0
    episodes_duplicate: int = 0
    conflicts: int = 0  # conflicting episodes
    trial_conflicts: int = 0  # conflicting trials: each once per unit, whatever its fields
    rows_rejected: int = 0
    turns: int = 0
    turns_stored: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    statistics_seconds: float = 0.0  # of `seconds`: the planner statistics refreshed at the end
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    database: str | None = None  # where it went, as it may be shown (warehouse.db.engine.redact)
    stopped: str | None = None  # why the ingest ended before its last unit (stopping_reason)

    def add(self, counts: writer.UnitCounts) -> None:
        self.units_loaded += 1
        self.rows += counts.n_rows + counts.n_rejected
        self.trials += counts.n_trials
        self.trials_removed += len(counts.removed)
        self.episodes_new += counts.n_episodes_new
        self.episodes_duplicate += counts.n_episodes_duplicate
        self.conflicts += counts.n_conflicts
        self.trial_conflicts += counts.n_trial_conflicts
        self.rows_rejected += counts.n_rejected
        self.turns += counts.n_turns
        self.turns_stored += counts.n_turns_stored
        self.notes += counts.conflicts
        self.notes += [f"{r.where}: rejected: {r.reason}" for r in counts.rejected]

    def lines(self) -> list[str]:
        out = [
            f"units: {self.units_loaded} loaded, {self.units_skipped} skipped (already loaded), "
            f"{self.units_failed} failed",
            f"episodes: {self.episodes_new} new, {self.episodes_duplicate} duplicate; conflicts: "
            f"{self.conflicts} conflicting episodes, {self.trial_conflicts} conflicting trials; "
            f"rows rejected: {self.rows_rejected}",
            f"trials: {self.trials} in loaded units ({self.trials_incomplete} incomplete); "
            f"turns: {self.turns} in new episodes, {self.turns_stored} stored; {self.seconds:.1f}s",
        ]
        if self.trials_atif_problems:
            out.append(f"trials: {self.trials_atif_problems} with ATIF problems, loaded with what could be read "
                       f"(see detail.validation)")
        if self.trials_removed:
            out.append("trials: 1 removed (an unfinished trial the job deleted)" if self.trials_removed == 1 else
                       f"trials: {self.trials_removed} removed (unfinished trials their jobs deleted)")
        if self.database is not None:
            out.append(f"database: {self.database}")
        return out


class Progress:
    """What the pipeline reports as it goes, over the whole ingest; the CLI draws it, tests
    ignore it. `plan` comes once, before the first unit; each unit then begins with `unit` (which
    also ends the one before it, however that one ended: loaded, skipped or failed), and a shard
    being written reports its rows with `rows`; `close` ends the last unit and the ingest."""

    def plan(self, units: int, nbytes: int) -> None: ...
    def unit(self, source: str, name: str, nbytes: int) -> None: ...
    def rows(self, done: int, total: int) -> None: ...
    def close(self) -> None: ...


def fail(summary: Summary, message: str, warn: Callable[[str], None]) -> None:
    """A unit that could not be loaded: nothing of it was written; the run goes on."""
    summary.units_failed += 1
    summary.errors.append(message)
    warn(message)


def is_database_error(exc: BaseException) -> bool:
    """An error the database raised while a unit was written: SQLAlchemy's, or the driver's own
    from the bulk writer's raw cursors (a value a column cannot hold, a lock timeout). The unit's
    transaction is rolled back; the caller reports it in one line and goes on with the others.
    psycopg is looked up, not imported: a SQLite ingest never loads it."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    psycopg = sys.modules.get("psycopg")
    return isinstance(exc, (DBAPIError, sqlite3.Error)) or (psycopg is not None and isinstance(exc, psycopg.Error))


def database_error_message(where: object, exc: BaseException) -> str:
    return f"{where}: the database refused it ({first_line(getattr(exc, 'orig', None) or exc)})"


CONNECTION_LOST = "the connection to the database was lost"


class IngestStopped(Exception):
    """The database can take nothing more (its disk is full, its connection is gone): every
    remaining unit would fail the same way. Reported already, in one line; the ingest ends."""


def stopping_reason(exc: BaseException) -> str | None:
    """Why no later unit can load either, when `exc` says so: a full disk (SQLite's SQLITE_FULL,
    PostgreSQL's disk_full, ENOSPC), or a connection to PostgreSQL that broke (the server shut
    down or restarted, the backend was terminated)."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, OSError) and orig.errno == errno.ENOSPC:
        return "the disk is full"
    if isinstance(orig, sqlite3.Error) and getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return "the database or its disk is full"
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(orig, psycopg.Error):
        state = orig.sqlstate or ""
        if state == "53100":
            return "the database server's disk is full"
        # No SQLSTATE: the connection itself failed; class 08 and 57P: connection exceptions
        # and the server shutting down or terminating this backend.
        if isinstance(orig, psycopg.OperationalError) and (not state or state.startswith(("08", "57P"))):
            return CONNECTION_LOST
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return CONNECTION_LOST
    return None


def is_fatal(summary: Summary, warn: Callable[[str], None], where: object, exc: BaseException) -> bool:
    """Whether `exc` leaves no later unit a chance; if so it is reported, in the one line the
    ingest ends with."""
    reason = stopping_reason(exc)
    if reason is None:
        return False
    summary.stopped = reason
    fail(summary, f"{where}: {reason} ({first_line(getattr(exc, 'orig', None) or exc)}); the ingest stopped, "
                  f"the {summary.units_loaded} units loaded before it are kept", warn)
    return True


@contextmanager
def one_unit(summary: Summary, warn: Callable[[str], None], where: object,
             describe: Callable[[Exception], str | None]) -> Iterator[None]:
    """Around the loading of one unit: a unit another ingest committed first counts as skipped;
    an error `describe` turns into a message (bad input), a database error, or input nested past
    what a recursive walk can follow (the readers refuse such JSON first; this is the belt) fails
    this unit alone, in one line, and the ingest goes on; a full disk or a lost connection ends
    the ingest (IngestStopped) after one line; anything else is a bug and propagates."""
    try:
        yield
    except writer.AlreadyLoaded:
        summary.units_skipped += 1
    except Exception as exc:
        if (stop := interruption(exc)) is not None:
            raise stop from None
        if is_fatal(summary, warn, where, exc):
            raise IngestStopped from None
        message = describe(exc)
        if message is None and is_database_error(exc):
            message = database_error_message(where, exc)
        if message is None and isinstance(exc, RecursionError):
            message = f"{where}: nested too deeply to read ({first_line(exc)})"
        if message is None:
            raise
        fail(summary, message, warn)


def relative_unit(path: Path, root: Path) -> str:
    """A unit's name in the ledger: its path inside the source."""
    try:
        return str(Path(path).relative_to(root)) or "."
    except ValueError:
        return str(path)
