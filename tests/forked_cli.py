"""`python -m warehouse …` for the tests, without paying its start-up each time: a server process
per test worker imports the CLI once, then forks a child for each command. The child is a whole
process of its own (its pid, its open files: the command's stdin, stdout and stderr; its
environment and working folder as the test's are; default signal handlers; the exit code or
signal it ends with, as subprocess reports them); what it skips is the interpreter's start and
the imports, half a second or more of every CLI call, which made CI's run outlast its limit.

Tests of start-up itself, of signals and of timing start real processes (procs.start_cli,
subprocess): this is for commands run to their end. WAREHOUSE_TEST_FORK=0 runs every command as
a real process instead (a check that nothing here hides a difference)."""

from __future__ import annotations

import atexit
import gc
import json
import locale
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENABLED = os.environ.get("WAREHOUSE_TEST_FORK", "1") != "0"
CLI = [sys.executable, "-m", "warehouse"]
# What a command imports, brought in once by the server (its children skip them). Nothing that
# starts a thread or opens a connection: the server forks.
PRELOAD = ("warehouse.cli.app", "warehouse.cli.query", "warehouse.queries.catalog", "warehouse.readonly",
           "warehouse.display", "sqlalchemy.dialects.sqlite", "sqlalchemy.dialects.postgresql", "psycopg",
           "ingest.pipeline", "pyarrow.parquet")
_HEADER = struct.Struct("!I")


def run(args: list[str], *, input: str | None = None, timeout: float = 180, cwd: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m warehouse *args` to its end, as subprocess.run(…, capture_output=True,
    text=True) gives it: stdin from `input` (or /dev/null)."""
    if not ENABLED:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)
    return _run(args, input, timeout, cwd, env)[0]


def run_with_peak(args: list[str], *, timeout: float = 180, cwd: str | None = None,
                  env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """run's result (stdin from /dev/null) and the command's peak resident memory in KB, read as
    the server reaps it. A child's count starts at what it shares with the server when forked:
    the imports, about 100 MB, which a command's own process makes too (procs.run_with_peak
    runs a real one when forking is off)."""
    assert ENABLED
    return _run(args, None, timeout, cwd, env)


def _run(args, input, timeout, cwd, env) -> tuple[subprocess.CompletedProcess, int]:
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        if input is not None:
            stdin.write(input.encode(locale.getpreferredencoding(False)))
            stdin.seek(0)
            stdin_fd = stdin.fileno()
        else:
            stdin_fd = os.open(os.devnull, os.O_RDONLY)
        try:
            env = dict(os.environ if env is None else env)
            ended = _server(env.get("PYTHONPATH", "")).run(args, [stdin_fd, stdout.fileno(), stderr.fileno()],
                                                           timeout, cwd or os.getcwd(), env)
        finally:
            if input is None:
                os.close(stdin_fd)
        out, err = (_text(f) for f in (stdout, stderr))
    if ended is None:
        raise subprocess.TimeoutExpired([*CLI, *args], timeout, out, err)
    code, peak_kb = ended
    return subprocess.CompletedProcess([*CLI, *args], code, out, err), peak_kb


def _text(file) -> str:
    """What subprocess's text mode makes of the bytes: the locale's encoding, universal newlines."""
    file.seek(0)
    data = file.read().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


class _Client:
    def __init__(self, pythonpath: str):
        self.folder = tempfile.mkdtemp(prefix="warehouse-forks-")
        self.path = os.path.join(self.folder, "socket")
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1],
                                     env={**os.environ, "PYTHONPATH": pythonpath})
        assert self.proc.stdout.readline() == b"ready\n", "the fork server did not start"
        self.lock = threading.Lock()  # (tests of one worker run one at a time; a test's threads may not)

    def run(self, args, fds, timeout, cwd, env) -> tuple[int, int] | None:
        """The child's exit code and peak resident memory (KB); None when it outlived `timeout`."""
        request = json.dumps({"args": args, "cwd": cwd, "env": env}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            with self.lock:
                conn.connect(self.path)
            socket.send_fds(conn, [_HEADER.pack(len(request)) + request], fds)
            reply = conn.makefile("rb")
            pid = int(reply.readline())
            conn.settimeout(timeout)
            try:
                line = reply.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                return None
            code, peak_kb = map(int, line.split())
            return code, peak_kb

    def close(self):
        self.proc.kill()
        self.proc.wait()
        for name in os.listdir(self.folder):
            os.unlink(os.path.join(self.folder, name))
        os.rmdir(self.folder)


# A server per PYTHONPATH: what it imported once is what its children run (tests/test_help.py
# renders help with the lowest Typer the pyproject allows, from a folder put first on the path).
_servers: dict[str, _Client] = {}


def _server(pythonpath: str) -> _Client:
    if pythonpath not in _servers:
        _servers[pythonpath] = _Client(pythonpath)
        atexit.register(_servers[pythonpath].close)
    return _servers[pythonpath]


# --- the server -----------------------------------------------------------------------------

def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # What the imports made, out of the cyclic collector's sight: a child's exit collects only
    # what its command made. Otherwise that last collection walks every object of the imports,
    # writing to each one's header and so copying every page the fork shared: about 0.2 s of
    # every command (its objects, the SQLite connection that removes -wal and -shm as it
    # closes included, are still finalized at its exit).
    gc.collect()
    gc.freeze()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    # Children are reaped in this one thread: SIGCHLD wakes the loop through a pipe.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "accept":
                conn, _ = listener.accept()
                pid = _fork(conn, listener, wake_r, wake_w)
                conn.sendall(f"{pid}\n".encode())
                waiting[pid] = conn
            else:
                os.read(wake_r, 4096)
        while waiting:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\n".encode())
                except OSError:  # the test gave up on it (timeout)
                    pass
                conn.close()
        if os.getppid() != parent:  # the test worker has gone
            os._exit(0)


def _fork(conn: socket.socket, *server_fds) -> int:
    first, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    [size] = _HEADER.unpack_from(first)
    data = first[_HEADER.size:]
    while len(data) < size:
        data += conn.recv(size - len(data))
    request = json.loads(data)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        code = _child(request, fds, conn, server_fds)
    except BaseException:  # noqa: BLE001 (nothing may return into the server's loop)
        os._exit(70)
    # The interpreter's own exit, as a command's process ends: threads joined, atexit run, then
    # every object finalized (a SQLite connection closed that way removes its -wal and -shm).
    raise _Exit(code)


class _Exit(BaseException):
    """The forked child's way out of the server's loop, to the interpreter's exit."""

    def __init__(self, code: int):
        self.code = code


def _child(request: dict, fds: list[int], conn: socket.socket, server_fds) -> int:
    import runpy
    import traceback

    conn.close()
    for fd in server_fds:
        fd.close() if hasattr(fd, "close") else os.close(fd)
    signal.set_wakeup_fd(-1)
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    # As a new interpreter sets them: Ctrl-C a KeyboardInterrupt, a closed pipe an error.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # as `python -m` puts the working folder first
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["warehouse", *request["args"]]
    code = 0
    try:
        runpy.run_module("warehouse", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 (as the interpreter would say it)
        traceback.print_exc()
        code = 1
    return code


if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the project, not this tests folder
    try:
        _serve(sys.argv[1])
    except _Exit as done:  # a child, its command run
        sys.exit(done.code)
