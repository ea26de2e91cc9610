"""The files of a trace directory, read safely: regular files inside the tree being read only
(a symbolic link leading out of it is refused; a FIFO would hang the ingest), each within a size
limit checked before it is read, text as strict UTF-8, JSON with one-line errors naming the file,
small caches for files read twice, and a streaming filter that reads huge RL result.json files
without loading their token ids and chat logs."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

from ingest.read import limits

CHUNK = 1024 * 1024


class TraceError(Exception):
    """A trace file that cannot be used. `str()` is one line: "<file>: <field/problem>"."""

    def __init__(self, path: os.PathLike[str] | str, message: str) -> None:
        self.path = Path(path)
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.path}: {self.message}")

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"



# --------------------------------------------------------------------------------------------
# JSON and text files
# --------------------------------------------------------------------------------------------


def _decode_utf8(path: Path, data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = f"0x{data[exc.start]:02x}"
        raise TraceError(path, f"not valid UTF-8 (byte {bad} at offset {exc.start})") from None


def _json_error(path: Path, exc: json.JSONDecodeError, note: str = "") -> TraceError:
    if not exc.doc.strip():
        return TraceError(path, "empty file, expected JSON")
    return TraceError(path, f"malformed JSON at line {exc.lineno} column {exc.colno}{note}: {exc.msg}")


def _non_finite(name: str) -> str:
    """NaN, Infinity and -Infinity (which Python's json.dumps writes) are kept as those words:
    JSON has no such numbers, and PostgreSQL's jsonb refuses them."""
    return name


# JSON nested deeper than this is refused, in every file a unit reads, naming the file and field.
# Everything a stored value goes through (the JSON codecs of Python and of both databases, the
# walks of warehouse.texts) is recursive: a fixed bound keeps each of them far from Python's
# recursion limit (1000 frames), at any call depth, in every process that reads the value back.
# Real Harbor files nest a few dozen levels at most.
MAX_JSON_DEPTH = 500


def _too_deep(value: Any) -> bool:
    """Whether containers nest more than MAX_JSON_DEPTH deep (the top level is level 1): a walk
    with a stack of its own, so its depth costs no frames, and its memory is the depth's, not
    the breadth's (a list of ten million objects is not copied)."""
    stack = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                children = item.values()
            elif isinstance(item, list):
                children = item
            else:
                continue
            if len(stack) > MAX_JSON_DEPTH:
                return True
            stack.append(iter(children))
            break
        else:
            stack.pop()
    return False


_DEPTH_TOKEN_RE = re.compile(r'[\[\]{}",]')
_JSON_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_COLON_RE = re.compile(r"[ \t\r\n]*:")


def _deep_field(text: str) -> str:
    """The path of the first value nested more than MAX_JSON_DEPTH deep in a JSON text, its
    first few steps ("steps[2].metrics[0]…"), found by a scan of the text: it reports a refusal,
    so its speed does not matter, and it must not recurse."""
    stack: list[list[Any]] = []  # [opening character, current key or item index]
    pos = 0
    while (m := _DEPTH_TOKEN_RE.search(text, pos)) is not None:
        c = m.group()
        pos = m.end()
        if c == '"':
            end = _JSON_STRING_RE.match(text, m.start())
            pos = end.end() if end else len(text)
            if stack and stack[-1][0] == "{" and _COLON_RE.match(text, pos):
                try:
                    stack[-1][1] = json.loads(text[m.start():pos])
                except ValueError:
                    stack[-1][1] = "?"
        elif c in "[{":
            stack.append([c, 0 if c == "[" else None])
            if len(stack) > MAX_JSON_DEPTH:
                break
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == "," and stack and stack[-1][0] == "[":
            stack[-1][1] += 1
    label = ""
    for opening, key in stack[:3]:  # each container's key or index: where the field starts
        label += f"[{key}]" if opening == "[" else ("." if label else "") + str(key)
    return label + "…"


def _depth_error(path: Path, text: str) -> TraceError:
    return TraceError(path, f"field '{_deep_field(text)}': JSON nested more than {MAX_JSON_DEPTH} levels deep")


def _parse_json(path: Path, text: str, note: str = "") -> Any:
    """A JSON text as a value (strictly), or TraceError naming the file: malformed, or nested
    too deeply (json.loads itself gives up near Python's recursion limit)."""
    try:
        value = json.loads(text, parse_constant=_non_finite)
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc, note) from None
    except RecursionError:
        raise _depth_error(path, text) from None
    if _too_deep(value):
        raise _depth_error(path, text)
    return value


def top_level_error(value: Any) -> str:
    return f"top level: expected a JSON object, got {type(value).__name__}"


# ---- where a file may lead, and how big it may be ------------------------------------------
#
# A trial's files are read inside its folder: a symbolic link (the file's own, or a folder's on
# the way to it) is followed only when what it leads to is inside that folder too; one leading
# anywhere else (/etc/shadow, a sibling trial) is refused, naming the link. Elsewhere (a job's
# files, a job result.json looked up above a trial) the folder a file is looked up in is its tree.

_TREE: ContextVar[tuple[Path, str] | None] = ContextVar("trace_tree", default=None)


@contextmanager
def inside(folder: os.PathLike[str] | str, what: str) -> Iterator[None]:
    """Files read in this block must lead to somewhere inside `folder` (`what` names it in a
    refusal: "the trial folder")."""
    token = _TREE.set((Path(os.path.realpath(folder)), what))
    try:
        yield
    finally:
        _TREE.reset(token)


def _tree_of(path: Path) -> tuple[Path, str]:
    return _TREE.get() or (Path(os.path.realpath(path.parent)), "its folder")


def _outside(path: Path, real: str, tree: tuple[Path, str]) -> TraceError:
    return TraceError(path, f"symbolic link to {real}, outside {tree[1]} ({tree[0]}): not read")


_BUDGET: ContextVar[list[int] | None] = ContextVar("trace_budget", default=None)


@contextmanager
def one_trial() -> Iterator[None]:
    """The files read in this block (a trial's, its job's) hold WAREHOUSE_MAX_TRIAL_BYTES
    together at most: what is read of them stays in memory until the trial is written."""
    token = _BUDGET.set([limits.TRIAL_BYTES.get()])
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _spend(path: Path, n: int) -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget[0] -= n
    if budget[0] < 0:
        raise TraceError(path, f"{n:,} bytes, which take the files of its trial past the "
                               f"{limits.TRIAL_BYTES.get():,} they may hold together (WAREHOUSE_MAX_TRIAL_BYTES)")


def _limit_error(path: Path, size: int, limit: int, setting: str = "WAREHOUSE_MAX_FILE_BYTES") -> TraceError:
    return TraceError(path, f"{size:,} bytes, more than the {limit:,} a trace file may have ({setting})")


def open_file(path: Path, limit: int | None = None, setting: str = "WAREHOUSE_MAX_FILE_BYTES") -> tuple[int, int]:
    """(descriptor, size) of a regular file inside the tree being read, no bigger than `limit`
    (default: WAREHOUSE_MAX_FILE_BYTES), checked before a byte is read; TraceError naming the
    file otherwise. The path is resolved first and checked to stay inside; the file is then
    opened with O_NOFOLLOW (its last part cannot have become a link since), and where the kernel
    says what was opened (/proc/self/fd), that is checked too, so a folder swapped for a link in
    between is caught. O_NONBLOCK makes opening a FIFO return at once (reading it would block
    the ingest forever); it changes nothing for a regular file."""
    path = Path(path)
    tree = _tree_of(path)
    real = os.path.realpath(path)
    if not _is_within(real, tree[0]):
        raise _outside(path, real, tree)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        reason = "symbolic link loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise TraceError(path, f"cannot read: {reason}") from None
    try:
        opened = _opened_path(fd)
        if opened is not None and opened != real:
            raise _outside(path, opened, tree) if not _is_within(opened, tree[0]) else TraceError(
                path, "cannot read: changed while being opened")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(path, f"cannot read: not a regular file ({_file_kind(st.st_mode)})")
        limit = limits.FILE_BYTES.get() if limit is None else limit
        if st.st_size > limit:
            raise _limit_error(path, st.st_size, limit, setting)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def open_result(path: Path) -> tuple[int, int]:
    """open_file for a trial's result.json, which is read as a stream (load_result_json) and
    may be RESULT_FILE_FACTOR times bigger on disk."""
    return open_file(path, limits.FILE_BYTES.get() * limits.RESULT_FILE_FACTOR,
                     f"{limits.RESULT_FILE_FACTOR} × WAREHOUSE_MAX_FILE_BYTES for a trial's result.json")


def _is_within(real: str, folder: Path) -> bool:
    return real == str(folder) or real.startswith(str(folder).rstrip("/") + "/")


def _opened_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc (not Linux): the check before opening stands alone
        return None


def _read_bytes(path: Path) -> bytes:
    """A regular file's bytes (see open_file): as many as it had when it was opened, so one
    still being written cannot take the read past the limit."""
    fd, size = open_file(path)
    with os.fdopen(fd, "rb") as fh:
        _spend(path, size)
        try:
            return fh.read(size)
        except OSError as exc:
            raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device or special file"


def is_present(path: Path) -> bool:
    """True for a regular file (or a link to one), False when nothing has the name. Anything
    else under a name the reader needs (a directory, FIFO, socket, symlink loop or dangling
    link) raises TraceError: the trial fails naming the file instead of loading without it."""
    if path.is_file():
        return True
    if not os.path.lexists(path):
        return False
    try:
        reason = f"not a regular file ({_file_kind(path.stat().st_mode)})"
    except OSError as exc:
        reason = "symbolic link loop" if exc.errno == errno.ELOOP else (
            "dangling symbolic link" if exc.errno == errno.ENOENT else exc.strerror or str(exc))
    raise TraceError(path, f"cannot read: {reason}")


def load_json(path: Path) -> Any:
    """Parse a JSON file strictly (UTF-8, no sanitising: "\\ud800" stays a lone surrogate)."""
    return _parse_json(path, _decode_utf8(path, _read_bytes(path)))


def read_text(path: Path) -> str:
    """A text file as Harbor's exporter reads it: UTF-8 with errors="replace"."""
    return _read_bytes(path).decode("utf-8", errors="replace")


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


_SMALL_CACHE = _LRU(4)  # job-level result.json, read once per trial by the §4.5 lookup
RESULT_CACHE = _LRU(4)  # filtered trial result.json text (run_key_for, then read_trial)


def _stat_key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size)


CACHED_BYTES = 1 << 20


def load_json_cached(path: Path) -> Any:
    """`load_json` for a file read once per trial (a job result.json); callers must not
    mutate the value."""
    key = _stat_key(path)
    if key is None:
        return load_json(path)  # raises the right TraceError
    hit = _SMALL_CACHE.get(key)
    if hit is not None:
        return hit[0]
    value = load_json(path)
    if key[2] <= CACHED_BYTES:  # a bigger one is read again: the cache is no way past the limits
        _SMALL_CACHE.put(key, (value,))
    return value


# ---- streaming result.json filter ----------------------------------------------------------
#
# SkyRL writes terminus-2's whole chat (`agent_result.metadata.all_messages`) and per-turn token
# ids / logprobs (`agent_result.rollout_details`) into trial result.json files, which can reach
# hundreds of MB. The stdlib json module cannot skip a subtree, so result.json is passed through a
# byte-level scanner first: it copies the file except the values at the paths below, which it
# replaces by `null` while recording their size, and the much smaller remainder is then parsed by
# json.loads. Memory stays proportional to what is kept. The scanner only looks at the bytes
# `"`, `\`, brackets and braces (UTF-8 continuation bytes never collide with them), jumping over
# strings and numbers with compiled regular expressions, so it runs at C speed on token-id lists.
# Skipped bytes are not validated (neither as JSON nor as UTF-8).

_LARGE_FIELD_PATHS: frozenset[tuple[str, ...]] = frozenset(
    prefix + tail
    for prefix in (("agent_result",), ("step_results", "[]", "agent_result"))
    for tail in (
        ("rollout_details",),
        ("metadata", "all_messages"),
        # 2025-10-28 .. 2025-11-10: per-turn logprobs before rollout_details existed.
        ("output_logprobs",),
        # 2025-09 AgentResult (package `sandboxes`): token ids in the result itself.
        ("input_token_ids",),
        ("output_token_ids",),
        ("output_token_mask",),
    )
)
_MAX_PATH_DEPTH = max(len(p) for p in _LARGE_FIELD_PATHS)

_TOKEN_RE = re.compile(rb'[\[\]{}"]')
_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_WS_RE = re.compile(rb"[ \t\r\n]*")
_QUOTE, _LBRACE, _RBRACE, _LBRACKET, _RBRACKET, _COLON = b'"{}[]:'


class _LargeFieldFilter:
    def __init__(self, fh: BinaryIO, path: Path, size: int, limit: int) -> None:
        self.fh = fh
        self.path = path
        self.size = size  # of the file, for a refusal
        self.limit = limit  # on what it holds at once: the bytes kept, and those not yet scanned
        self.buf = b""
        self.pos = 0  # everything before pos is already copied to out (or deliberately skipped)
        self.base = 0  # file offset of buf[0]
        self.eof = False
        self.out = bytearray()
        self.dropped: dict[str, dict[str, int]] = {}

    def _more(self, want: int = 0) -> bool:
        if self.eof:
            return False
        if len(self.out) + len(self.buf) - self.pos > self.limit:
            raise TraceError(self.path, f"{self.size:,} bytes, of which more than {self.limit:,} are kept (or are "
                                        f"one string) once token ids and chat logs are skipped "
                                        f"(WAREHOUSE_MAX_FILE_BYTES)")
        data = self.fh.read(max(want, CHUNK))
        if not data:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def _fail(self, what: str) -> TraceError:
        return TraceError(self.path, f"malformed JSON: {what} at byte {self.base + self.pos}")

    def _string_end(self) -> int:
        """End (exclusive) of the string starting at self.pos, reading more as needed."""
        while True:
            m = _STRING_RE.match(self.buf, self.pos)
            if m:
                return m.end()
            # Grow geometrically so a huge string is rescanned O(log n) times, not O(n).
            if not self._more(len(self.buf)):
                raise self._fail("unterminated string")

    def _next_non_ws(self) -> int | None:
        while True:
            j = _WS_RE.match(self.buf, self.pos).end()
            if j < len(self.buf):
                return j
            if not self._more():
                return None

    def _key(self, raw: bytes) -> str:
        try:
            if b"\\" not in raw:
                return raw[1:-1].decode("utf-8")
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise self._fail("invalid object key") from None

    @staticmethod
    def _label(stack: list[list[Any]]) -> str:
        out = ""
        for frame in stack:
            if frame[0] == _LBRACE:
                out += ("." if out else "") + str(frame[1])
            else:
                out += f"[{max(frame[2] - 1, 0)}]"
        return out

    def _skip_value(self) -> int:
        """Skip the string/array/object at self.pos; return its number of top-level items."""
        if self.buf[self.pos] == _QUOTE:
            self.pos = self._string_end()
            return 0
        depth = 0
        items = 0
        while True:
            m = _TOKEN_RE.search(self.buf, self.pos)
            if m is None:
                self.pos = len(self.buf)
                if not self._more():
                    raise self._fail("unexpected end of file inside a skipped value")
                continue
            self.pos = m.start()
            c = self.buf[self.pos]
            if c == _QUOTE:
                if depth == 1:
                    items += 1
                self.pos = self._string_end()
            elif c in (_LBRACE, _LBRACKET):
                if depth == 1:
                    items += 1
                depth += 1
                self.pos += 1
            else:
                depth -= 1
                self.pos += 1
                if depth == 0:
                    return items

    def run(self) -> bytes:
        stack: list[list[Any]] = []  # [opening byte, current key, number of container children]
        while True:
            m = _TOKEN_RE.search(self.buf, self.pos)
            if m is None:
                self.out += self.buf[self.pos :]
                self.pos = len(self.buf)
                if not self._more():
                    break
                continue
            i = m.start()
            self.out += self.buf[self.pos : i]
            self.pos = i
            c = self.buf[i]
            if c == _QUOTE:
                end = self._string_end()
                raw = self.buf[self.pos : end]
                self.out += raw
                self.pos = end
                if not stack or stack[-1][0] != _LBRACE:
                    continue
                j = self._next_non_ws()
                if j is None or self.buf[j] != _COLON:
                    continue
                key = self._key(raw) if len(stack) <= _MAX_PATH_DEPTH else None
                stack[-1][1] = key
                if key is None:
                    continue
                path = tuple(f[1] if f[0] == _LBRACE else "[]" for f in stack)
                if path not in _LARGE_FIELD_PATHS:
                    continue
                self.out += self.buf[self.pos : j + 1]
                self.pos = j + 1
                k = self._next_non_ws()
                if k is None or self.buf[k] not in (_QUOTE, _LBRACE, _LBRACKET):
                    continue  # a scalar (usually null): small, copied as is
                self.out += self.buf[self.pos : k]
                self.pos = k
                start = self.base + self.pos
                items = self._skip_value()
                self.out += b"null"
                size = self.base + self.pos - start
                self.dropped[self._label(stack)] = {"bytes": size, "items": items}
            elif c in (_LBRACE, _LBRACKET):
                if stack and stack[-1][0] == _LBRACKET:
                    stack[-1][2] += 1
                stack.append([c, None, 0])
                self.out.append(c)
                self.pos += 1
            else:
                if stack:
                    stack.pop()
                self.out.append(c)
                self.pos += 1
        return bytes(self.out)


def load_result_json(path: Path) -> tuple[Any, dict[str, dict[str, int]]]:
    """Parse a trial result.json without its large fields.

    Returns (value, dropped) where dropped maps each removed field ("agent_result.rollout_details",
    "step_results[2].agent_result.metadata.all_messages", ...) to {"bytes", "items"}; the removed
    values read as null in the returned value.
    """
    path = Path(path)
    key = _stat_key(path)
    hit = RESULT_CACHE.get(key) if key is not None else None
    if hit is not None:
        text, dropped = hit
    else:
        fd, size = open_result(path)
        try:
            with os.fdopen(fd, "rb") as fh:
                filt = _LargeFieldFilter(fh, path, size, limits.FILE_BYTES.get())
                data = filt.run()
        except OSError as exc:
            raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
        text, dropped = _decode_utf8(path, data), filt.dropped
    _spend(path, len(text))
    note = " (counted with the large fields removed)" if dropped else ""
    value = _parse_json(path, text, note)
    if key is not None and hit is None:
        # The filtered text is kept, not the value: each caller gets a value of its own to
        # change, parsed again (faster than a deep copy, and not recursive).
        RESULT_CACHE.put(key, (text, dropped))
    return value, {label: dict(size) for label, size in dropped.items()}
