"""Hub-shaped Parquet: one row per exported episode, as `harbor traces export` writes it.

Reads a shard in record batches and maps each row to a Trial holding one Episode; knows
nothing about the database. The same rows in JSON (a list, JSON Lines, gzip-compressed) come in
as record batches too (ingest.read.json_rows), and go on from there as a Parquet shard's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.process.prefetch import prefetch
from ingest.read.shard_job import ShardError
from ingest.shape.prepare import Batch, Messages, Turns, prepare, roles_and_digests_hash, trial_row
from ingest.shape.records import EPISODE_RE, TRACE_SOURCE, Episode, Rejected, Trial, Turn
from warehouse.arrow_json import to_json, unsupported
from warehouse.errors import first_line

REQUIRED = ("conversations", "trial_name", "episode")
# Columns mapped onto trial fields; every other column is kept verbatim with its episode.
TRIAL_COLUMNS = (
    "agent", "model", "model_provider", "date", "task", "run_id", "trial_name", "result",
    "verifier_output", "instruction",
)
STRING_COLUMNS = ("trial_name", "episode", *TRIAL_COLUMNS)
# Trial columns whose value one export can give per row: Harbor writes each step of a multi-step
# trial as a trial of its own (its own instruction and verifier output, even result and date),
# under the same trial_name. Within a shard, a row that differs from its trial's first row keeps
# its own value with its episode (no conflict: one export does not disagree with itself).
ROW_VALUE_COLUMNS = ("agent", "model", "model_provider", "date", "task", "result", "verifier_output", "instruction")
EPISODE_MAX = 2**31 - 1  # episodes.episode_index is a 32-bit integer on PostgreSQL
# Rows per batch: at most BATCH_ROWS, and fewer when rows are wide, so that a batch holds about
# BATCH_BYTES of data. Small batches let the writer start soon after the reader does; each batch
# costs both processes a fixed share of work, which 128 rows (1 MiB) made measurable.
BATCH_ROWS = 256
BATCH_BYTES = 2 << 20

T = TypeVar("T")


class RowError(Exception):
    """One row cannot be mapped: str() names the field."""


@dataclass
class ShardInfo:
    path: Path
    n_rows: int
    schema: pa.Schema


def open_shard(path: Path) -> tuple[pq.ParquetFile | Any, ShardInfo]:
    """Open a shard and check its schema before any row is read. A JSON rows file
    (ingest.read.json_rows) gives its own reader in place of the ParquetFile, its schema
    inferred from its rows and checked the same way."""
    from ingest.read import json_rows

    if json_rows.is_rows_file(path):
        return json_rows.open_rows(path)
    try:
        if path.stat().st_size == 0:
            # A download or copy that never happened, not a dataset with no rows (a valid
            # zero-row shard has a footer and loads as a unit of 0 rows).
            raise ShardError(f"{path}: empty file (0 bytes), not a Parquet file")
        # pre_buffer would read every row group of the file ahead: memory must not scale with it.
        pf = pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as exc:
        raise ShardError(f"{path}: not a readable Parquet file ({first_line(exc)})") from None
    schema = pf.schema_arrow
    check_schema(path, schema)
    return pf, ShardInfo(path=path, n_rows=pf.metadata.num_rows, schema=schema)


def check_schema(path: Path, schema: pa.Schema) -> None:
    """A ShardError naming the first column the rows cannot be read from."""
    repeated = [name for name, n in Counter(schema.names).items() if n > 1]
    if repeated:  # schema.field(name) cannot tell them apart
        raise ShardError(f"{path}: column '{repeated[0]}' appears {schema.names.count(repeated[0])} times")
    for name in REQUIRED:
        if name not in schema.names:
            raise ShardError(f"{path}: missing required column '{name}'")
    for name in STRING_COLUMNS:
        if name in schema.names and not _is_string(schema.field(name).type):
            raise ShardError(f"{path}: column '{name}' is {schema.field(name).type}, expected a string")
    for field in schema:
        why = unsupported(field.type)
        if why:
            raise ShardError(f"{path}: column '{field.name}' {why}")
    conv = schema.field("conversations").type
    if not (pa.types.is_list(conv) or pa.types.is_large_list(conv)) or not pa.types.is_struct(conv.value_type):
        raise ShardError(f"{path}: column 'conversations' is {conv}, expected a list of {{role, content}} structs")
    fields = {f.name: f.type for f in conv.value_type}
    for name in ("role", "content"):
        if name not in fields:
            raise ShardError(f"{path}: column 'conversations' has no '{name}' field")
        if not _is_string(fields[name]):
            raise ShardError(f"{path}: field 'conversations.{name}' is {fields[name]}, expected a string")


def use_system_allocator() -> None:
    """Give Arrow's buffers from here on from the C library's malloc, not Arrow's default
    (mimalloc). Called in the reader process: there, forked from the writer, mimalloc now and then
    stalled a shard's first batch for up to 100 ms in the kernel (zeroing pages), and ingests
    of the math profile into SQLite ran about 7 % faster with malloc (bench.run --child, 8
    alternating rounds)."""
    pa.set_memory_pool(pa.system_memory_pool())


def read_batches(pf: pq.ParquetFile, path: Path, run_name: str, run_override: str | None) -> Iterator[Batch]:
    """The shard as batches ready for the writer. The usual shape (every conversation a list
    of {role, content} with a role, every text valid UTF-8) is prepared column by column
    straight from Arrow; any other batch goes row by row through `rows_of`, whose checks
    reject the rows at fault by name."""
    if not isinstance(pf, pq.ParquetFile):  # a JSON rows file (open_shard)
        from ingest.read import json_rows

        return json_rows.read_batches(pf, run_name, run_override)
    seen: dict = {}  # each trial's first row in the shard (map_row)

    def prepared(batch: pa.RecordBatch, first_row: int) -> Batch:
        return prepare_batch(batch, path, first_row, run_name, run_override, seen)

    return _each_batch(pf, path, rows_per_batch(pf), prepared)


def prepare_batch(batch: pa.RecordBatch, path: Path, first_row: int, run_name: str, run_override: str | None,
                  seen: dict, where: Callable[[int], str] | None = None) -> Batch:
    """A record batch prepared for the writer: column by column when it has the usual shape,
    else row by row (rows_of). `where`: a row number's name in a rejection (rows_of)."""
    return (_columnar(batch, path, first_row, run_name, run_override, seen)
            or prepare(*rows_of(batch, path, first_row, run_name, run_override, seen, where), batch.nbytes))


def rows_per_batch(pf: pq.ParquetFile) -> int:
    """Rows per batch for this shard: BATCH_BYTES of its average row, within 8 and BATCH_ROWS."""
    meta = pf.metadata
    data_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if not meta.num_rows or not data_bytes:
        return BATCH_ROWS
    return max(min(BATCH_ROWS, 8), min(BATCH_ROWS, BATCH_BYTES * meta.num_rows // data_bytes))


def read_rows(pf: pq.ParquetFile, path: Path, run_name: str, run_override: str | None,
              batch_rows: int = BATCH_ROWS) -> Iterator[tuple[list[Trial], list[Rejected], int]]:
    """Yield (trials, rejected rows, bytes read) per record batch. Each Trial carries the one
    episode of its row; the writer merges repeated trials."""
    seen: dict = {}
    return _each_batch(pf, path, batch_rows, lambda batch, first_row: (
        *rows_of(batch, path, first_row, run_name, run_override, seen), batch.nbytes))


def _each_batch(pf: pq.ParquetFile, path: Path, batch_rows: int,
                make: Callable[[pa.RecordBatch, int], T]) -> Iterator[T]:
    """make(record batch, its first row number) for each record batch, read ahead in a
    thread; what cannot be read is a ShardError naming the row it was at."""
    row_number = 0
    try:
        # One decoding thread: the read-ahead thread already overlaps decoding with the rest,
        # and Arrow's pool would compete for the cores the writer and the database need
        # (measured: ingests 1-3 % faster without it).
        for batch in prefetch(pf.iter_batches(batch_size=batch_rows, use_threads=False)):
            yield make(batch, row_number)
            row_number += batch.num_rows
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise ShardError(f"{path}: unreadable at row {row_number} ({first_line(exc)})") from None


def rows_of(batch: pa.RecordBatch, path: Path, first_row: int, run_name: str, run_override: str | None,
            seen: dict | None = None, where: Callable[[int], str] | None = None,
            ) -> tuple[list[Trial], list[Rejected]]:
    """A record batch as Trials, one per row, and the rows that cannot be used. `seen`: the
    trials' first rows in the shard so far (map_row); `where`: a row number's name in a
    rejection (a JSON Lines file names the line), by default "FILE row N"."""
    names = batch.schema.names
    # Rows whose text is not valid UTF-8 (Arrow does not check what it reads): the row
    # is rejected naming the column, not the whole shard.
    bad_text: dict[int, str] = {}
    conv_column = batch.column(names.index("conversations"))
    try:
        conversations = decode_conversations(conv_column)
    except UnicodeDecodeError:
        conversations = _values_row_by_row(conv_column, "conversations", bad_text)
        conversations = [c if i in bad_text else _conversation_or_reason(c)
                         for i, c in enumerate(conversations)]
    columns = {}
    for i, name in enumerate(names):
        if name != "conversations":
            try:
                columns[name] = to_json(batch.column(i))
            except UnicodeDecodeError:
                columns[name] = _values_row_by_row(batch.column(i), name, bad_text)
    trials: list[Trial] = []
    rejected: list[Rejected] = []
    for i in range(batch.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        try:
            if bad_text and i in bad_text:
                raise RowError(bad_text[i])
            trials.append(map_row(row, conversations[i], first_row + i, run_name, run_override, seen))
        except RowError as exc:
            rejected.append(Rejected(where(first_row + i) if where else f"{path} row {first_row + i}", str(exc)))
    return trials, rejected


def _columnar(batch: pa.RecordBatch, path: Path, first_row: int, run_name: str, run_override: str | None,
              seen: dict | None = None) -> Batch | None:
    """`prepare(rows_of(batch))`, computed from whole columns; None when the batch is not of
    the usual shape. The conversations' texts are hashed and measured once each, with no
    per-message objects in between."""
    names = batch.schema.names
    conv = batch.column(names.index("conversations"))
    fields = [f.name for f in conv.type.value_type]
    if conv.null_count or sorted(fields) != ["content", "role"] or conv.values.null_count:
        return None
    offsets = conv.offsets.to_pylist()
    start = offsets[0]
    parts = dict(zip(fields, conv.values.flatten()))
    role_array = parts["role"].slice(start, offsets[-1] - start)
    content_array = parts["content"].slice(start, offsets[-1] - start)
    try:
        roles = role_array.to_pylist()
        columns = {name: to_json(batch.column(i)) for i, name in enumerate(names) if name != "conversations"}
        # The texts stay UTF-8, as Arrow holds them (checked here: Arrow does not check what it
        # reads): hashed and stored without being decoded into strings and encoded back.
        content_array.validate(full=True)
    except (UnicodeDecodeError, pa.ArrowInvalid):
        return None
    if None in roles or "" in roles or pa.types.is_null(content_array.type):
        return None
    binary = pa.large_binary() if pa.types.is_large_string(content_array.type) else pa.binary()
    contents = content_array.cast(binary).to_pylist()
    n_chars = pc.utf8_length(content_array).to_pylist()
    messages = Messages()
    add = messages.add
    add_utf8 = messages.add_utf8
    digests = [None if data is None else add_utf8(data, n) for data, n in zip(contents, n_chars)]

    trials, episodes = [], []
    for i in range(batch.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        try:
            trial = map_row(row, [], first_row + i, run_name, run_override, seen)
        except RowError:
            # The row path reads the batch again: the first rows `seen` took from it are the same.
            return None  # the row path rejects it, without keeping its texts
        instruction = None
        if trial.instruction is not None:
            instruction = add(trial.instruction)
        lo, hi = offsets[i] - start, offsets[i + 1] - start
        ep = trial.episodes[0]
        episodes.append((len(trials), ep.trace_source, ep.episode_index, ep.row_number, hi - lo,
                         sum(n for n in n_chars[lo:hi] if n is not None),
                         roles_and_digests_hash(roles[lo:hi], digests[lo:hi]), ep.extra, lo))
        trials.append(trial_row(trial, instruction))
    turns = Turns(roles, digests, [None] * len(roles))
    return Batch(trials, messages.rows, episodes, turns, [], batch.nbytes)


def _values_row_by_row(column: pa.Array, name: str, bad_text: dict[int, str]) -> list[Any]:
    """to_json(column) one value at a time, recording in bad_text the rows whose text does
    not decode (their value is None here)."""
    values = []
    for i in range(len(column)):
        try:
            values.append(to_json(column.slice(i, 1))[0])
        except UnicodeDecodeError as exc:
            bad_text.setdefault(i, f"column '{name}' is not valid UTF-8 ({exc.reason}, byte 0x{exc.object[exc.start]:02x})")
            values.append(None)
    return values


def map_row(row: dict[str, Any], turns: list[Turn] | str, row_number: int, run_name: str,
            run_override: str | None, seen: dict | None = None) -> Trial:
    """One row (without its conversation, decoded column-wise) as a Trial with one Episode.
    `seen` ({trial: its first row's ROW_VALUE_COLUMNS}) is filled as rows come; a row whose
    values differ from its trial's first row keeps those of its own with its episode."""
    if isinstance(turns, str):
        raise RowError(turns)
    trial_name = row.get("trial_name")
    if not trial_name:
        raise RowError("trial_name is empty")
    episode_raw = row.get("episode")
    match = EPISODE_RE.match(episode_raw or "")
    if match is None:
        raise RowError(f"episode {episode_raw!r} is not 'episode-N'")
    episode_index = int(match.group(1))
    if episode_index > EPISODE_MAX:
        raise RowError(f"episode {episode_raw!r} is numbered beyond {EPISODE_MAX}")

    extra: dict[str, Any] = {}
    if episode_raw != f"episode-{episode_index}":
        extra["episode"] = episode_raw  # e.g. zero-padded: keep the exact string
    for name, value in row.items():
        if name not in TRIAL_COLUMNS and name not in ("conversations", "episode", TRACE_SOURCE):
            extra[name] = value

    trace_source = row.get(TRACE_SOURCE)
    if trace_source is not None and not isinstance(trace_source, str):
        raise RowError(f"trace_source is {type(trace_source).__name__}, expected a string")
    if TRACE_SOURCE in row and not trace_source:
        extra[TRACE_SOURCE] = trace_source  # null or "": keyed as "main", exported as it was

    run_id = row.get("run_id")
    # RL rollouts have no job: their run_id is the trial name (or missing), so the run is
    # the one the source is ingested as.
    is_own_run = not run_id or run_id == trial_name
    run_key = (run_override or run_name) if is_own_run else run_id
    if seen is not None:
        values = tuple(hash(row.get(c)) for c in ROW_VALUE_COLUMNS)
        first = seen.setdefault((run_key, trial_name), values)
        if first != values:
            row = dict(row)
            for name, a, b in zip(ROW_VALUE_COLUMNS, first, values):
                if a != b and name in row:
                    extra[name] = row.pop(name)
    result = row.get("result")
    reward, exception_type = parse_result(result)
    date_raw = row.get("date")
    return Trial(
        run_key=run_key,
        trial_name=trial_name,
        task_name=row.get("task"),
        agent=row.get("agent"),
        model=row.get("model"),
        model_provider=row.get("model_provider"),
        result=result,
        reward=reward,
        exception_type=exception_type,
        started_at=parse_timestamp(date_raw),
        date_raw=date_raw,
        verifier_output=row.get("verifier_output"),
        instruction=row.get("instruction"),
        source_run_id=run_id,
        episodes=[Episode(
            episode_index=episode_index,
            turns=turns,
            trace_source=trace_source or "main",
            row_number=row_number,
            extra=extra or None,
        )],
    )


def decode_conversations(column: pa.Array) -> list[list[Turn] | str]:
    """Each row's turns, or the reason its conversation is unusable.

    Column-wise: the role and content strings come out of Arrow as two flat lists instead of a
    dict per message, which is most of the reading time for a large shard."""
    struct_type = column.type.value_type
    if sorted(f.name for f in struct_type) != ["content", "role"]:
        return [_conversation_or_reason(c) for c in to_json(column)]  # extra fields: rare
    fields = dict(zip((f.name for f in struct_type), column.values.flatten()))
    roles, contents = fields["role"].to_pylist(), fields["content"].to_pylist()
    offsets = column.offsets.to_pylist()
    valid = column.is_valid().to_pylist() if column.null_count else None
    out: list[list[Turn] | str] = []
    for i in range(len(column)):
        if valid is not None and not valid[i]:
            out.append("conversations is null")
            continue
        start, end = offsets[i], offsets[i + 1]
        missing = next((j for j in range(start, end) if not roles[j]), None)
        if missing is not None:
            out.append(f"conversations[{missing - start}].role is missing")
            continue
        out.append([Turn(roles[j], contents[j]) for j in range(start, end)])
    return out


def _conversation_or_reason(conversation: Any) -> list[Turn] | str:
    try:
        return map_conversation(conversation)
    except RowError as exc:
        return str(exc)


def map_conversation(conversation: Any) -> list[Turn]:
    if conversation is None:
        raise RowError("conversations is null")
    if not isinstance(conversation, list):
        raise RowError(f"conversations is {type(conversation).__name__}, expected a list")
    turns = []
    for i, message in enumerate(conversation):
        if not isinstance(message, dict):
            raise RowError(f"conversations[{i}] is not a {{role, content}} struct")
        role = message.get("role")
        if not role:
            raise RowError(f"conversations[{i}].role is missing")
        extra = {k: v for k, v in message.items() if k not in ("role", "content") and v is not None}
        turns.append(Turn(role=role, content=message.get("content"), extra=extra or None))
    return turns


def parse_result(result: str | None) -> tuple[float | None, str | None]:
    """Harbor's `result`: a reward string, an exception class name (which wins over any
    reward), or null."""
    if result is None or result == "":
        return None, None
    try:
        return float(result), None
    except ValueError:
        return None, result


def parse_timestamp(raw: str | None) -> datetime | None:
    """ISO 8601 as Harbor writes it; naive values (before 2026-01-13) are taken as UTC."""
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        # In UTC here, as stored: a value that has no UTC form (year 1 with a positive
        # offset) is left unparsed (date_raw keeps it) rather than failing its shard.
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
