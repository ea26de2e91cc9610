"""Long text for a person at a terminal goes through their pager, as `git` sends it.

$PAGER (default `less -R`), run by the shell, with LESS=FRX when LESS is unset (as git sets it:
quit when it fits one screen, pass colours through, leave the screen as it was). No pager when
stdout is not a terminal, when the caller says so (--no-pager), or when PAGER is empty or `cat`.
A pager the user leaves early (q) closes its end of the pipe: the rest is dropped, quietly."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from typing import IO

DEFAULT_PAGER = "less -R"


def pager_command(out: IO[str] | None = None, *, enabled: bool = True) -> str | None:
    """The pager to run for `out` (stdout by default), or None to write to it directly."""
    out = out or sys.stdout
    if not enabled or not out.isatty():
        return None
    command = os.environ.get("PAGER", DEFAULT_PAGER).strip()
    if command in ("", "cat"):
        return None
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):  # unbalanced quotes: the shell will say what is wrong
        return command
    # A pager that is not installed would lose the text (the shell prints "not found" and the
    # pipe closes): write it directly instead.
    # (`LESS=X less` starts with an assignment, for the shell.)
    return command if shutil.which(program) or "=" in program else None


def page(text: str, *, enabled: bool = True, out: IO[str] | None = None) -> None:
    """Write `text` to `out` (stdout), through the pager when pager_command says so."""
    out = out or sys.stdout
    command = pager_command(out, enabled=enabled)
    if command is None:
        out.write(text)
        return
    out.flush()
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    # Ctrl-C is the pager's to handle (less stops a search with it) while it runs: the user leaves
    # with q, and this process waits for the pager to hand the terminal back.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=out.fileno(), env=env)
        data = text.encode(getattr(out, "encoding", None) or "utf-8", errors="replace")
        # An error here is the user leaving the pager before the end (q): the pipe is closed.
        # The close comes apart, so that what stayed in the buffer is not flushed again later.
        try:
            pager.stdin.write(data)
        except OSError:
            pass
        try:
            pager.stdin.close()
        except OSError:
            pass
        pager.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
