"""Errors a user can act on. The CLI prints them as one line and exits 1; nothing else does.
And a stop asked for by a signal (Ctrl-C, SIGTERM), which the CLI ends in one line too."""

import signal


class WarehouseError(Exception):
    """A runtime or data error with a message fit to show as is."""


class SchemaError(WarehouseError):
    """The database's schema is not the one this version of the tool was built for."""


def first_line(error: BaseException | str) -> str:
    """The first line of an error's message: what a one-line report shows of a library's or a
    driver's error (their messages often run on with details and hints)."""
    lines = str(error).strip().splitlines()
    if lines:
        return lines[0]
    return type(error).__name__ if isinstance(error, BaseException) else "unknown error"


def database_error(error: BaseException) -> WarehouseError:
    """A database error a user can act on (SQLAlchemy's DBAPIError: a server that does not
    answer, SQL that does not parse, a file that is not a database), as one line."""
    return WarehouseError(f"database error: {first_line(getattr(error, 'orig', None) or error)}")


class UsageError(WarehouseError):
    """An API call given an argument it cannot take (a Python caller's mistake), in one line."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument of a type the call does not take: still a TypeError to `except TypeError`."""


class ArgumentValueError(UsageError, ValueError):
    """An argument of the right type but a value the call refuses (a threshold that is not a
    finite number in its range, a confidence level outside (0, 1)): still a ValueError. The CLI's
    options share it, and print it in one line as every WarehouseError."""


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal, raised where the program is, as Python raises Ctrl-C's
    KeyboardInterrupt: what is being written rolls back on the way out (and psycopg cancels a
    statement in flight). `detail`: what the command says of what it kept."""

    def __init__(self, signum: int = signal.SIGTERM, detail: str | None = None) -> None:
        super().__init__(signum)
        self.signum = signal.Signals(signum)
        self.detail = detail


def stop_on_sigterm() -> None:
    """SIGTERM raises Interrupted from now on (its default ends the process where it stands:
    no rollback, no cleanup, not a word)."""
    signal.signal(signal.SIGTERM, _raise_interrupted)


def ignore_stops() -> None:
    """Ctrl-C and SIGTERM ignored from now on: for a command whose work is done (an ingest
    printing its report), which a stop could then only garble."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _raise_interrupted(signum, _frame) -> None:
    raise Interrupted(signum)


def stop_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The signal behind a stop: SIGINT for Ctrl-C's plain KeyboardInterrupt."""
    return getattr(stop, "signum", signal.SIGINT)


def interruption(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM behind `error`, if it was raised while unwinding from one: a
    driver interrupted mid-statement may then fail its rollback ("another command is already in
    progress"), and that error must not pass for a failed unit or a lost database."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
