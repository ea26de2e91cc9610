"""`python -m warehouse` and the `warehouse` script: the CLI (warehouse.cli.app), and a stop
by Ctrl-C or SIGTERM, wherever it lands (the imports included), ended in one line with exit
code 128 + the signal's number."""

import sys

from warehouse.errors import ignore_stops, interruption, stop_on_sigterm, stop_signal


def main() -> None:
    stop_on_sigterm()  # first: before it, SIGTERM ends the process where it stands, silently
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
        sys.exit(128 + signum)


if __name__ == "__main__":
    main()
