"""Hub rows in JSON: a list of row objects (`.json`), one object a line (`.jsonl`, `.ndjson`),
either gzip-compressed (`.gz`), as `harbor traces export` and the Hub's own loaders keep them.

They are read into the Arrow record batches a Parquet shard gives (ingest.read.hub), so that
everything after the reader (schema checks, prepare, the writer, the ledger, provenance, row
numbers) is the Parquet path. A record batch needs its columns' types, and the ledger the
unit's schema before its first row is written, so a file is read twice, a row at a time:
`open_rows` infers the schema (the known columns have the types the Parquet reader expects:
strings, and a list of {role, content} structs for `conversations`; any other column the Arrow
type of its JSON values, as pyarrow infers them, unified over the rows), and `read_batches`
builds the batches with it. Memory is bounded by a batch and by the largest row, never by the
file: JSON Lines are read line by line, and a JSON list is parsed one element at a time
(json.JSONDecoder.raw_decode over a buffer that holds the rest of the current row, read in
chunks). One row is read whole, so WAREHOUSE_MAX_FILE_BYTES bounds it, as it bounds a trace
file.

A row that cannot be used (a line that is not JSON, a row that is not an object, a value that
does not fit its column) is a rejected row, named by its line (JSON Lines, from 1) or its row
index (a JSON list, from 0, as Parquet rows are); a JSON list that stops parsing cannot be read
past that point, and fails its unit, as does a truncated gzip stream."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.read import limits
from ingest.read.hub import (BATCH_BYTES, BATCH_ROWS, REQUIRED, STRING_COLUMNS, ShardError, ShardInfo,
                             check_schema, prepare_batch)
from ingest.read.trace_files import MAX_JSON_DEPTH, _too_deep
from ingest.shape.prepare import Batch, prepare
from ingest.shape.records import Rejected
from warehouse.hub_columns import GZIP_SUFFIX, json_rows_kind

CHUNK = 1 << 20  # characters of a JSON list read at a time
CONVERSATION = pa.struct([("role", pa.string()), ("content", pa.string())])
_MESSAGE_KEYS = frozenset(("role", "content"))
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError,
                      UnicodeEncodeError, TypeError, ValueError)


@dataclass
class JsonRows:
    """A JSON rows file, opened: what `open_shard` gives in place of a ParquetFile."""

    path: Path
    kind: str  # "list" | "lines"
    schema: pa.Schema
    n_rows: int


@dataclass
class _Row:
    index: int  # the row's number in the file, from 0 (provenance, export order)
    where: str  # "FILE line 3" or "FILE row 2"
    value: Any = None
    error: str | None = None  # why the row cannot be used at all
    size: int = 0  # characters of its JSON text


def is_rows_file(path: Path) -> bool:
    return json_rows_kind(path.name) is not None


def open_rows(path: Path) -> tuple[JsonRows, ShardInfo]:
    """The file's schema, inferred from every row, and checked as a Parquet shard's is, before
    a row is written; a file that cannot be read to its end is a ShardError."""
    kind = json_rows_kind(path.name)
    if path.stat().st_size == 0:
        raise ShardError(f"{path}: empty file (0 bytes), not a JSON {'list' if kind == 'list' else 'Lines'} file")
    infer = _Inference()
    n_rows = 0
    chunk: list[_Row] = []
    for row in _rows(path, kind):
        n_rows += 1
        chunk.append(row)
        if len(chunk) == BATCH_ROWS:
            infer.add(chunk)
            chunk = []
    infer.add(chunk)
    schema = infer.schema()
    check_schema(path, schema)
    shard = JsonRows(path=path, kind=kind, schema=schema, n_rows=n_rows)
    return shard, ShardInfo(path=path, n_rows=n_rows, schema=schema)


def read_batches(shard: JsonRows, run_name: str, run_override: str | None) -> Iterator[Batch]:
    """The file's rows as prepared batches, as hub.read_batches gives a shard's: each run of
    usable rows is a record batch of the shard's schema, prepared by the Parquet path; the
    rows between them come as batches of rejected rows, in file order."""
    seen: dict = {}  # each trial's first row in the file (hub.map_row)
    for chunk in _chunks(_rows(shard.path, shard.kind)):
        yield from _pieces(shard, chunk, run_name, run_override, seen)


def _chunks(rows: Iterator[_Row]) -> Iterator[list[_Row]]:
    """Rows in batches of at most BATCH_ROWS rows and about BATCH_BYTES of text."""
    chunk: list[_Row] = []
    size = 0
    for row in rows:
        chunk.append(row)
        size += row.size
        if len(chunk) == BATCH_ROWS or size >= BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _pieces(shard: JsonRows, chunk: list[_Row], run_name: str, run_override: str | None,
            seen: dict) -> Iterator[Batch]:
    """One chunk as batches in file order: each run of rows that fit the schema prepared as one
    record batch, each run of rows that do not as their rejections. The chunk's columns are
    built at once; only when one does not build is each row checked on its own."""
    objects = [row for row in chunk if row.error is None and isinstance(row.value, dict)]
    arrays = _arrays(shard.schema, objects) if len(objects) == len(chunk) else None
    if arrays is not None:
        yield _prepared(shard, chunk, arrays, run_name, run_override, seen)
        return
    good: list[_Row] = []
    bad: list[Rejected] = []
    for row in chunk:
        reason = row.error or _misfit(shard.schema, row.value)
        if reason is None:
            if bad:
                yield prepare([], bad)
                bad = []
            good.append(row)
            continue
        if good:
            yield _prepared(shard, good, _arrays(shard.schema, good), run_name, run_override, seen)
            good = []
        bad.append(Rejected(row.where, reason))
    if good:
        yield _prepared(shard, good, _arrays(shard.schema, good), run_name, run_override, seen)
    if bad:
        yield prepare([], bad)


def _arrays(schema: pa.Schema, rows: list[_Row]) -> list[pa.Array] | None:
    try:
        return [pa.array([row.value.get(f.name) for row in rows], type=f.type) for f in schema]
    except _CONVERSION_ERRORS:
        return None


def _prepared(shard: JsonRows, rows: list[_Row], arrays: list[pa.Array] | None, run_name: str,
              run_override: str | None, seen: dict) -> Batch:
    if arrays is None:  # each row fits alone (_misfit): together they must too
        raise ShardError(f"{rows[0].where}: the rows from here do not fit one schema")
    batch = pa.RecordBatch.from_arrays(arrays, schema=shard.schema)
    where = {row.index: row.where for row in rows}
    return prepare_batch(batch, shard.path, rows[0].index, run_name, run_override, seen, where=where.__getitem__)


def _misfit(schema: pa.Schema, value: Any) -> str | None:
    """Why a row does not fit the file's schema, or None: not an object, or a value its column's
    type cannot hold (the first such column, in the schema's order)."""
    if not isinstance(value, dict):
        return f"row is {_kind(value)}, expected an object"
    for f in schema:
        item = value.get(f.name)
        if item is None:
            continue
        try:
            pa.array([item], type=f.type)
        except UnicodeEncodeError:
            return f"column '{f.name}' holds a lone surrogate, which UTF-8 text (and Parquet) cannot hold"
        except _CONVERSION_ERRORS:
            if f.name == "conversations":
                return _conversation_misfit(item) or f"column 'conversations' does not fit {f.type}"
            return f"column '{f.name}' is {_kind(item)}, expected {_type_text(f.type)}"
    return None


def _conversation_misfit(value: Any) -> str | None:
    if not isinstance(value, list):
        return f"column 'conversations' is {_kind(value)}, expected a list of {{role, content}} objects"
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            return f"conversations[{i}] is {_kind(message)}, expected a {{role, content}} object"
        for key in ("role", "content"):
            if message.get(key) is not None and not isinstance(message[key], str):
                return f"conversations[{i}].{key} is {_kind(message[key])}, expected a string"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _type_text(type: pa.DataType) -> str:
    if pa.types.is_string(type):
        return "a string"
    return f"{type} (as the other rows have it)"


# --- the schema ----------------------------------------------------------------------------


class _Inference:
    """Columns in order of first appearance, each with the Arrow type of its values unified
    over the rows (int and float give double; a value of another kind than its column's is left
    out, and its row rejected when read)."""

    def __init__(self) -> None:
        self.types: dict[str, pa.DataType] = {}
        self.message_types: dict[str, pa.DataType] = {}  # extra keys of conversation messages

    def add(self, rows: list[_Row]) -> None:
        objects = [row.value for row in rows if row.error is None and isinstance(row.value, dict)]
        names = dict.fromkeys(name for value in objects for name in value)
        for name in names:
            if name == "conversations":
                self._messages(value.get(name) for value in objects)
            elif name in STRING_COLUMNS:
                self.types.setdefault(name, pa.string())
            else:
                self.types[name] = _unify(self.types.get(name), _infer([value.get(name) for value in objects]))

    def _messages(self, conversations: Iterator[Any]) -> None:
        extra: dict[str, list[Any]] = {}
        for conversation in conversations:
            for message in conversation if isinstance(conversation, list) else ():
                if isinstance(message, dict) and not message.keys() <= _MESSAGE_KEYS:
                    for key in message.keys() - _MESSAGE_KEYS:
                        extra.setdefault(key, []).append(message[key])
        for key, values in extra.items():
            self.message_types[key] = _unify(self.message_types.get(key), _infer(values))
        self.types["conversations"] = pa.list_(pa.struct([
            *CONVERSATION, *(pa.field(k, t) for k, t in self.message_types.items())]))

    def schema(self) -> pa.Schema:
        if not self.types:  # no row is an object: the rows are rejected against the least schema
            return pa.schema([(name, pa.list_(CONVERSATION) if name == "conversations" else pa.string())
                              for name in REQUIRED])
        return pa.schema(list(self.types.items()))


def _infer(values: list[Any]) -> pa.DataType:
    try:
        return pa.array(values).type
    except _CONVERSION_ERRORS:  # values of several kinds: each alone, the first kinds kept
        found = pa.null()
        for value in values:
            try:
                found = _unify(found, pa.array([value]).type)
            except _CONVERSION_ERRORS:
                continue
        return found


def _unify(a: pa.DataType | None, b: pa.DataType) -> pa.DataType:
    """The type holding values of both (int and float: double; structs: every field), or `a`
    when there is none."""
    if a is None or a == b:
        return b
    try:
        return pa.unify_schemas([pa.schema([("v", a)]), pa.schema([("v", b)])],
                                promote_options="permissive").field("v").type
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return a


# --- the rows ------------------------------------------------------------------------------


def _rows(path: Path, kind: str) -> Iterator[_Row]:
    """Every row of the file, in order; a ShardError when the file cannot be read on."""
    index = 0
    try:
        with _open(path) as fh:
            rows = _lines(fh, path) if kind == "lines" else _list(fh, path)
            for row in rows:
                row.index = index
                index += 1
                yield row
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ShardError(f"{path}: truncated or corrupt gzip data after {index} rows ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ShardError(f"{path}: not valid UTF-8 after {index} rows ({exc.reason}, "
                         f"byte 0x{exc.object[exc.start]:02x})") from None
    except OSError as exc:
        raise ShardError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _open(path: Path):
    return gzip.open(path, "rb") if path.name.lower().endswith(GZIP_SUFFIX) else path.open("rb")


def _lines(fh, path: Path) -> Iterator[_Row]:
    """JSON Lines: one row a line, blank lines skipped; a line longer than the limit is
    rejected without being held."""
    limit = limits.FILE_BYTES.get()
    number = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        number += 1
        where = f"{path} line {number}"
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := fh.readline(CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield _Row(0, where, error=f"longer than {limit} bytes (WAREHOUSE_MAX_FILE_BYTES)")
            continue
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield _Row(0, where, error=f"not valid UTF-8 ({exc.reason}, byte 0x{line[exc.start]:02x} "
                                       f"at column {exc.start + 1})")
            continue
        yield _parsed(where, text)


def _parsed(where: str, text: str) -> _Row:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return _Row(0, where, error=f"not valid JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        return _Row(0, where, error=f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    if _maybe_deep(text) and _too_deep(value):
        return _Row(0, where, error=f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return _Row(0, where, value=value, size=len(text))


def _maybe_deep(text: str) -> bool:
    # Counting brackets is C's work; walking every row's values would be Python's.
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH


class _ListReader:
    """A JSON list read one element at a time: `text` holds what is read and not yet parsed."""

    def __init__(self, fh, path: Path) -> None:
        self.stream = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="strict", newline="")
        self.path = path
        self.text = ""
        self.pos = 0
        self.line = 1  # the line `text` starts on
        self.eof = False
        self.limit = limits.FILE_BYTES.get()

    def more(self, at_least: int = CHUNK) -> bool:
        """Read on, keeping what is not parsed yet; False at the end of the file."""
        if self.eof:
            return False
        self.line += self.text.count("\n", 0, self.pos)
        data = self.stream.read(max(at_least, CHUNK))
        self.text = self.text[self.pos:] + data
        self.pos = 0
        self.eof = not data
        return bool(data)

    def next_char(self) -> str:
        """The next character that is not whitespace ("" at the end), not taken."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.text) or not self.more():
                return self.text[self.pos:self.pos + 1]

    def where(self, index: int) -> str:
        return f"{self.path} row {index}"

    def value(self, index: int, decoder=json.JSONDecoder()) -> _Row:
        """The element starting here, parsed: read on while what is held is not all of it."""
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                self._check_size(index)
                if self.more(len(self.text) - self.pos):  # what follows may complete the element
                    continue
                line = self.line + self.text.count("\n", 0, exc.pos)
                raise ShardError(f"{self.where(index)}: not valid JSON ({exc.msg} at line {line}); "
                                 f"the rows after it cannot be read") from None
            except RecursionError:
                raise ShardError(f"{self.where(index)}: JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
            if end == len(self.text) and self.more():  # a number may go on in what comes next
                continue
            text = self.text[self.pos:end]
            if len(text) * 4 > self.limit and len(text.encode("utf-8", "surrogatepass")) > self.limit:
                raise ShardError(f"{self.where(index)}: longer than {self.limit} bytes (WAREHOUSE_MAX_FILE_BYTES)")
            self.pos = end
            if _maybe_deep(text) and _too_deep(value):
                return _Row(0, self.where(index), error=f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
            return _Row(0, self.where(index), value=value, size=len(text))

    def _check_size(self, index: int) -> None:
        if len(self.text) - self.pos > self.limit:
            raise ShardError(f"{self.where(index)}: not valid JSON, or longer than {self.limit} bytes "
                             f"(WAREHOUSE_MAX_FILE_BYTES)")


def _list(fh, path: Path) -> Iterator[_Row]:
    reader = _ListReader(fh, path)
    first = reader.next_char()
    if first != "[":
        what = "an object" if first == "{" else "not a list"
        raise ShardError(f"{path}: top level is {what}, expected a JSON list of rows "
                         f"(JSON Lines: name it .jsonl; an ATIF trajectory: trajectory.json)")
    reader.pos += 1
    index = 0
    if reader.next_char() == "]":
        reader.pos += 1
    else:
        while True:
            if reader.next_char() == "":
                raise ShardError(f"{path}: the list ends without ']' after {index} rows (a truncated file?)")
            yield reader.value(index)
            index += 1
            after = reader.next_char()
            reader.pos += 1
            if after == "]":
                break
            if not after:
                raise ShardError(f"{path}: the list ends without ']' after {index} rows (a truncated file?)")
            if after != ",":
                raise ShardError(f"{reader.where(index - 1)}: expected ',' or ']' after the row, got {after!r}")
    trailing = reader.next_char()
    if trailing:
        raise ShardError(f"{path}: {trailing!r} after the list's closing ']'")
