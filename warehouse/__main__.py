"""`python -m warehouse` and the `warehouse` script: the CLI (warehouse.cli.app), and a stop
by Ctrl-C or SIGTERM, wherever it lands (the imports included), ended in one line with exit
code 128 + the signal's number."""

import atexit
import logging
import os
import sys

from warehouse.errors import ignore_stops, interruption, stop_on_sigterm, stop_signal


def main() -> None:
    stop_on_sigterm()  # first: before it, SIGTERM ends the process where it stands, silently
    logging.lastResort.addFilter(_not_said_by_a_stop)
    try:
        from warehouse.cli.app import main as run

        run()
    except (KeyboardInterrupt, SystemExit) as exc:
        # Typer ends a KeyboardInterrupt (Interrupted is one) as a silent exit 130, raised from it.
        stop = interruption(exc)
        if stop is None:
            raise
        # One stop, one line: a second signal, or one already on its way (a tripped SIGINT is
        # dropped once its handler is SIG_IGN), must neither cut the line short nor end the
        # process by a KeyboardInterrupt of its own (exit -2 instead of 130, seen 1 in 200).
        ignore_stops()
        signum = stop_signal(stop)
        detail = getattr(stop, "detail", None)
        print(f"Error: interrupted ({signum.name}){': ' + detail if detail else ''}", file=sys.stderr)
        _exit(128 + signum)


def _not_said_by_a_stop(record: logging.LogRecord) -> bool:
    """False for a record a stop caused, which the stop's own line says for it. A stop landing
    while the pool resets a connection is logged by SQLAlchemy with a traceback ("Exception
    during reset or similar", 1 in 200 stops on PostgreSQL); one landing mid-statement may make
    psycopg's rollback fail and log "error ignored in rollback ...: another command is already
    in progress" with no traceback, while the failure is being handled (1 in 900). Nothing
    configures logging here, so such records reach stderr through logging's last resort."""
    error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
    return error is None or interruption(error) is None


def _exit(code: int) -> None:
    """End the process with `code`, after what the interpreter's own exit runs (atexit: pools
    closed, temporary folders removed, children reaped). Not sys.exit: once a stop has unwound
    through the drivers, CPython itself sometimes ended the process by SIGINT (exit -2, its way
    of passing on a KeyboardInterrupt it took for unhandled) after the line was printed: 2 stops
    in 400 on PostgreSQL, the line printed, and no second signal (they are ignored by then)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
