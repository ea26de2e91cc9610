"""Hub rows in JSON (a list), JSON Lines and gzip-compressed JSON Lines, and a lone ATIF
trajectory.json: what they store, their round trip through `export hub --source`, the ledger,
bad input, on both backends. (The same rows as JSONL and as Parquet, in either order:
tests/test_load_order.py.)"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

import forked_cli
from harbor_jobs import _agent, _summary, _trajectory
from helpers import conversation_of, counts, hub_row, write_shard
from ingest.pipeline import ingest
from warehouse.export import export_hub
from warehouse.texts import json_from_db

GOLDEN = Path(__file__).parent / "fixtures" / "harbor" / "golden" / "terminus_2"
# A trajectory and the rows the same Harbor version exported from it: the texts match too.
OPENHANDS = Path(__file__).parent / "fixtures" / "harbor" / "golden" / "openhands"
RUN = "6a29732a-0000-4000-8000-000000000001"  # hub_row's run_id
# Texts that must come back byte for byte: NUL, a character beyond the BMP, a combining accent,
# the line and paragraph separators JavaScript's JSON does not allow raw, a byte-order mark
# inside text, a noncharacter, CR LF, right-to-left text, an escaped quote and backslash.
ODD = "nul\x00 smile\U0001F600 e\u0301 ls\u2028ps\u2029 bom\ufeff non\uffff crlf\r\n rtl\u05e9\u05dc\u05d5\u05dd \"q\" \\b"


def _rows() -> list[dict]:
    """Six rows of three trials, two episodes each (each a prefix of the next), with extra
    columns of several JSON types."""
    rows = []
    for i in range(3):
        conversation = [("user", f"task {i}: {ODD}"), ("assistant", f"answer {i} {ODD}")]
        for k in range(2):
            rows.append(hub_row(f"t{i}__abcdefg", k, conversation, trace_source="main",
                                meta={"k": i, "tags": ["x", ODD]}, score=i + 0.5))
            conversation = [*conversation, ("user", f"observation {k}"), ("assistant", f"step {k + 1}")]
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    """rows as the file's name says: a JSON list (.json), else one object a line, gzipped for .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".json"):
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        return path
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


KINDS = ["rows.json", "rows.jsonl", "rows.ndjson", "rows.jsonl.gz"]


@pytest.mark.parametrize("name", KINDS)
def test_each_kind_stores_its_rows(engine, tmp_path, name):
    rows = _rows()
    source = _write(tmp_path / name, rows)
    summary = ingest(engine, [str(source)])
    assert summary.errors == [] and summary.units_loaded == 1
    assert counts(engine)["episodes"] == len(rows)
    for row in rows:
        expected = [(m["role"], m["content"]) for m in row["conversations"]]
        assert conversation_of(engine, RUN, row["trial_name"], int(row["episode"][len("episode-"):])) == expected
    with engine.connect() as conn:
        extras = conn.execute(text("SELECT e.extra FROM episodes e JOIN trials t ON t.id = e.trial_id "
                                   "WHERE t.trial_name = 't2__abcdefg' AND e.episode_index = 1")).scalar_one()
        trial = conn.execute(text("SELECT agent, model, result, reward, verifier_output, r.name FROM trials t "
                                  "JOIN runs r ON r.id = t.run_id WHERE trial_name = 't1__abcdefg'")).one()
    extras = json_from_db(json.loads(extras) if isinstance(extras, str) else extras)  # NUL kept apart
    assert extras == {"meta": {"k": 2, "tags": ["x", ODD]}, "score": 2.5}
    assert tuple(trial) == ("terminus-2", "openai/gpt-4o", "1.0", 1.0, "1 passed", "rows")


@pytest.mark.parametrize("name", KINDS)
def test_export_of_the_source_gives_back_its_rows_exactly(engine, tmp_path, name):
    rows = _rows()
    source = _write(tmp_path / "in" / name, rows)
    assert ingest(engine, [str(source)]).errors == []
    info = export_hub(engine, tmp_path / "out", sources=[str(source)])
    assert [p.name for p in info.files] == ["rows.parquet"]
    table = pq.read_table(info.files[0])
    assert table.schema.names == list(rows[0])
    assert table.to_pylist() == rows
    got = [m["content"].encode("utf-8") for row in table.to_pylist() for m in row["conversations"]]
    assert got == [m["content"].encode("utf-8") for row in rows for m in row["conversations"]]


def test_reingest_skips_the_file_and_a_changed_file_is_a_new_unit(engine, tmp_path):
    rows = _rows()
    source = _write(tmp_path / "rows.jsonl", rows)
    ingest(engine, [str(source)])
    before = counts(engine)
    again = ingest(engine, [str(source)])
    assert (again.units_loaded, again.units_skipped) == (0, 1)
    assert counts(engine) == before
    _write(source, rows + [hub_row("t9__abcdefg", 0, [("user", "new")])])
    third = ingest(engine, [str(source)])
    assert (third.units_loaded, third.episodes_new, third.episodes_duplicate) == (1, 1, len(rows))


def test_a_dataset_folder_takes_json_rows_beside_parquet(engine, tmp_path):
    rows = _rows()
    write_shard(tmp_path / "ds" / "data" / "train-0.parquet", rows[:2], extra_fields=[
        pa.field("meta", pa.struct([("k", pa.int64()), ("tags", pa.list_(pa.string()))])),
        pa.field("score", pa.float64())])
    _write(tmp_path / "ds" / "data" / "train-1.jsonl.gz", rows[2:4])
    _write(tmp_path / "ds" / "data" / "train-2.json", rows[4:])
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.errors == [] and summary.units_loaded == 3
    assert counts(engine)["episodes"] == len(rows)
    with engine.connect() as conn:
        units = conn.execute(text("SELECT unit FROM loads ORDER BY unit")).scalars().all()
    assert units == ["data/train-0.parquet", "data/train-1.jsonl.gz", "data/train-2.json"]
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "ds")])
    assert [p.name for p in info.files] == ["train-0.parquet", "train-1.parquet", "train-2.parquet"]
    assert [row for f in info.files for row in pq.read_table(f).to_pylist()] == rows
    assert ingest(engine, [str(tmp_path / "ds")]).units_skipped == 3


def test_json_rows_directly_in_a_folder_need_a_list(engine, tmp_path):
    """Beside its rows a folder may keep other JSON (a card's config, notes): a top-level `.json`
    is rows only when it holds a list."""
    rows = _rows()
    _write(tmp_path / "ds" / "a.traces.json", rows)
    (tmp_path / "ds" / "notes.json").write_text('{"about": "not rows"}')
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.errors == [] and summary.units_loaded == 1
    assert counts(engine)["episodes"] == len(rows)


def test_harbors_own_traces_json_loads(engine, tmp_path):
    """The golden `harbor traces export` output, a `.traces.json` list as Harbor writes it."""
    golden = json.loads((GOLDEN / "hello-world-invalid-json.traces.json").read_text(encoding="utf-8"))
    summary = ingest(engine, [str(GOLDEN / "hello-world-invalid-json.traces.json")])
    assert summary.errors == [] and summary.episodes_new == len(golden)
    info = export_hub(engine, tmp_path / "out", sources=[str(GOLDEN / "hello-world-invalid-json.traces.json")])
    assert [p.name for p in info.files] == ["hello-world-invalid-json.traces.parquet"]
    assert pq.read_table(info.files[0]).to_pylist() == golden


# --- bad input ------------------------------------------------------------------------------

GOOD = json.dumps(hub_row("ok__abcdefg", 0, [("user", "fine")], meta={"a": 0}))
BAD_LINES = {  # line: (JSON text, what the one-line error says)
    2: ("not json", "not valid JSON"),
    3: ("[1, 2]", "row is a list, expected an object"),
    4: (json.dumps({**hub_row("b__abcdefg", 1, []), "conversations": "hi"}), "column 'conversations' is a string"),
    5: (json.dumps(hub_row("b__abcdefg", 2, [("user", 5)])), "conversations[0].content is a number"),
    6: (json.dumps({**hub_row("b__abcdefg", 3, [("user", "x")]), "trial_name": 5}), "column 'trial_name' is a number"),
    7: (json.dumps({k: v for k, v in hub_row("b__abcdefg", 4, [("user", "x")]).items() if k != "episode"}),
        "episode None is not 'episode-N'"),
    8: (json.dumps(hub_row("b__abcdefg", 5, [("user", "\ud800")])), "column 'conversations' holds a lone surrogate"),
    9: (json.dumps(hub_row("b__abcdefg", 6, [("user", "x")], meta="text")),  # line 1 has an object
        "column 'meta' is a string, expected struct<a: int64>"),
}


def _bad_jsonl(path: Path) -> Path:
    lines = [GOOD, *(line for line, _ in BAD_LINES.values()),
             json.dumps(hub_row("ok__abcdefg", 1, [("user", "fine"), ("assistant", "yes")], meta={"a": 1}))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cli(*args: str):
    return forked_cli.run(list(args))


def _assert_one_line_error(result, *parts: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert all(part in errors[0] for part in parts), errors[0]


def test_a_bad_row_fails_its_file_naming_the_line(db_url, engine, tmp_path):
    source = _bad_jsonl(tmp_path / "bad.jsonl")
    result = _cli("ingest", "--db", db_url, str(source))
    _assert_one_line_error(result, f"{source} line 2:", "not valid JSON")
    assert counts(engine)["episodes"] == 0 and counts(engine)["loads"] == 0


def test_keep_going_rejects_and_counts_each_bad_row(db_url, engine, tmp_path):
    source = _bad_jsonl(tmp_path / "bad.jsonl")
    result = _cli("ingest", "--db", db_url, "--keep-going", str(source))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for line, (_, why) in BAD_LINES.items():
        assert f"{source} line {line}: rejected: {why}" in result.stderr, (line, result.stderr)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n_rejected FROM loads")).scalar_one() == len(BAD_LINES)
    assert conversation_of(engine, RUN, "ok__abcdefg", 1) == [("user", "fine"), ("assistant", "yes")]
    assert counts(engine)["episodes"] == 2


def test_a_bad_row_of_a_json_list_is_named_by_its_index(db_url, engine, tmp_path):
    rows = _rows()
    rows[3]["episode"] = "third"
    source = _write(tmp_path / "rows.json", rows)
    result = _cli("ingest", "--db", db_url, str(source))
    _assert_one_line_error(result, f"{source} row 3:", "episode 'third' is not 'episode-N'")


UNREADABLE = {  # file name: (bytes, what the one-line error says after the file's name)
    "cut.jsonl.gz": (gzip.compress(("\n".join([GOOD] * 50) + "\n").encode())[:60], "truncated or corrupt gzip"),
    "syntax.json": (f"[{GOOD},\n{{\"a\": }}]".encode(), "row 1: not valid JSON (Expecting value at line 2)"),
    "object.json": (GOOD.encode(), "top level is an object, expected a JSON list of rows"),
    "unclosed.json": (f"[{GOOD}".encode(), "the list ends without ']' after 1 rows"),
    "empty.jsonl": (b"", "empty file (0 bytes)"),
    "latin1.json": (b'["caf\xe9"]', "not valid UTF-8"),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_a_file_that_cannot_be_read_fails_in_one_line(db_url, engine, tmp_path, name):
    data, why = UNREADABLE[name]
    source = tmp_path / name
    source.write_bytes(data)
    result = _cli("ingest", "--db", db_url, str(source))
    _assert_one_line_error(result, str(source), why)
    assert counts(engine)["loads"] == 0


# --- a lone trajectory.json -----------------------------------------------------------------


def test_a_lone_trajectory_is_a_trial_of_its_own(engine, tmp_path):
    """Its episodes are the rows Harbor's exporter made of it (the golden export); its run and
    trial are named for its folder; ingested again, it is skipped."""
    folder = tmp_path / "hello-run"
    folder.mkdir()
    shutil.copy(OPENHANDS / "hello-world.trajectory.json", folder / "trajectory.json")
    golden = json.loads((OPENHANDS / "hello-world.traces.json").read_text(encoding="utf-8"))
    summary = ingest(engine, [str(folder / "trajectory.json")])
    assert summary.errors == [] and summary.units_loaded == 1
    for k, row in enumerate(golden):
        expected = [(m["role"], m["content"]) for m in row["conversations"]]
        assert conversation_of(engine, "hello-run", "hello-run", k) == expected
    with engine.connect() as conn:
        trial = conn.execute(text("SELECT r.name, t.agent, t.model, t.status FROM trials t "
                                  "JOIN runs r ON r.id = t.run_id")).one()
    # The model: Harbor's rows took it from the trial's result.json; the trajectory names none.
    assert tuple(trial) == ("hello-run", golden[0]["agent"], None, "complete")
    assert ingest(engine, [str(folder / "trajectory.json")]).units_skipped == 1


def test_a_lone_trajectory_reads_its_siblings(engine, tmp_path):
    """A continuation and a summarization subagent beside it, read as in a trial's agent/."""
    folder = tmp_path / "lone"
    main = _trajectory([{"step_id": 1, "source": "user", "message": "go"}, _agent(2, "first", "seen")])
    main["continued_trajectory_ref"] = "trajectory.cont-1.json"
    cont = _trajectory([{"step_id": 1, "source": "user", "message": "go", "is_copied_context": True},
                        _agent(2, "first", "seen", is_copied_context=True), _agent(3, "second")])
    for name, value in {"trajectory.json": main, "trajectory.cont-1.json": cont,
                        "trajectory.summarization-1-summary.json": _summary("summary")}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(value), encoding="utf-8")
    assert ingest(engine, [str(folder / "trajectory.json")]).errors == []
    with engine.connect() as conn:
        episodes = conn.execute(text("SELECT trace_source, episode_index, n_turns FROM episodes "
                                     "ORDER BY trace_source, episode_index")).all()
    # main: user, first (episode 0); then its observation and second (episode 1). The subagent,
    # whole: user, answer, its observation, final (episode 0).
    assert [tuple(e) for e in episodes] == [("main", 0, 2), ("main", 1, 4), ("summarization-1-summary", 0, 4)]
    assert conversation_of(engine, "lone", "lone", 1) == [("user", "go"), ("assistant", "first\n<tool_call>\n"
                                                          '{"name": "bash", "arguments": {"cmd": "ls 2"}}\n</tool_call>'),
                                                          ("user", "seen"), ("assistant", "second\n<tool_call>\n"
                                                          '{"name": "bash", "arguments": {"cmd": "ls 3"}}\n</tool_call>')]


def test_a_trials_agent_trajectory_stands_for_its_trial(engine, tmp_path):
    """`trial/agent/trajectory.json` given directly is its trial, read whole (as a step folder is)."""
    from harbor_jobs import build_job

    job = build_job(tmp_path)
    trial = job / "sum-a__1111111"
    assert ingest(engine, [str(trial / "agent" / "trajectory.json")]).errors == []
    with engine.connect() as conn:
        found = conn.execute(text("SELECT trial_name, reward FROM trials")).one()
    assert tuple(found) == ("sum-a__1111111", 0.5)


def test_other_files_are_refused_in_one_line(db_url, tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    result = _cli("ingest", "--db", db_url, str(other))
    _assert_one_line_error(result, str(other), "not a rows file (.parquet, .json, .jsonl")


def test_deleting_a_parquet_source_leaves_what_its_jsonl_twin_alone_gives(backend, db_url, engine, tmp_path,
                                                                           request):
    """`sources delete` makes the trials the other source holds again from its rows, read back
    as its unit held them: here a JSONL that disagrees with the Parquet on one trial's result."""
    import canonical
    from conftest import another_warehouse
    from warehouse.db.engine import make_engine, resolve_url

    rows = _rows()
    jsonl_rows = [dict(row, result="0.0") if row["trial_name"] == "t1__abcdefg" else row for row in rows]
    parquet = write_shard(tmp_path / "p" / "rows.parquet", rows, extra_fields=[
        pa.field("meta", pa.struct([("k", pa.int64()), ("tags", pa.list_(pa.string()))])),
        pa.field("score", pa.float64())])
    jsonl = _write(tmp_path / "j" / "rows.jsonl", jsonl_rows)
    assert ingest(engine, [str(parquet), str(jsonl)]).errors == []
    done = _cli("sources", "delete", str(parquet), "--yes", "--db", db_url)
    assert done.returncode == 0, done.stderr
    provenance = ("sources", "loads", "trial_loads", "conflicts", "run_sources", "episode_loads")
    with another_warehouse(backend, tmp_path / "alone", request,
                           lambda e: ingest(e, [str(jsonl)])) as url:
        alone = make_engine(resolve_url(url))
        want = {t: r for t, r in canonical.dump(alone, order_independent=True).items() if t not in provenance}
        alone.dispose()
    got = {t: r for t, r in canonical.dump(engine, order_independent=True).items() if t not in provenance}
    assert canonical.differences(want, got) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT result FROM trials WHERE trial_name = 't1__abcdefg'")).scalar_one() == "0.0"


def test_a_json_list_row_longer_than_a_read_chunk_is_read_whole(engine, tmp_path):
    """A JSON list is parsed an element at a time from chunks of 1 MiB: a row of 3 MB (and the
    rows around it, and a number at a chunk's end) come whole."""
    from ingest.read.json_rows import CHUNK

    long = "é" * (3 << 20) + ODD
    rows = [hub_row("a__abcdefg", 0, [("user", "short")]),
            hub_row("a__abcdefg", 1, [("user", "short"), ("assistant", long)]),
            hub_row("a__abcdefg", 2, [("user", "after")], score=12345678)]
    source = _write(tmp_path / "rows.json", rows)
    assert len(source.read_text(encoding="utf-8")) > 3 * CHUNK
    assert ingest(engine, [str(source)]).errors == []
    assert conversation_of(engine, RUN, "a__abcdefg", 1) == [("user", "short"), ("assistant", long)]
    assert conversation_of(engine, RUN, "a__abcdefg", 2) == [("user", "after")]


def test_a_row_split_by_a_chunk_boundary_is_read_whole(engine, tmp_path):
    from ingest.read.json_rows import CHUNK

    head = json.dumps([hub_row("a__abcdefg", 0, [("user", "x")])])[:-1] + ", "
    row = json.dumps(hub_row("a__abcdefg", 1, [("user", "y")], score=0))[:-1] + ', "n": '
    pad = CHUNK - len(head) - len(row) - 3  # the number 123456 starts 3 characters before the chunk ends
    row = row.replace('"y"', '"' + "y" * pad + '"')
    source = tmp_path / "rows.json"
    source.write_text(head + row + "123456}]", encoding="utf-8")
    assert ingest(engine, [str(source)]).errors == []
    with engine.connect() as conn:
        extra = conn.execute(text("SELECT extra FROM episodes WHERE episode_index = 1")).scalar_one()
    assert (json.loads(extra) if isinstance(extra, str) else extra) == {"score": 0, "n": 123456}


def test_a_row_past_the_file_limit_is_refused(db_url, engine, tmp_path):
    """One row is read whole, so WAREHOUSE_MAX_FILE_BYTES bounds it: a JSON Lines line past it is
    a rejected row; a JSON list's row past it fails its file."""
    import os

    rows = [hub_row("a__abcdefg", 0, [("user", "x" * 5000)]), hub_row("a__abcdefg", 1, [("user", "y")])]
    env = {**os.environ, "WAREHOUSE_MAX_FILE_BYTES": "4096"}
    lines = _write(tmp_path / "rows.jsonl", rows)
    result = forked_cli.run(["ingest", "--db", db_url, "--keep-going", str(lines)], env=env)
    assert result.returncode == 0, result.stderr
    assert f"{lines} line 1: rejected: longer than 4096 bytes (WAREHOUSE_MAX_FILE_BYTES)" in result.stderr
    assert conversation_of(engine, RUN, "a__abcdefg", 1) == [("user", "y")]
    listed = _write(tmp_path / "rows.json", rows)
    result = forked_cli.run(["ingest", "--db", db_url, str(listed)], env=env)
    _assert_one_line_error(result, f"{listed} row 0:", "longer than 4096 bytes")
