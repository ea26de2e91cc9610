"""Errors a user can act on. The CLI prints them as one line and exits 1; nothing else does."""


class WarehouseError(Exception):
    """A runtime or data error with a message fit to show as is."""


class OptionError(WarehouseError):
    """An option or parameter given a value outside what it may be (a threshold that is not a
    finite number in its range, a confidence level outside (0, 1)): one line, as other errors."""


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
