"""The bad-input corpus, run through the real CLI (`python -m warehouse --db URL ingest SOURCE`
in a child process: forked_cli's, or a new interpreter behind setpriv) on both backends.
tests/corpus/README.md lists the cases and the decisions.

Every case sits in a source next to a valid sibling unit (a second Parquet shard, or a second
trial directory), and is checked by what it is:

- a bad unit: exit 1, exactly one `Error: …` line, naming the file (and the field or row where
  known); no traceback; nothing of the unit written (no ledger row, no trial); the sibling
  loaded. Again with --keep-going: exit 0, the same one line, the failure in the summary
  (on SQLite: the flag only changes the exit code, which no backend decides).
- a bad row: exit 1 and one line naming file, row and field, the whole shard left out; with
  --keep-going exit 0, the row rejected (a warning naming file and row, counted in the
  summary) and the shard's other rows loaded.
- a valid corner case (50 MB message, NUL, lone surrogates, empty strings, a zero-row shard,
  numbers JSON cannot hold, wrong JSON types read leniently): exit 0 and exact contents.

Binary inputs (Parquet, invalid UTF-8, FIFOs, symlinks, unreadable files) are made here;
readable JSON and trace files are committed under tests/corpus/."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from helpers import CONVERSATIONS, conversation_of, hub_row, write_shard
from procs import CLI, run_with_peak, units
from warehouse.texts import join_text

CORPUS = Path(__file__).parent / "corpus"
UUID = "6a29732a-0000-4000-8000-000000000001"  # helpers.hub_row's run_id
CASE_SHARD = "train-00000-of-00002.parquet"
SIBLING_SHARD = "train-00001-of-00002.parquet"
JOB = "corpus-job"  # the trace source: sibling and bad trial side by side
SIBLING_TRIAL = "ok__sibling"
STDERR_PREFIXES = ("Error: ", "warning: ", "units: ", "episodes: ", "trials: ", "database: ")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# As root, chmod 000 stops nothing; dropping the capabilities that bypass file permissions
# (for the ingest process only) makes an unreadable file unreadable for root too.
SETPRIV = shutil.which("setpriv")
DROP_DAC = [SETPRIV, "--bounding-set=-dac_override,-dac_read_search", "--"] if SETPRIV else []


@dataclass
class Case:
    id: str
    kind: str  # "parquet" | "traces"
    outcome: str  # "unit" | "row" | "valid"
    build: Callable[[Path], None]  # writes the case into the source folder
    where: tuple[str, ...] = ()  # what the one error line says besides naming the file
    file: str | None = None  # the path the error names (default: the case's shard or trial)
    check: Callable | None = None  # valid cases: the exact contents
    unreadable: bool = False  # needs permissions enforced (see DROP_DAC)
    env: dict[str, str] | None = None  # settings the ingest runs with (ingest.read.limits)


# --- Parquet cases ------------------------------------------------------------------------

def _rows(n: int = 3, bad: dict | None = None) -> list[dict]:
    rows = [hub_row(f"case__r{i}", 0, [("user", f"question {i}"), ("assistant", f"answer {i}")]) for i in range(n)]
    if bad is not None:
        rows[1] = dict(hub_row("case__bad", 0, [("user", "bad row")]), **bad)
    return rows


def _shard(path: Path, rows: list[dict] | None = None, fields: list[pa.Field] = (), **write) -> Path:
    rows = _rows() if rows is None else rows
    if not write:
        return write_shard(path, rows, extra_fields=list(fields))
    schema = pa.schema([next((f for f in fields if f.name == k), None)
                        or pa.field(k, CONVERSATIONS if k == "conversations" else pa.string()) for k in rows[0]])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, **write)
    return path


def _without(column: str) -> Callable[[Path], None]:
    return lambda p: _shard(p, [{k: v for k, v in r.items() if k != column} for r in _rows()])


def _typed(column: str, value, arrow_type) -> Callable[[Path], None]:
    return lambda p: _shard(p, [dict(r, **{column: value}) for r in _rows()], [pa.field(column, arrow_type)])


def _truncated(p: Path) -> None:
    data = _shard(p).read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _magic_garbage(p: Path) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"PAR1" + bytes(range(256)) * 8 + b"PAR1")


def _corrupt_last_row_group(p: Path) -> None:
    """More rows than one read batch, so earlier batches are written (inside the unit's
    transaction) before the corrupt row group is reached: the unit must roll back."""
    from ingest.read.hub import BATCH_ROWS

    n = 2 * BATCH_ROWS + 100
    rows = [hub_row(f"case__r{i}", 0, [("user", f"q{i}"), ("assistant", f"a{i}")]) for i in range(n)]
    _shard(p, rows, row_group_size=BATCH_ROWS + 50, compression="zstd")
    meta = pq.ParquetFile(p).metadata
    column = meta.row_group(meta.num_row_groups - 1).column(0)  # conversations.content
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(p.read_bytes())
    for k in range(start + 40, start + column.total_compressed_size - 40):
        data[k] = 0xAB
    p.write_bytes(bytes(data))


def _duplicate_column(p: Path) -> None:
    table = pa.Table.from_pylist(_rows())
    table = pa.Table.from_arrays([*table.columns, table.column("trial_name")], names=[*table.column_names, "trial_name"])
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, p)


def _invalid_utf8_row(column: str) -> Callable[[Path], None]:
    """Row 1's `column` (or its first message's content) holds bytes that are not UTF-8:
    Arrow stores a string column's bytes unchecked."""
    def build(p: Path) -> None:
        table = pa.Table.from_pylist(_rows(bad={}), schema=pa.schema(
            [pa.field(k, CONVERSATIONS if k == "conversations" else pa.string()) for k in _rows()[0]]))
        if column == "conversations":
            contents = pa.array(["question 0", "answer 0", "bad \xff row", "question 2", "answer 2"])
            raw = pa.Array.from_buffers(pa.string(), len(contents), [None, contents.buffers()[1],
                                        pa.py_buffer(contents.buffers()[2].to_pybytes().replace(b"\xc3\xbf", b"\xff\xfe"))])
            roles = pa.array(["user", "assistant", "user", "user", "assistant"])
            conv = pa.ListArray.from_arrays(pa.array([0, 2, 3, 5], pa.int32()),
                                            pa.StructArray.from_arrays([raw, roles], ["content", "role"]))
            table = table.set_column(table.column_names.index("conversations"), "conversations", conv)
        else:
            values = pa.array(["ok", "bad \xff value", "ok"])
            raw = pa.Array.from_buffers(pa.string(), 3, [None, values.buffers()[1],
                                        pa.py_buffer(values.buffers()[2].to_pybytes().replace(b"\xc3\xbf", b"\xff\xfe"))])
            table = table.set_column(table.column_names.index(column), column, raw)
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, p)
    return build


def _deeply_nested_column(p: Path) -> None:
    """An extra column of lists nested 60 deep: Parquet's reader refuses schemas nested past 100
    levels (a list is two), so Parquet values never come near the trace files' JSON limit."""
    arrow_type, value = pa.int64(), 1
    for _ in range(60):
        arrow_type, value = pa.list_(arrow_type), [value]
    _shard(p, [dict(r, deep=value) for r in _rows()], [pa.field("deep", arrow_type)])


def _struct_with_a_repeated_field(p: Path) -> None:
    """A struct column with two fields named `a`: kept as a JSON object, they would be one."""
    rows = _rows()
    twice = pa.StructArray.from_arrays([pa.array([1] * len(rows)), pa.array([2] * len(rows))], ["a", "a"])
    table = pa.Table.from_pylist(rows, schema=pa.schema(
        [pa.field(k, CONVERSATIONS if k == "conversations" else pa.string()) for k in rows[0]]))
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.append_column("twice", twice), p)


def _nested_struct(depth: int) -> tuple[pa.DataType, dict]:
    arrow_type, value = pa.int64(), 1
    for _ in range(depth):
        arrow_type, value = pa.struct([("a", arrow_type)]), {"a": value}
    return arrow_type, value


def _deep_struct_column(depth: int) -> Callable[[Path], None]:
    """An extra column of structs nested `depth` deep (a struct is one Parquet level)."""
    def build(p: Path) -> None:
        arrow_type, value = _nested_struct(depth)
        _shard(p, [dict(r, deep=value) for r in _rows()], [pa.field("deep", arrow_type)])
    return build


def _check_deep_struct(depth: int) -> Callable:
    def check(engine, src: Path) -> None:
        with engine.connect() as conn:
            extras = [json.loads(x) if isinstance(x, str) else x for (x,) in conn.execute(text(
                "SELECT e.extra FROM episodes e JOIN trials t ON t.id = e.trial_id WHERE t.trial_name LIKE 'case%'"))]
        assert len(extras) == 3 and all(x["deep"] == _nested_struct(depth)[1] for x in extras)
    return check


def _unreadable_shard(p: Path) -> None:
    _shard(p)
    p.chmod(0)


def _fifty_mb() -> str:
    text_ = ("0123456789abcdef" * 64 + "é漢😀\n") * 48_400  # 50 MB of UTF-8, multi-byte characters too
    assert 50_000_000 <= len(text_.encode()) < 51_000_000
    return text_


def _big_message(p: Path) -> None:
    _shard(p, [hub_row("case__big", 0, [("user", "print the log"), ("assistant", _fifty_mb())])])


def _check_big_message(engine, src: Path) -> None:
    assert conversation_of(engine, UUID, "case__big", 0) == [("user", "print the log"), ("assistant", _fifty_mb())]


NUL_TEXTS = [("user", "\x00"), ("assistant", "a\x00b\x00\x00c"), ("user", "trailing\x00")]


def _nul(p: Path) -> None:
    _shard(p, [hub_row("case__nul", 0, NUL_TEXTS, verifier_output="out\x00put")])


def _check_nul(engine, src: Path) -> None:
    assert conversation_of(engine, UUID, "case__nul", 0) == NUL_TEXTS
    assert _trial(engine, "case__nul")["verifier_output_exact"] == "out\x00put"


def _empty_strings(p: Path) -> None:
    rows = [hub_row("case__empty", 0, [("user", ""), ("assistant", "")], result="", verifier_output="", agent=""),
            hub_row("case__noturns", 0, [])]
    _shard(p, rows)


def _check_empty_strings(engine, src: Path) -> None:
    assert conversation_of(engine, UUID, "case__empty", 0) == [("user", ""), ("assistant", "")]
    assert conversation_of(engine, UUID, "case__noturns", 0) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n_turns FROM episodes e JOIN trials t ON t.id = e.trial_id "
                                 "WHERE t.trial_name = 'case__noturns'")).scalar() == 0
    trial = _trial(engine, "case__empty")
    assert (trial["result"], trial["verifier_output"], trial["agent"]) == ("", "", "")


def _zero_rows(p: Path) -> None:
    _shard(p, [])


def _check_zero_rows(engine, src: Path) -> None:
    loads = _loads(engine)
    assert loads[f"data/{CASE_SHARD}"]["n_rows"] == 0 and _case_trials(engine) == []


def _odd_numbers(p: Path) -> None:
    import datetime

    rows = [dict(r, score=s, at=datetime.time(13, 5, 7)) for r, s in zip(_rows(), (float("nan"), float("inf"), -1.5))]
    rows[0]["date"] = "0001-01-01T00:00:00+05:00"  # no UTC form: before datetime.min
    _shard(p, rows, [pa.field("score", pa.float64()), pa.field("at", pa.time64("us"))])


def _check_odd_numbers(engine, src: Path) -> None:
    # JSON (and PostgreSQL's jsonb) has no NaN or infinities: they are kept as their names;
    # a time of day as its ISO text. The shard's Arrow schema in the ledger has the types.
    with engine.connect() as conn:
        extras = {name: json.loads(e) if isinstance(e, str) else e for name, e in conn.execute(text(
            "SELECT t.trial_name, e.extra FROM episodes e JOIN trials t ON t.id = e.trial_id "
            "WHERE t.trial_name LIKE 'case%'"))}
    assert {name: (x["score"], x["at"]) for name, x in extras.items()} == {
        "case__r0": ("NaN", "13:05:07"), "case__r1": ("Infinity", "13:05:07"), "case__r2": (-1.5, "13:05:07")}
    trial = _trial(engine, "case__r0")
    assert (trial["started_at"], trial["date_raw"]) == (None, "0001-01-01T00:00:00+05:00")


PARQUET_CASES = [
    Case("pq-not-parquet", "parquet", "unit", lambda p: p.write_text("conversations,trial_name\nhello,world\n"),
         ("not a readable Parquet file",)),
    Case("pq-truncated", "parquet", "unit", _truncated, ("not a readable Parquet file",)),
    Case("pq-magic-garbage", "parquet", "unit", _magic_garbage, ("not a readable Parquet file",)),
    Case("pq-corrupt-row-group", "parquet", "unit", _corrupt_last_row_group, ("unreadable at row",)),
    Case("pq-empty-file", "parquet", "unit", lambda p: p.write_bytes(b""), ("empty file (0 bytes)",)),
    Case("pq-missing-conversations", "parquet", "unit", _without("conversations"),
         ("missing required column 'conversations'",)),
    Case("pq-missing-episode", "parquet", "unit", _without("episode"), ("missing required column 'episode'",)),
    Case("pq-episode-int", "parquet", "unit", _typed("episode", 0, pa.int64()), ("column 'episode' is int64",)),
    Case("pq-conversations-string", "parquet", "unit", _typed("conversations", "[]", pa.string()),
         ("column 'conversations' is string",)),
    Case("pq-conversations-list-of-strings", "parquet", "unit",
         _typed("conversations", ["hello"], pa.list_(pa.string())), ("column 'conversations'", "expected a list")),
    Case("pq-content-int", "parquet", "unit",
         _typed("conversations", [{"role": "user", "content": 7}],
                pa.list_(pa.struct([("role", pa.string()), ("content", pa.int64())]))),
         ("field 'conversations.content' is int64",)),
    Case("pq-message-without-role-field", "parquet", "unit",
         _typed("conversations", [{"content": "hi"}], pa.list_(pa.struct([("content", pa.string())]))),
         ("column 'conversations' has no 'role' field",)),
    Case("pq-duplicate-column", "parquet", "unit", _duplicate_column, ("column 'trial_name' appears 2 times",)),
    Case("pq-nested-too-deeply", "parquet", "unit", _deeply_nested_column,
         ("not a readable Parquet file", "schema too deeply nested")),
    Case("pq-struct-repeated-field", "parquet", "unit", _struct_with_a_repeated_field,
         ("column 'twice' has two struct fields named 'a'",)),
    Case("pq-struct-nested-99", "parquet", "unit", _deep_struct_column(99),
         ("not a readable Parquet file", "schema too deeply nested")),
    Case("pq-struct-nested-90", "parquet", "valid", _deep_struct_column(90), check=_check_deep_struct(90)),
    Case("pq-unreadable", "parquet", "unit", _unreadable_shard, ("cannot read", "Permission denied"), unreadable=True),
    Case("row-null-conversations", "parquet", "row", lambda p: _shard(p, _rows(bad={"conversations": None})),
         ("row 1", "conversations is null")),
    Case("row-message-without-role", "parquet", "row",
         lambda p: _shard(p, _rows(bad={"conversations": [{"role": None, "content": "who am I"}]})),
         ("row 1", "conversations[0].role is missing")),
    Case("row-null-message", "parquet", "row",
         lambda p: _shard(p, _rows(bad={"conversations": [{"role": "user", "content": "x"}, None]})),
         ("row 1", "conversations[1]")),
    Case("row-bad-episode", "parquet", "row", lambda p: _shard(p, _rows(bad={"episode": "final"})),
         ("row 1", "episode 'final' is not 'episode-N'")),
    Case("row-empty-trial-name", "parquet", "row", lambda p: _shard(p, _rows(bad={"trial_name": ""})),
         ("row 1", "trial_name is empty")),
    Case("row-trace-source-int", "parquet", "row",
         lambda p: _shard(p, [dict(r, trace_source=7 if i == 1 else None) for i, r in enumerate(_rows(bad={}))],
                          [pa.field("trace_source", pa.int64())]),
         ("row 1", "trace_source is int")),
    Case("row-invalid-utf8", "parquet", "row", _invalid_utf8_row("verifier_output"),
         ("row 1", "column 'verifier_output' is not valid UTF-8")),
    Case("row-invalid-utf8-message", "parquet", "row", _invalid_utf8_row("conversations"),
         ("row 1", "column 'conversations' is not valid UTF-8")),
    Case("pq-zero-rows", "parquet", "valid", _zero_rows, check=_check_zero_rows),
    Case("pq-50mb-message", "parquet", "valid", _big_message, check=_check_big_message),
    Case("pq-nul-bytes", "parquet", "valid", _nul, check=_check_nul),
    Case("pq-empty-strings", "parquet", "valid", _empty_strings, check=_check_empty_strings),
    Case("pq-nan-time-and-year-1-date", "parquet", "valid", _odd_numbers, check=_check_odd_numbers),
]


# --- trace cases --------------------------------------------------------------------------

def _trial_dir(src: Path, case_id: str) -> Path:
    return src / f"bad__{case_id}"


def _overlay(case_id: str) -> Callable[[Path], None]:
    """The base trial with the committed files of tests/corpus/traces/<case_id>/ laid over it."""
    def build(trial: Path) -> None:
        shutil.copytree(CORPUS / "base-trial", trial)
        shutil.copytree(CORPUS / "traces" / case_id, trial, dirs_exist_ok=True)
    return build


def _mutate(rel: str, how: Callable[[Path], None]) -> Callable[[Path], None]:
    """The base trial with one file replaced by what `how` makes of it."""
    def build(trial: Path) -> None:
        shutil.copytree(CORPUS / "base-trial", trial)
        how(trial / rel)
    return build


def _bytes_into(marker: bytes, replacement: bytes) -> Callable[[Path], None]:
    def how(path: Path) -> None:
        data = path.read_bytes()
        assert marker in data
        path.write_bytes(data.replace(marker, replacement, 1))
    return how


def _replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.json").write_text("{}")


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _replace_with_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # result.json -> result.json


def _replace_with_dangling_link(path: Path) -> None:
    path.unlink()
    path.symlink_to("does-not-exist.json")


def _make_unreadable(path: Path) -> None:
    path.chmod(0)


def _deeply_nested(path: Path) -> None:
    path.write_text('{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}")


def _nested(depth: int) -> list:
    """Lists nested `depth` deep ([[...[]...]]), made without recursion."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _nested_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_field(key: str, depth: int, step: int | None = None) -> Callable[[Path], None]:
    """The file with `key` set to lists nested so that the file's JSON is `depth` deep: in the
    top-level object, or in the trajectory's step `step`. (json.dumps cannot write such a
    value, so it goes in as text.)"""
    def how(path: Path) -> None:
        data = json.loads(path.read_text())
        (data["steps"][step] if step is not None else data)[key] = "DEEP"
        inner = depth - (1 if step is None else 3)  # the object, and steps[] and a step around it
        path.write_text(json.dumps(data).replace('"DEEP"', _nested_text(inner)))
    return how


def _check_deep_metrics(depth: int) -> Callable:
    def check(engine, src: Path, case_id: str) -> None:
        with engine.connect() as conn:
            extras = [json.loads(x) if isinstance(x, str) else x for (x,) in conn.execute(text("""
                SELECT tu.extra FROM turns tu JOIN episodes e ON e.id = tu.episode_id
                JOIN trials t ON t.id = e.trial_id WHERE t.trial_name = :t"""), {"t": f"bad__{case_id}"})]
        deep = [x["metrics"] for x in extras if x and isinstance(x.get("metrics"), list)]  # step 3's
        assert deep and all(m == _nested(depth - 3) for m in deep)
    return check


def _check_stored_once(n_episodes: int, n_turns: int) -> Callable:
    """The trial's episodes all prefixes of one conversation of n_turns turns."""
    def check(engine, src: Path, case_id: str) -> None:
        with engine.connect() as conn:
            found = conn.execute(text("""
                SELECT count(*), count(DISTINCT e.conversation_id), max(e.n_turns),
                       (SELECT count(*) FROM conversation_turns ct JOIN conversations c ON c.id = ct.conversation_id
                        WHERE c.trial_id = t.id)
                FROM episodes e JOIN trials t ON t.id = e.trial_id WHERE t.trial_name = :t GROUP BY t.id"""),
                                 {"t": f"bad__{case_id}"}).one()
        assert tuple(found) == (n_episodes, 1, n_turns, n_turns)
    return check


def _check_deep_config(depth: int) -> Callable:
    def check(engine, src: Path, case_id: str) -> None:
        assert _trial(engine, f"bad__{case_id}")["detail"]["config"]["deep"] == _nested(depth - 1)
    return check


def _tree(case_id: str) -> Callable[[Path], None]:
    """Not a trial: a tree laid into the job folder beside the sibling."""
    def build(trial: Path) -> None:
        shutil.copytree(CORPUS / "traces" / case_id, trial.parent, dirs_exist_ok=True)
    return build


def _symlink_loop_in_job(trial: Path) -> None:
    (trial.parent / "loop").symlink_to("loop")


def _texts_of(engine, trial_name: str) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("""
            SELECT m.content, m.content_raw FROM turns tu JOIN episodes e ON e.id = tu.episode_id
            JOIN trials t ON t.id = e.trial_id JOIN messages m ON m.id = tu.message_id
            WHERE t.trial_name = :t"""), {"t": trial_name}).all()
    return {join_text(c, bytes(r) if r is not None else None) for c, r in rows}


def _check_texts(*expected: str) -> Callable:
    def check(engine, src: Path, case_id: str) -> None:
        texts = _texts_of(engine, f"bad__{case_id}")
        for t in expected:
            assert t in texts, (t, texts)
    return check


def _check_verifier_replaced(engine, src: Path, case_id: str) -> None:
    # Harbor reads verifier output as UTF-8 with errors="replace"; so does the warehouse.
    assert _trial(engine, f"bad__{case_id}")["verifier_output"] == "1 passed \ufffd\ufffd in 0.01s\n"


def _check_loaded(engine, src: Path, case_id: str) -> None:
    trial = _trial(engine, f"bad__{case_id}")
    assert trial["n_episodes"] >= 1


def _check_steps_not_list(engine, src: Path, case_id: str) -> None:
    # Strict ATIF validation fails it; the trial loads without episodes, the steps kept in its
    # detail and the problem recorded (ingest.read.atif_check).
    trial = _trial(engine, f"bad__{case_id}")
    assert trial["n_episodes"] == 0
    assert {"file": "agent/trajectory.json", "step": None, "field": "steps", "problem": "expected a list"} \
        in trial["detail"]["validation"]
    assert trial["detail"]["trajectories"][0]["unread"] == {"steps": {"1": {"source": "user", "message": "hi"}}}


def _check_wrong_types(engine, src: Path, case_id: str) -> None:
    trial = _trial(engine, f"bad__{case_id}")
    assert (trial["agent"], trial["agent_version"], trial["model_provider"]) == (None,) * 3
    assert trial["model"] == "gpt-4o"  # the trajectory's model_name, which wins anyway
    assert (trial["n_input_tokens"], trial["n_cache_tokens"], trial["n_output_tokens"]) == (None,) * 3
    assert (trial["exception_type"], trial["exception_message"], trial["task_checksum"]) == (None,) * 3
    warnings = " | ".join(trial["detail"]["field_warnings"])
    assert (trial["cost_usd"], trial["started_at"], trial["finished_at"]) == (None,) * 3
    for name in ("agent_info.name", "agent_info.version", "agent_result.n_input_tokens",
                 "agent_result.n_output_tokens", "exception_info.exception_type", "task_checksum",
                 "agent_result.cost_usd", "'started_at'", "'finished_at'"):
        assert name in warnings, (name, warnings)


def _check_nan(engine, src: Path, case_id: str) -> None:
    with engine.connect() as conn:
        extras = [json.loads(x) if isinstance(x, str) else x for (x,) in conn.execute(text("""
            SELECT tu.extra FROM turns tu JOIN episodes e ON e.id = tu.episode_id
            JOIN trials t ON t.id = e.trial_id WHERE t.trial_name = :t"""), {"t": f"bad__{case_id}"})]
    metrics = [x["metrics"] for x in extras if x and "metrics" in x]
    assert {"logprob": "NaN", "entropy": "Infinity", "delta": "-Infinity"} in metrics, metrics


# --- what a trial may read: inside its folder, within the limits (ingest.read.limits) ----------

SECRET = "root:$6$not-for-the-warehouse:19000:0:99999:7:::\n"


def _link_out(rel: str) -> Callable[[Path], None]:
    """The base trial with `rel` a symbolic link to a file outside the job (as /etc/shadow)."""
    def build(trial: Path) -> None:
        shutil.copytree(CORPUS / "base-trial", trial)
        secret = trial.parent.parent / "outside" / "shadow"
        secret.parent.mkdir(exist_ok=True)
        secret.write_text(SECRET)
        (trial / rel).unlink(missing_ok=True)
        (trial / rel).symlink_to(secret)
    return build


def _link_to_sibling(trial: Path) -> None:
    """result.json a relative link into the sibling trial: inside the job, outside the trial."""
    shutil.copytree(CORPUS / "base-trial", trial)
    (trial / "result.json").unlink()
    (trial / "result.json").symlink_to(Path("..") / SIBLING_TRIAL / "result.json")


def _agent_dir_out(trial: Path) -> None:
    """agent/ a link to a folder outside the job holding a trajectory."""
    shutil.copytree(CORPUS / "base-trial", trial)
    outside = trial.parent.parent / "outside-agent"
    shutil.move(trial / "agent", outside)
    (trial / "agent").symlink_to(outside, target_is_directory=True)


def _links_inside(trial: Path) -> None:
    """Links that stay in the trial folder: followed."""
    shutil.copytree(CORPUS / "base-trial", trial)
    (trial / "kept").mkdir()
    shutil.move(trial / "verifier" / "test-stdout.txt", trial / "kept" / "stdout.txt")
    (trial / "verifier" / "test-stdout.txt").symlink_to(Path("..") / "kept" / "stdout.txt")
    shutil.move(trial / "agent", trial / "kept" / "agent")
    (trial / "agent").symlink_to(Path("kept") / "agent", target_is_directory=True)


def _check_links_inside(engine, src: Path, case_id: str) -> None:
    trial = _trial(engine, f"bad__{case_id}")
    assert trial["verifier_output"] == (CORPUS / "base-trial" / "verifier" / "test-stdout.txt").read_text()
    assert trial["n_episodes"] == 2


def _sparse(size: int) -> Callable[[Path], None]:
    """The file made `size` bytes long, of zeros that take no disk (a sparse file)."""
    def how(path: Path) -> None:
        with open(path, "r+b") as fh:
            fh.truncate(size)
    return how


def _steps(n: int, step: str) -> Callable[[Path], None]:
    """The trajectory with n more steps (JSON text `step` each) after its own."""
    def how(path: Path) -> None:
        text = path.read_text()
        at = text.index('"steps": [') + len('"steps": [')
        path.write_text(text[:at] + ",".join([step] * n) + "," + text[at:])
    return how


MILLION_STEPS = '{"step_id":7,"source":"agent","message":"ls","observation":{"results":[{"content":"a"}]}}'
OBSERVED_STEP = '{"source":"agent","message":"m","observation":{"results":[{"content":"o"}]}}'


def _padded(path: Path, nbytes: int) -> None:
    """A valid trajectory `nbytes` long: its own, with a long string in its extra."""
    data = json.loads((CORPUS / "base-trial" / "agent" / "trajectory.json").read_text())
    data["extra"] = {"pad": ""}
    data["extra"]["pad"] = "x" * (nbytes - len(json.dumps(data)))
    path.write_text(json.dumps(data))


def _two_files(each: int) -> Callable[[Path], None]:
    """A trajectory and a subagent's, each `each` bytes: within the file limit, not together."""
    def build(trial: Path) -> None:
        shutil.copytree(CORPUS / "base-trial", trial)
        _padded(trial / "agent" / "trajectory.json", each)
        _padded(trial / "agent" / "trajectory.helper.json", each)
    return build


TRACE_CASES = [
    Case("result-malformed", "traces", "unit", _overlay("result-malformed"), ("malformed JSON at line 1",),
         file="result.json"),
    Case("result-truncated", "traces", "unit", _overlay("result-truncated"), ("malformed JSON",), file="result.json"),
    Case("result-empty", "traces", "unit", _overlay("result-empty"), ("empty file",), file="result.json"),
    Case("result-list", "traces", "unit", _overlay("result-list"), ("expected a JSON object, got list",),
         file="result.json"),
    Case("result-unknown-shape", "traces", "unit", _overlay("result-unknown-shape"), ("unknown shape",),
         file="result.json"),
    Case("result-invalid-utf8", "traces", "unit", _mutate("result.json", _bytes_into(b"corpus/hello", b"corpus/\xffhello")),
         ("not valid UTF-8", "0xff"), file="result.json"),
    Case("result-fifo", "traces", "unit", _mutate("result.json", _replace_with_fifo), ("a FIFO",), file="result.json"),
    Case("result-directory", "traces", "unit", _mutate("result.json", _replace_with_dir), ("a directory",),
         file="result.json"),
    Case("result-symlink-loop", "traces", "unit", _mutate("result.json", _replace_with_loop), ("symbolic link loop",),
         file="result.json"),
    Case("result-unreadable", "traces", "unit", _mutate("result.json", _make_unreadable), ("Permission denied",),
         file="result.json", unreadable=True),
    Case("config-malformed", "traces", "unit", _overlay("config-malformed"), ("malformed JSON",), file="config.json"),
    Case("config-list", "traces", "unit", _overlay("config-list"), ("expected a JSON object, got list",),
         file="config.json"),
    Case("trajectory-malformed", "traces", "unit", _overlay("trajectory-malformed"), ("malformed JSON at line 1",),
         file="agent/trajectory.json"),
    Case("trajectory-truncated", "traces", "unit", _overlay("trajectory-truncated"), ("malformed JSON",),
         file="agent/trajectory.json"),
    Case("trajectory-list", "traces", "unit", _overlay("trajectory-list"), ("expected a JSON object, got list",),
         file="agent/trajectory.json"),
    Case("trajectory-steps-not-list", "traces", "valid", _overlay("trajectory-steps-not-list"),
         check=_check_steps_not_list),
    Case("trajectory-invalid-utf8", "traces", "unit",
         _mutate("agent/trajectory.json", _bytes_into(b"careful terminal", b"careful \xc3\x28terminal")),
         ("not valid UTF-8", "0xc3"), file="agent/trajectory.json"),
    Case("trajectory-deeply-nested", "traces", "unit", _mutate("agent/trajectory.json", _deeply_nested),
         ("field 'steps[0][0]…'", "JSON nested more than 500 levels deep"), file="agent/trajectory.json"),
    # JSON from 500 levels deep up to where json.loads gives up (near 990 here) used to end the
    # whole ingest in a RecursionError; past it, json.loads's own error. 500 is the limit.
    *(Case(f"result-nested-{d}", "traces", "unit", _mutate("result.json", _deep_field("deep", d)),
           ("field 'deep[0][0]…'", "JSON nested more than 500 levels deep"), file="result.json")
      for d in (501, 990, 3000)),
    *(Case(f"trajectory-nested-{d}", "traces", "unit", _mutate("agent/trajectory.json", _deep_field("metrics", d, 2)),
           ("field 'steps[2].metrics…'", "JSON nested more than 500 levels deep"), file="agent/trajectory.json")
      for d in (501, 990, 3000)),
    Case("config-nested-990", "traces", "unit", _mutate("config.json", _deep_field("deep", 990)),
         ("field 'deep[0][0]…'", "JSON nested more than 500 levels deep"), file="config.json"),
    Case("trajectory-directory", "traces", "unit", _mutate("agent/trajectory.json", _replace_with_dir),
         ("a directory",), file="agent/trajectory.json"),
    Case("trajectory-dangling-link", "traces", "unit", _mutate("agent/trajectory.json", _replace_with_dangling_link),
         ("dangling symbolic link",), file="agent/trajectory.json"),
    Case("tb1-layout", "traces", "unit", _tree("tb1-layout"), ("Terminal-Bench 1",),
         file=f"{JOB}/tb1-run/hello-world/hello-world.1-of-1"),
    Case("job-symlink-loop", "traces", "unit", _symlink_loop_in_job, ("symbolic link loop",), file=f"{JOB}/loop"),
    Case("trajectory-lone-surrogates", "traces", "valid", _overlay("trajectory-surrogates"),
         check=_check_texts("lone high \ud800 and lone low \udfff, a pair \U0001F600, and \x00 too",
                            "reply with a lone \udbff at the end \udbff")),
    Case("trajectory-nul", "traces", "valid", _overlay("trajectory-nul"),
         check=_check_texts("\x00leading, in\x00the middle, trailing\x00", "binary output: \x00\x01\x02\x1f\x7f")),
    Case("trajectory-nan", "traces", "valid", _overlay("trajectory-nan"), check=_check_nan),
    Case("trajectory-odd-steps", "traces", "valid", _overlay("trajectory-odd-steps"), check=_check_loaded),
    Case("verifier-invalid-utf8", "traces", "valid",
         _mutate("verifier/test-stdout.txt", lambda p: p.write_bytes(b"1 passed \xff\xfe in 0.01s\n")),
         check=_check_verifier_replaced),
    Case("result-wrong-types", "traces", "valid", _overlay("result-wrong-types"), check=_check_wrong_types),
    Case("result-nested-450", "traces", "valid", _mutate("result.json", _deep_field("deep", 450)), check=_check_loaded),
    *(Case(f"trajectory-nested-{d}", "traces", "valid", _mutate("agent/trajectory.json", _deep_field("metrics", d, 2)),
           check=_check_deep_metrics(d)) for d in (450, 500)),
    Case("config-nested-500", "traces", "valid", _mutate("config.json", _deep_field("deep", 500)),
         check=_check_deep_config(500)),
    # Nothing outside the trial folder is read: a link leading out of it is refused, naming it.
    *(Case(f"{name}-link-out", "traces", "unit", _link_out(rel), ("symbolic link to", "outside the trial folder"),
           file=rel) for name, rel in (("verifier-stdout", "verifier/test-stdout.txt"),
                                       ("exception", "exception.txt"), ("result", "result.json"),
                                       ("trajectory", "agent/trajectory.json"), ("reward", "verifier/reward.txt"))),
    Case("result-link-to-sibling", "traces", "unit", _link_to_sibling,
         ("symbolic link to", f"{SIBLING_TRIAL}/result.json", "outside the trial folder"), file="result.json"),
    Case("agent-dir-link-out", "traces", "unit", _agent_dir_out, ("outside-agent", "outside the trial folder"),
         file="agent/trajectory.json"),
    Case("links-inside-the-trial", "traces", "valid", _links_inside, check=_check_links_inside),
    # Every file within WAREHOUSE_MAX_FILE_BYTES (12 MiB; a trial's result.json 64 times that on
    # disk), a trial's files within WAREHOUSE_MAX_TRIAL_BYTES together, its trajectories within
    # WAREHOUSE_MAX_STEPS and WAREHOUSE_MAX_TURN_ROWS: each refused before it is read or rendered.
    Case("result-sparse-3gb", "traces", "unit", _mutate("result.json", _sparse(3 << 30)),
         ("3,221,225,472 bytes, more than the 805,306,368", "64 × WAREHOUSE_MAX_FILE_BYTES"), file="result.json"),
    Case("result-sparse-100mb", "traces", "unit", _mutate("result.json", _sparse(100 << 20)),
         ("104,857,600 bytes, of which more than 12,582,912 are kept", "WAREHOUSE_MAX_FILE_BYTES"),
         file="result.json"),
    Case("verifier-stdout-sparse-1gb", "traces", "unit", _mutate("verifier/test-stdout.txt", _sparse(1 << 30)),
         ("1,073,741,824 bytes, more than the 12,582,912", "WAREHOUSE_MAX_FILE_BYTES"),
         file="verifier/test-stdout.txt"),
    Case("trajectory-1m-steps", "traces", "unit", _mutate("agent/trajectory.json", _steps(1_000_000, MILLION_STEPS)),
         ("bytes, more than the 12,582,912", "WAREHOUSE_MAX_FILE_BYTES"), file="agent/trajectory.json"),
    Case("trajectory-200k-steps", "traces", "unit", _mutate("agent/trajectory.json", _steps(200_000, "{}")),
         ("200,004 steps, more than the 100,000", "WAREHOUSE_MAX_STEPS"), file="agent/trajectory.json"),
    # Its 1,502 episodes (the base trial's 2 agent steps and 1,500 more) are prefixes of one
    # conversation of 3,005 turns (2 + 2 × 1,500 + 3), not the 2.3 M rows
    # every episode's own turns made (refused by WAREHOUSE_MAX_TURN_ROWS when they did).
    Case("trajectory-1500-observed-steps", "traces", "valid",
         _mutate("agent/trajectory.json", _steps(1500, OBSERVED_STEP)), check=_check_stored_once(1502, 3005)),
    Case("trial-files-over-12mib", "traces", "unit", _two_files(7 << 20),
         ("take the files of its trial past the 12,582,912", "WAREHOUSE_MAX_TRIAL_BYTES"),
         file="agent/trajectory.helper.json"),
    # The limits are settings: lowered below the bad trial (12 observed steps, a 2,000-byte
    # trajectory) and above its sibling (4 steps, 8 turn rows, a 1,014-byte trajectory).
    Case("setting-max-file-bytes", "traces", "unit", _mutate("agent/trajectory.json", lambda p: _padded(p, 2000)),
         ("2,000 bytes, more than the 1,500 a trace file may have", "WAREHOUSE_MAX_FILE_BYTES"),
         file="agent/trajectory.json", env={"WAREHOUSE_MAX_FILE_BYTES": "1500"}),
    Case("setting-max-trial-bytes", "traces", "unit", _mutate("agent/trajectory.json", lambda p: _padded(p, 2000)),
         ("take the files of its trial past the 2,500", "WAREHOUSE_MAX_TRIAL_BYTES"),
         file="agent/trajectory.json", env={"WAREHOUSE_MAX_TRIAL_BYTES": "2500"}),
    Case("setting-max-steps", "traces", "unit", _mutate("agent/trajectory.json", _steps(12, OBSERVED_STEP)),
         ("16 steps, more than the 10", "WAREHOUSE_MAX_STEPS"), file="agent/trajectory.json",
         env={"WAREHOUSE_MAX_STEPS": "10"}),
    Case("setting-max-turn-rows", "traces", "unit", _mutate("agent/trajectory.json", _steps(12, OBSERVED_STEP)),
         ("more than 20 turn rows", "WAREHOUSE_MAX_TURN_ROWS"), file="agent/trajectory.json",
         env={"WAREHOUSE_MAX_TURN_ROWS": "20"}),
]

CASES = PARQUET_CASES + TRACE_CASES


# --- database views -------------------------------------------------------------------------

def _loads(engine) -> dict[str, dict]:
    with engine.connect() as conn:
        return {r.unit: dict(r._mapping) for r in conn.execute(text("SELECT unit, n_rows, n_rejected FROM loads"))}


def _case_trials(engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(n for (n,) in conn.execute(text(
            "SELECT trial_name FROM trials WHERE trial_name LIKE 'case%' OR trial_name LIKE 'bad%'")))


def _trial(engine, name: str) -> dict:
    with engine.connect() as conn:
        row = conn.execute(text("""
            SELECT t.*, (SELECT count(*) FROM episodes e WHERE e.trial_id = t.id) AS n_episodes
            FROM trials t WHERE t.trial_name = :n"""), {"n": name}).one()._mapping
    out = dict(row)
    if isinstance(out["detail"], str):
        out["detail"] = json.loads(out["detail"])
    raw = ((out["detail"] or {}).get("raw_text") or {}).get("verifier_output")
    if isinstance(raw, dict):  # wrapped: see warehouse.texts
        from warehouse.texts import json_from_db

        raw = json_from_db(raw)
    out["verifier_output_exact"] = raw if raw is not None else out["verifier_output"]
    return out


# --- the test -------------------------------------------------------------------------------

def _source(tmp_path: Path, case: Case) -> tuple[Path, str, str]:
    """Build the case beside its sibling: (source folder, ledger name of the bad unit, the
    path the error line must name)."""
    if case.kind == "parquet":
        src = tmp_path / "dataset"
        write_shard(src / "data" / SIBLING_SHARD, [hub_row("sibling__pq", 0, [("user", "hi"), ("assistant", "hello")])])
        case.build(src / "data" / CASE_SHARD)
        return src, f"data/{CASE_SHARD}", f"data/{CASE_SHARD}"
    src = tmp_path / JOB
    shutil.copytree(CORPUS / "base-trial", src / SIBLING_TRIAL)
    trial = _trial_dir(src, case.id)
    case.build(trial)
    named = case.file if case.file and case.file.startswith(JOB) else f"{JOB}/{trial.name}/{case.file or ''}".rstrip("/")
    return src, trial.name, named


# No input takes an ingest past this much memory (ingest.read.limits), measured on every case.
MEMORY_BOUND_KB = 1 << 20


def _ingest(db_url: str, src: Path, *extra: str, drop_dac: bool = False, env: dict[str, str] | None = None):
    """The CLI's result, its peak resident memory checked against the bound."""
    import subprocess

    prefix = DROP_DAC if drop_dac else []
    done, peak_kb = run_with_peak([*prefix, *CLI, "--db", db_url, "ingest", str(src), *extra], timeout=300,
                                  stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    assert 0 < peak_kb < MEMORY_BOUND_KB, f"peak {peak_kb} KB"
    return done


def _stderr_lines(done) -> list[str]:
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    stray = [line for line in lines if not line.startswith(STDERR_PREFIXES)]
    assert stray == [], f"unexpected stderr lines (a multi-line error?): {stray}"
    assert done.stdout == ""
    return lines


SIBLING_EPISODES = {"parquet": 1, "traces": 2}


def _assert_sibling_loaded(engine, case: Case) -> None:
    loads = _loads(engine)
    if case.kind == "parquet":
        assert f"data/{SIBLING_SHARD}" in loads
        assert _trial(engine, "sibling__pq")["n_episodes"] == SIBLING_EPISODES["parquet"]
    else:
        assert SIBLING_TRIAL in loads
        assert _trial(engine, SIBLING_TRIAL)["n_episodes"] == SIBLING_EPISODES["traces"]


def _n_episodes(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM episodes")).scalar()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, backend, db_url, engine, tmp_path):
    drop_dac = False
    if case.unreadable and IS_ROOT:
        if not DROP_DAC:
            pytest.skip("running as root without setpriv: chmod 000 does not stop root from reading")
        drop_dac = True
    src, bad_unit, named = _source(tmp_path, case)

    done = _ingest(db_url, src, drop_dac=drop_dac, env=case.env)
    lines = _stderr_lines(done)
    errors = [line for line in lines if line.startswith("Error: ")]

    if case.outcome == "valid":
        assert done.returncode == 0 and errors == [], done.stderr
        assert units(done.stderr) == (2, 0, 0)
        _assert_sibling_loaded(engine, case)
        if case.kind == "parquet":
            case.check(engine, src)
        else:
            case.check(engine, src, case.id)
        return

    # A bad unit, or a unit with a bad row: the unit fails as a whole.
    assert done.returncode == 1, done.stderr
    assert len(errors) == 1, done.stderr
    assert named in errors[0], (named, errors[0])
    for what in case.where:
        assert what in errors[0], (what, errors[0])
    assert units(done.stderr) == (1, 0, 1)
    assert bad_unit not in _loads(engine)
    assert _case_trials(engine) == []
    _assert_sibling_loaded(engine, case)
    assert _n_episodes(engine) == SIBLING_EPISODES[case.kind]  # nothing else, anywhere

    # Again with --keep-going: the sibling is skipped (loaded already). For a failed unit the
    # flag changes only the exit code, decided above the database, so that is checked on one
    # backend; a bad row's rejection is checked on both.
    if case.outcome == "unit" and backend != "sqlite":
        return
    again = _ingest(db_url, src, "--keep-going", drop_dac=drop_dac, env=case.env)
    lines = _stderr_lines(again)
    errors = [line for line in lines if line.startswith("Error: ")]
    assert again.returncode == 0, again.stderr
    if case.outcome == "unit":
        assert len(errors) == 1 and named in errors[0], again.stderr
        assert units(again.stderr) == (0, 1, 1)
        assert bad_unit not in _loads(engine) and _case_trials(engine) == []
        assert _n_episodes(engine) == SIBLING_EPISODES[case.kind]
    else:
        # The bad row is rejected (reported, counted); the rest of its shard loads.
        assert errors == [], again.stderr
        assert units(again.stderr) == (1, 1, 0)
        assert "rows rejected: 1" in again.stderr
        rejected = [line for line in lines if line.startswith("warning: ") and "rejected" in line]
        assert len(rejected) == 1 and f"{named} row 1" in rejected[0], again.stderr
        assert _loads(engine)[bad_unit]["n_rejected"] == 1
        assert _case_trials(engine) == ["case__r0", "case__r2"]
        assert _n_episodes(engine) == SIBLING_EPISODES["parquet"] + 2


# --- a bad unit spoils only itself; nothing loadable is an error ------------------------------

def _job_of_trials(root: Path, names: list[str]) -> Path:
    for name in names:
        shutil.copytree(CORPUS / "base-trial", root / name)
    return root


def test_deep_trial_spoils_only_its_unit(db_url, engine, tmp_path):
    """A trial whose trajectory is 990 deep (which used to end the ingest in a RecursionError,
    skipping every later unit and source) between good trials, and a second source after it:
    one line for the deep trial, everything else loaded."""
    first = _job_of_trials(tmp_path / "first", ["ok__a", "deep__m", "ok__z"])
    _deep_field("metrics", 990, 2)(first / "deep__m" / "agent" / "trajectory.json")
    second = _job_of_trials(tmp_path / "second", ["ok__later"])
    done = _ingest(db_url, first, str(second))
    errors = [line for line in _stderr_lines(done) if line.startswith("Error: ")]
    assert done.returncode == 1
    assert errors == [f"Error: {first}/deep__m/agent/trajectory.json: field 'steps[2].metrics…': "
                      "JSON nested more than 500 levels deep"], done.stderr
    assert units(done.stderr) == (3, 0, 1)
    with engine.connect() as conn:
        assert sorted(n for (n,) in conn.execute(text("SELECT trial_name FROM trials"))) == [
            "ok__a", "ok__later", "ok__z"]


NOT_LOADABLE = {
    "empty folder": {},
    "random files": {"a.bin": bytes(range(256)) * 4, "notes/b.txt": b"hello\n", "c.parquet.txt": b"PAR1"},
    "JSON that is not Harbor": {"data.json": b'{"a": 1}', "run/x.json": b"[1, 2]", "t1/result.json": b'{"a": 1}'},
    "a Hub card without shards": {"README.md": b"---\nlicense: mit\n---\n# a dataset\n", "data/train.csv": b"a\n1\n"},
}


@pytest.mark.parametrize("files", NOT_LOADABLE.values(), ids=NOT_LOADABLE)
def test_nothing_loadable_is_an_error(files, db_url, engine, tmp_path):
    """A folder with no unit in it names itself and what was looked for, exits 1 and records
    no source."""
    folder = tmp_path / "folder"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    done = _ingest(db_url, folder)
    assert done.returncode == 1
    assert [line for line in _stderr_lines(done) if line.startswith("Error: ")] == [
        f"Error: {folder}: nothing to load: no rows files (*.parquet, *.jsonl, *.ndjson, a list in *.json, "
        "gzipped, or a Hub snapshot's data/*) and "
        "no Harbor trial directories (a result.json, config.json, agent/ or steps/) under it"], done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sources")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM loads")).scalar() == 0


# --- ad-hoc SQL cannot write ------------------------------------------------------------------

WRITES = [
    "DELETE FROM trials",
    "DROP TABLE runs",
    "INSERT INTO runs(run_key) VALUES ('x')",
    "UPDATE trials SET reward = 0",
    "CREATE TABLE scratch (a integer)",
    "SELECT 1; DELETE FROM trials",
    "WITH gone AS (DELETE FROM trials RETURNING id) SELECT count(*) FROM gone",
    "ATTACH DATABASE '{tmp}/attached.db' AS other",
    "VACUUM INTO '{tmp}/copy.db'",
    "PRAGMA user_version = 7",
]


def _snapshot(engine) -> dict:
    from helpers import counts

    with engine.connect() as conn:
        tables = sorted(n for (n,) in conn.execute(text(
            "SELECT name FROM sqlite_master WHERE type = 'table'" if engine.dialect.name == "sqlite" else
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")))
        version = conn.execute(text("PRAGMA user_version")).scalar() if engine.dialect.name == "sqlite" else None
        rewards = conn.execute(text("SELECT sum(reward) FROM trials")).scalar()
    return {"counts": counts(engine), "tables": tables, "user_version": version, "rewards": rewards}


@pytest.mark.parametrize("statement", WRITES)
def test_sql_cannot_write(statement, db_url, engine, tmp_path):
    """`warehouse sql` refuses every write on both backends: a non-zero exit, one error line,
    and the warehouse (and the file system) unchanged."""
    import subprocess

    from ingest.pipeline import ingest
    from tools.generate import generate_dataset

    generate_dataset(tmp_path / "ds", "tiny", seed=2)
    assert ingest(engine, [str(tmp_path / "ds")]).errors == []
    before = _snapshot(engine)
    assert before["counts"]["trials"] > 0 and before["rewards"]
    sql = statement.format(tmp=tmp_path)
    done = subprocess.run([*CLI, "--db", db_url, "sql", sql], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode != 0, (sql, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("Error: "), done.stderr
    assert _snapshot(engine) == before
    assert not (tmp_path / "attached.db").exists() and not (tmp_path / "copy.db").exists()


# --- a dataset card, the limits' settings, a Hub cache's links ----------------------------------

def _dataset(folder: Path, trial: str, readme: str | None = None) -> Path:
    write_shard(folder / "data" / "train-00000-of-00001.parquet", [hub_row(trial, 0, [("user", "q"), ("assistant", "a")])])
    if readme is not None:
        (folder / "README.md").write_text(readme)
    return folder


@pytest.mark.parametrize("front_matter", ["labels: {step: 1}\nx: " + "[" * depth + "]" * depth for depth in (100, 3000)]
                         + ["".join("  " * i + f"k{i}:\n" for i in range(250)) + "labels: {step: 1}"],
                         ids=["flow-101-levels", "flow-3001-levels", "block-250-levels"])
def test_deep_card_fails_its_source_only(front_matter, db_url, engine, tmp_path):
    """A dataset card whose YAML front matter nests past 100 levels (which ended the whole ingest
    in a RecursionError traceback) fails its source in one line naming the card, before any unit
    of it is written; the sources after it load."""
    deep = _dataset(tmp_path / "deep", "deep__t", f"---\n{front_matter}\n---\n# a dataset\n")
    later = _dataset(tmp_path / "later", "later__t", "---\nlabels: {step: 2}\n---\n")
    done = _ingest(db_url, str(deep), str(later))
    errors = [line for line in _stderr_lines(done) if line.startswith("Error: ")]
    assert done.returncode == 1
    assert errors == [f"Error: {deep}/README.md: YAML front matter nested more than 100 levels deep"], done.stderr
    with engine.connect() as conn:
        assert [n for (n,) in conn.execute(text("SELECT trial_name FROM trials"))] == ["later__t"]
        assert conn.execute(text("SELECT count(*) FROM sources")).scalar() == 1
        assert conn.execute(text("SELECT value FROM run_labels")).scalars().all() == ["2"]


def test_card_at_100_levels_loads(db_url, engine, tmp_path):
    flat = _dataset(tmp_path / "ok", "ok__t", "---\nlabels: {step: 3}\nx: " + "[" * 99 + "]" * 99 + "\n---\n")
    done = _ingest(db_url, flat)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT value FROM run_labels")).scalars().all() == ["3"]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_a_mistyped_limit_is_one_error(value, db_url, engine, tmp_path):
    src = _job_of_trials(tmp_path / "job", ["ok__a"])
    done = _ingest(db_url, src, env={"WAREHOUSE_MAX_TURN_ROWS": value})
    assert done.returncode == 1
    assert _stderr_lines(done) == [f"Error: WAREHOUSE_MAX_TURN_ROWS={value!r}: expected a whole number above 0"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sources")).scalar() == 0


def test_hub_cache_links_into_blobs_load(db_url, engine, tmp_path):
    """huggingface_hub's cache: a snapshot's files are links into the repository's blobs/ (not
    a trace directory: its links are followed, as before)."""
    repo = tmp_path / "hub" / "datasets--org--name"
    made = _dataset(tmp_path / "made", "hub__t", "---\nlabels: {step: 4}\n---\n")
    snapshot = repo / "snapshots" / "0123abcd"
    (snapshot / "data").mkdir(parents=True)
    (repo / "blobs").mkdir()
    for rel in ("README.md", "data/train-00000-of-00001.parquet"):
        blob = repo / "blobs" / Path(rel).name.replace(".", "-")
        shutil.move(made / rel, blob)
        (snapshot / rel).symlink_to(os.path.relpath(blob, (snapshot / rel).parent))
    done = _ingest(db_url, snapshot)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT trial_name FROM trials")).scalars().all() == ["hub__t"]
        assert conn.execute(text("SELECT value FROM run_labels")).scalars().all() == ["4"]


@pytest.mark.parametrize("link", ["README.md", "data/train-00000-of-00001.parquet"])
def test_a_dataset_folder_link_leading_out_is_refused(link, db_url, engine, tmp_path):
    """A dataset folder's card or shard that links to a file outside the folder is not read (the
    card would be stored, and published again by `export hub`): the source fails in one line
    naming the link, nothing of it is written."""
    outside = _dataset(tmp_path / "elsewhere", "secret__t", "---\nlabels: {secret: shadow}\n---\n")
    src = _dataset(tmp_path / "ds", "ds__t", "---\nlabels: {step: 1}\n---\n")
    (src / link).unlink()
    (src / link).symlink_to(outside / link)
    later = _dataset(tmp_path / "later", "later__t")
    done = _ingest(db_url, str(src), str(later))
    errors = [line for line in _stderr_lines(done) if line.startswith("Error: ")]
    assert done.returncode == 1
    assert errors == [f"Error: {src.resolve() / link}: symbolic link to {(outside / link).resolve()}, "
                      f"outside the dataset folder ({src.resolve()}): not read"], done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT trial_name FROM trials")).scalars().all() == ["later__t"]
        assert conn.execute(text("SELECT count(*) FROM run_labels")).scalar() == 0
