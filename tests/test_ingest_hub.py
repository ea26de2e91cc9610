"""Ingesting Hub-shaped Parquet: counts, idempotency, overlap, conflicts, schema checks and
exact text, on both backends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sqlalchemy import text

import forked_cli
from helpers import conversation_of, counts, hub_row, write_shard
from ingest.pipeline import _prepared_batches, ingest
from tools.generate import generate_dataset
from warehouse.db import schema

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
UUID = "6a29732a-0000-4000-8000-000000000001"


def _dataset(root: Path, rows: list[dict], name: str = "train-00000-of-00001.parquet", **kw) -> Path:
    write_shard(root / "data" / name, rows, **kw)
    return root


def _rows_of(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).all()


def _scalar(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def test_counts_equal_the_input_and_reingest_adds_nothing(engine, tmp_path):
    info = generate_dataset(tmp_path / "ds", "tiny", episodes="all", shards=3, seed=3)
    first = ingest(engine, [str(tmp_path / "ds")])
    assert first.errors == []
    assert first.units_loaded == 3
    assert first.episodes_new == info.n_rows
    assert first.turns == info.n_turns
    c = counts(engine)
    assert c["episodes"] == info.n_rows
    assert c["trials"] == info.n_trials
    assert c["turns"] == info.n_turns
    assert c["episode_loads"] == info.n_rows
    assert c["loads"] == 3

    again = ingest(engine, [str(tmp_path / "ds")])
    assert (again.units_loaded, again.units_skipped, again.episodes_new) == (0, 3, 0)
    assert counts(engine) == c


def test_messages_are_stored_once(engine, tmp_path):
    prompt = "You are a helpful agent. " * 50
    rows = [hub_row(f"t{i}__abcdefg", 0, [("user", prompt), ("assistant", f"answer {i}")]) for i in range(5)]
    ingest(engine, [str(_dataset(tmp_path / "a", rows))])
    ingest(engine, [str(_dataset(tmp_path / "b", [hub_row("other__zzzzzzz", 0, [("user", prompt), ("assistant", "é")])]))])
    assert _scalar(engine, "SELECT count(*) FROM messages WHERE content = :p", p=prompt) == 1
    assert _scalar(engine, "SELECT count(*) FROM turn_text WHERE content = :p", p=prompt) == 6
    # The ledger counts the UTF-8 bytes of text each shard added: the second found its prompt
    # stored and added only "é" (2 bytes).
    n_bytes = [r[0] for r in _rows_of(engine, "SELECT n_bytes FROM loads ORDER BY id")]
    assert n_bytes == [len(prompt) + sum(len(f"answer {i}") for i in range(5)), 2]


def test_all_episodes_prefixes_share_message_rows(engine, tmp_path):
    info = generate_dataset(tmp_path / "ds", "tiny", episodes="all", seed=1)
    ingest(engine, [str(tmp_path / "ds")])
    assert counts(engine)["messages"] < info.n_turns / 2


def test_run_identity(engine, tmp_path):
    rows = [
        hub_row("rl-a__aaaaaaa", 0, [("user", "x")], run_id="rl-a__aaaaaaa"),  # RL: run_id == trial
        hub_row("rl-b__bbbbbbb", 0, [("user", "x")], run_id=None),  # no run id
        hub_row("job-c__ccccccc", 0, [("user", "x")], run_id=UUID),  # a Harbor job
    ]
    ingest(engine, [str(_dataset(tmp_path / "my-dataset", rows))])
    ingest(engine, [str(_dataset(tmp_path / "other", [hub_row("rl-d__ddddddd", 0, [("user", "y")], run_id=None)]))],
           run="sweep-7")
    with engine.connect() as conn:
        got = dict(conn.execute(text(
            "SELECT tr.trial_name, r.run_key FROM trials tr JOIN runs r ON r.id = tr.run_id")).all())
    assert got == {"rl-a__aaaaaaa": "my-dataset", "rl-b__bbbbbbb": "my-dataset",
                   "job-c__ccccccc": UUID, "rl-d__ddddddd": "sweep-7"}


def test_result_is_kept_raw_and_parsed(engine, tmp_path):
    rows = [
        hub_row("a__1111111", 0, [("user", "x")], result="0.25"),
        hub_row("b__2222222", 0, [("user", "x")], result="AgentTimeoutError"),
        hub_row("c__3333333", 0, [("user", "x")], result=None),
        hub_row("d__4444444", 0, [("user", "x")], result="1"),
    ]
    ingest(engine, [str(_dataset(tmp_path / "ds", rows))])
    with engine.connect() as conn:
        got = {r[0]: tuple(r[1:]) for r in conn.execute(text(
            "SELECT trial_name, result, reward, exception_type FROM trials"))}
    assert got == {
        "a__1111111": ("0.25", 0.25, None),
        "b__2222222": ("AgentTimeoutError", None, "AgentTimeoutError"),
        "c__3333333": (None, None, None),
        "d__4444444": ("1", 1.0, None),
    }


def test_overlapping_datasets_share_rows_and_list_both_sources(engine, tmp_path):
    info = generate_dataset(tmp_path / "full", "tiny", seed=5)
    full = pq.read_table(next((tmp_path / "full" / "data").glob("*.parquet")))
    success = full.filter(pa.compute.equal(full["result"], "1.0"))
    assert 0 < success.num_rows < full.num_rows
    (tmp_path / "success" / "data").mkdir(parents=True)
    pq.write_table(success, tmp_path / "success" / "data" / "train-00000-of-00001.parquet")

    ingest(engine, [str(tmp_path / "full")])
    before = counts(engine)
    summary = ingest(engine, [str(tmp_path / "success")])
    assert summary.episodes_new == 0
    assert summary.episodes_duplicate == success.num_rows
    after = counts(engine)
    assert after["episodes"] == before["episodes"] == info.n_rows
    assert after["turns"] == before["turns"]
    assert after["episode_loads"] == info.n_rows + success.num_rows
    n_two_sources = _scalar(engine, """
        SELECT count(*) FROM (
          SELECT el.episode_id FROM episode_loads el JOIN loads l ON l.id = el.load_id
          GROUP BY el.episode_id HAVING count(DISTINCT l.source_id) = 2) x""")
    assert n_two_sources == success.num_rows


def test_same_key_different_content_is_a_conflict(engine, tmp_path):
    original = [hub_row("t__abcdefg", 0, [("user", "hello"), ("assistant", "original answer")])]
    changed = [hub_row("t__abcdefg", 0, [("user", "hello"), ("assistant", "a different answer")])]
    ingest(engine, [str(_dataset(tmp_path / "one", original))])
    summary = ingest(engine, [str(_dataset(tmp_path / "two", changed))])
    assert summary.conflicts == 1 and summary.episodes_new == 0
    assert any("differs" in note for note in summary.notes)
    assert conversation_of(engine, UUID, "t__abcdefg", 0) == [("user", "hello"), ("assistant", "original answer")]
    with engine.connect() as conn:
        entity, field = conn.execute(text("SELECT entity, field FROM conflicts")).one()
    assert (entity, field) == ("episode", "conversation")


@pytest.mark.parametrize("order", [("one", "two"), ("two", "one")])
def test_trial_field_disagreement_is_a_conflict(engine, tmp_path, order):
    """Two datasets disagree on a trial's result: one conflict, naming the dataset whose value
    is not kept, and the value kept does not depend on which came first (the smaller)."""
    rows = {"one": [hub_row("t__abcdefg", 0, [("user", "x")], result="1.0")],
            "two": [hub_row("t__abcdefg", 1, [("user", "y")], result="0.0")]}
    ingest(engine, [str(_dataset(tmp_path / order[0], rows[order[0]]))])
    summary = ingest(engine, [str(_dataset(tmp_path / order[1], rows[order[1]]))])
    assert (summary.conflicts, summary.trial_conflicts) == (0, 1)  # a trial's field, not an episode
    assert _scalar(engine, "SELECT result FROM trials") == "0.0"
    assert _scalar(engine, """SELECT s.uri FROM conflicts c JOIN loads l ON l.id = c.load_id
                              JOIN sources s ON s.id = l.source_id
                              WHERE c.entity = 'trial' AND c.field = 'result'""").endswith("one")


def test_text_comes_back_exactly(engine, tmp_path):
    odd = [
        ("user", "nul\x00byte and more\x00"),
        ("assistant", ""),
        ("user", "non-BMP 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 and CJK 漢字 and RTL שלום"),
        ("assistant", "\u200b zero width, combining e\u0301, BOM \ufeff"),
        ("user", "x" * 100_000),
    ]
    ingest(engine, [str(_dataset(tmp_path / "ds", [hub_row("t__abcdefg", 0, odd)]))])
    assert conversation_of(engine, UUID, "t__abcdefg", 0) == odd


def test_missing_required_column_is_refused_before_reading(engine, tmp_path):
    rows = [hub_row("t__abcdefg", 0, [("user", "x")])]
    for row in rows:
        del row["trial_name"]
    ds = _dataset(tmp_path / "ds", rows)
    summary = ingest(engine, [str(ds)])
    assert summary.units_failed == 1
    assert "missing required column 'trial_name'" in summary.errors[0]
    assert "train-00000-of-00001.parquet" in summary.errors[0]
    assert counts(engine)["episodes"] == 0 and counts(engine)["loads"] == 0


def test_wrong_column_type_is_refused(engine, tmp_path):
    row = hub_row("t__abcdefg", 0, [("user", "x")])
    row["episode"] = 3
    ds = _dataset(tmp_path / "ds", [row], extra_fields=[pa.field("episode", pa.int64())])
    summary = ingest(engine, [str(ds)])
    assert summary.units_failed == 1 and "column 'episode'" in summary.errors[0]


def test_extra_and_optional_columns_are_kept(engine, tmp_path):
    tools = [{"type": "function", "function": {"name": "bash"}}]
    rows = [hub_row("t__abcdefg", 0, [("user", "x")], instruction="Do the thing.", trace_source="main",
                    tool_definitions=json.dumps(tools), my_unknown_column="kept")]
    rows[0]["completion_token_ids"] = [[1, 2, 3], [4]]
    ds = _dataset(tmp_path / "ds", rows, extra_fields=[pa.field("completion_token_ids", pa.list_(pa.list_(pa.int64())))])
    ingest(engine, [str(ds)])
    with engine.connect() as conn:
        extra = conn.execute(text("SELECT extra FROM episodes")).scalar()
        instruction = conn.execute(text(
            "SELECT m.content FROM trials t JOIN messages m ON m.id = t.instruction_id")).scalar()
    if isinstance(extra, str):
        extra = json.loads(extra)
    assert extra == {"tool_definitions": json.dumps(tools), "my_unknown_column": "kept",
                     "completion_token_ids": [[1, 2, 3], [4]]}
    assert instruction == "Do the thing."


def test_shards_may_differ_in_optional_columns(engine, tmp_path):
    ds = tmp_path / "ds"
    write_shard(ds / "data" / "train-00000.parquet", [hub_row("a__aaaaaaa", 0, [("user", "x")])])
    write_shard(ds / "data" / "train-00001.parquet",
                [hub_row("b__bbbbbbb", 0, [("user", "y")], instruction="inst", trace_source="summarization-1-summary")])
    summary = ingest(engine, [str(ds)])
    assert summary.errors == [] and summary.units_loaded == 2
    assert _scalar(engine, "SELECT count(*) FROM episodes WHERE trace_source = 'summarization-1-summary'") == 1


def test_trace_source_is_part_of_the_episode_key(engine, tmp_path):
    rows = [hub_row("t__abcdefg", 0, [("user", "main")], trace_source="main"),
            hub_row("t__abcdefg", 0, [("user", "sub")], trace_source="summarization-1-summary")]
    summary = ingest(engine, [str(_dataset(tmp_path / "ds", rows))])
    assert summary.episodes_new == 2 and summary.conflicts == 0


def test_bad_row_fails_its_shard_unless_keep_going(engine, tmp_path):
    good = [hub_row(f"g{i}__aaaaaaa", 0, [("user", "x")]) for i in range(3)]
    bad = good + [hub_row("bad__bbbbbbb", 0, [("user", "x")], episode="final")]
    ds = tmp_path / "ds"
    write_shard(ds / "data" / "train-00000-of-00002.parquet", good)
    write_shard(ds / "data" / "train-00001-of-00002.parquet",
                [dict(r, trial_name=r["trial_name"].replace("g", "h")) for r in bad])

    stopped = ingest(engine, [str(ds)])
    assert stopped.units_loaded == 1 and stopped.units_failed == 1
    assert "train-00001-of-00002.parquet row 3" in stopped.errors[0] and "episode" in stopped.errors[0]
    assert counts(engine)["episodes"] == 3  # the good shard is kept, nothing of the bad one

    kept = ingest(engine, [str(ds)], keep_going=True)
    assert kept.units_loaded == 1 and kept.units_skipped == 1 and kept.rows_rejected == 1
    assert counts(engine)["episodes"] == 6


def test_an_episode_numbered_beyond_32_bits_is_a_bad_row_on_both_backends(engine, tmp_path):
    rows = [hub_row("a__aaaaaaa", 0, [("user", "x")]),
            hub_row("b__bbbbbbb", 0, [("user", "y")], episode="episode-99999999999")]
    write_shard(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", rows)
    stopped = ingest(engine, [str(tmp_path / "ds")])
    assert stopped.units_failed == 1 and "row 1" in stopped.errors[0] and "numbered beyond" in stopped.errors[0]
    kept = ingest(engine, [str(tmp_path / "ds")], keep_going=True)
    assert kept.units_loaded == 1 and kept.rows_rejected == 1
    assert _rows_of(engine, "SELECT episode_index FROM episodes") == [(0,)]


@pytest.mark.parametrize("backend", ["postgresql"])  # SQLite's integers are all 64-bit
def test_a_value_too_large_for_its_column_is_refused_not_wrapped(engine):
    # Binary COPY would store 2**31 in a 32-bit column as -2**31: the writer refuses it, as
    # the server refused it in text COPY, and the unit fails in one line.
    import psycopg

    from ingest.write import bulk, writer

    with engine.connect() as conn:
        b = bulk.Bulk(conn)
        b.insert(writer.T["conversation_turns"], ["conversation_id", "idx", "role", "message_id", "extra"],
                 [[1, 1], [0, 2**31], ["user", "user"], [None, None], [None, None]])
        with pytest.raises(psycopg.DataError, match=r"conversation_turns.idx: 2147483648 is out of range"):
            b.flush()
        b.insert(writer.T["trials"], ["id", "run_id", "trial_name", "status", "n_input_tokens"],
                 [[1], [1], ["t"], ["complete"], [2**64]])
        with pytest.raises(psycopg.DataError, match="trials: int too big"):
            b.flush()
        b.close()


def test_bulk_rows_come_back_as_written_whichever_columns_are_null_and_texts_given_as_utf8(engine):
    # The bulk writer sends a column that is NULL in every row of a chunk as a NULL literal, and
    # takes message texts as their UTF-8 bytes: neither may change what is stored. Rows are
    # queued as columns, several inserts of a table making one write.
    from ingest.write import bulk, writer

    def columns(rows):
        return list(zip(*rows))

    rows = [(1, b"a" * 32, "plain".encode(), None, 5), (2, b"b" * 32, "ünï ✓".encode(), None, 5),
            (3, b"c" * 32, "nul \ufffd".encode(), "nul \x00".encode(), 5)]
    turns = [(1, 0, "user", 1, None), (1, 1, "assistant", None, None), (1, 2, "tool", 2, {"k": [1, None]})]
    with engine.begin() as conn:
        b = bulk.Bulk(conn)
        conn.execute(text("INSERT INTO runs (id, run_key) VALUES (1, 'r')"))
        conn.execute(text("INSERT INTO trials (id, run_id, trial_name, status) VALUES (1, 1, 't', 'complete')"))
        conn.execute(text("INSERT INTO conversations (id, trial_id) VALUES (1, 1)"))
        conn.execute(text("INSERT INTO episodes (id, trial_id, trace_source, episode_index, n_turns, n_chars, "
                          "conversation_hash, conversation_id) VALUES (1, 1, 'main', 0, 3, 0, 'h', 1)"))
        for part in (rows[:1], rows[1:2]):
            b.insert(writer.T["messages"], ["id", "content_hash", "content", "content_raw", "n_chars"], columns(part))
        for part in (turns[:1], turns[1:2]):
            b.insert(writer.T["conversation_turns"], ["conversation_id", "idx", "role", "message_id", "extra"],
                     columns(part))
        b.flush()
        b.insert(writer.T["messages"], ["id", "content_hash", "content", "content_raw", "n_chars"], columns(rows[2:]))
        b.insert(writer.T["conversation_turns"], ["conversation_id", "idx", "role", "message_id", "extra"],
                 columns(turns[2:]))
        b.flush()
        b.close()
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT id, content_hash, content, content_raw, n_chars FROM messages ORDER BY id"))
        assert [tuple(r) for r in stored] == [(1, b"a" * 32, "plain", None, 5), (2, b"b" * 32, "ünï ✓", None, 5),
                                             (3, b"c" * 32, "nul \ufffd", "nul \x00".encode(), 5)]
        stored = conn.execute(text("SELECT episode_id, idx, role, message_id, extra FROM turns ORDER BY idx"))
        assert [(*r[:4], json.loads(r[4]) if isinstance(r[4], str) else r[4]) for r in stored] == turns
        if engine.dialect.name == "sqlite":
            assert conn.execute(text("SELECT DISTINCT typeof(content) FROM messages")).scalars().all() == ["text"]


def test_the_garbage_collector_is_paused_while_a_unit_is_written_and_runs_again_after(engine, monkeypatch):
    # ...and the unit's caches are freed before it runs again, which would otherwise scan them.
    import gc

    from ingest.shape.records import Episode, Trial, Turn
    from ingest.write import writer

    dropped = []
    real_drop = writer.UnitWriter.drop_caches
    monkeypatch.setattr(writer.UnitWriter, "drop_caches", lambda self: (dropped.append(gc.isenabled()), real_drop(self)))
    source = writer.ensure_source(engine, "parquet", "mem://gc", "gc")
    assert gc.isenabled()
    with writer.unit(engine, source, "a", "hash-a") as w:
        assert not gc.isenabled()
        w.add_trials([Trial("run", "t1", episodes=[Episode(0, [Turn("user", "hi")])])])
    assert gc.isenabled()
    assert dropped == [False]
    assert (w.counts.n_trials, w.counts.n_turns) == (1, 1)
    assert not (w._message_ids or w._trial_ids or w._trial_values or w._episodes)
    with pytest.raises(RuntimeError, match="boom"):
        with writer.unit(engine, source, "b", "hash-b"):
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_new_source_loads_each_shard_once_and_a_reingest_starts_no_reader(engine, tmp_path, monkeypatch):
    # A source never loaded has its reader started on each shard before the shard is hashed; a
    # byte-identical copy of the shard before is a unit of its own (its rows duplicates), and
    # the next shard loads whole.
    from ingest.process import worker

    a = [hub_row(f"a{i}__aaaaaaa", 0, [("user", f"a {i}"), ("assistant", "ok")]) for i in range(40)]
    b = [hub_row(f"b{i}__bbbbbbb", 0, [("user", f"b {i}"), ("assistant", "ok")]) for i in range(30)]
    ds = tmp_path / "ds"
    _dataset(ds, a, name="train-00000-of-00003.parquet")
    shutil.copy(ds / "data" / "train-00000-of-00003.parquet", ds / "data" / "train-00001-of-00003.parquet")
    _dataset(ds, b, name="train-00002-of-00003.parquet")
    summary = ingest(engine, [str(ds)])
    assert (summary.units_loaded, summary.units_skipped, summary.errors) == (3, 0, [])
    assert (summary.episodes_new, summary.episodes_duplicate) == (70, 40)
    assert (counts(engine)["episodes"], counts(engine)["episode_loads"]) == (70, 110)
    started = []
    real_start = worker.Reader._start
    monkeypatch.setattr(worker.Reader, "_start", lambda self: (started.append(1), real_start(self)))
    again = ingest(engine, [str(ds)])
    assert (again.units_loaded, again.units_skipped, started) == (0, 3, [])


def test_a_bad_unit_does_not_stop_the_others(engine, tmp_path):
    ds = tmp_path / "ds"
    (ds / "data").mkdir(parents=True)
    (ds / "data" / "train-00000-of-00002.parquet").write_bytes(b"garbage")
    write_shard(ds / "data" / "train-00001-of-00002.parquet", [hub_row("g__aaaaaaa", 0, [("user", "x")])])
    summary = ingest(engine, [str(ds), str(tmp_path / "does-not-exist")])
    assert summary.units_failed == 2 and summary.units_loaded == 1
    assert "train-00000-of-00002.parquet" in summary.errors[0] and "does-not-exist" in summary.errors[1]
    assert counts(engine)["episodes"] == 1


def test_null_conversations_and_missing_role_are_rejected(engine, tmp_path):
    rows = [hub_row("a__aaaaaaa", 0, [("user", "x")]), hub_row("b__bbbbbbb", 0, [("user", "x")]),
            hub_row("c__ccccccc", 0, [("user", "fine")])]
    rows[0]["conversations"] = None
    rows[1]["conversations"] = [{"role": None, "content": "who am I"}]
    summary = ingest(engine, [str(_dataset(tmp_path / "ds", rows))], keep_going=True)
    assert summary.rows_rejected == 2 and summary.episodes_new == 1
    reasons = " | ".join(summary.notes)
    assert "row 0" in reasons and "conversations is null" in reasons
    assert "row 1" in reasons and "conversations[0].role" in reasons


def test_not_parquet_is_one_clear_error(engine, tmp_path):
    (tmp_path / "ds" / "data").mkdir(parents=True)
    (tmp_path / "ds" / "data" / "train-00000.parquet").write_text("this is not parquet")
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.units_failed == 1 and "not a readable Parquet file" in summary.errors[0]
    assert counts(engine)["loads"] == 0


@pytest.mark.parametrize("golden", ["terminus_2/hello-world-invalid-json", "openhands/hello-world"])
def test_exported_goldens(engine, tmp_path, golden):
    rows = json.loads((FIXTURES / "golden" / f"{golden}.traces.json").read_text())
    table = pa.Table.from_pylist(rows)
    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "ds" / "data" / "train-00000-of-00001.parquet")
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.errors == [] and summary.episodes_new == len(rows)
    for row in rows:
        got = conversation_of(engine, row["run_id"], row["trial_name"], int(row["episode"].split("-")[1]))
        assert got == [(m["role"], m["content"]) for m in row["conversations"]]


def test_single_parquet_file_and_hf_cache_names(engine, tmp_path):
    snapshot = tmp_path / "datasets--org--name" / "snapshots" / "abc123"
    write_shard(snapshot / "data" / "train-00000.parquet", [hub_row("t__abcdefg", 0, [("user", "x")], run_id=None)])
    ingest(engine, [str(snapshot / "data" / "train-00000.parquet")])
    assert _scalar(engine, "SELECT run_key FROM runs") == "org/name"
    assert _scalar(engine, "SELECT name FROM sources") == "org/name"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return forked_cli.run(list(args), cwd=cwd and str(cwd))


def test_cli_ingest_summary_and_errors(db_url, tmp_path):
    ds = _dataset(tmp_path / "ds", [hub_row("t__abcdefg", 0, [("user", "x")])])
    ok = _cli("--db", db_url, "ingest", str(ds))
    assert ok.returncode == 0, ok.stderr
    assert "1 loaded" in ok.stderr and "1 new" in ok.stderr and ok.stdout == ""
    again = _cli("--db", db_url, "ingest", str(ds))
    assert "0 loaded, 1 skipped" in again.stderr

    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 but not really")
    bad = _cli("--db", db_url, "ingest", str(broken))
    assert bad.returncode == 1
    error_lines = [line for line in bad.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and "broken.parquet" in error_lines[0]
    assert "Traceback" not in bad.stderr

    missing = _cli("--db", db_url, "ingest", str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.startswith("Error: ") and "nope" in missing.stderr


def test_cli_creates_a_new_sqlite_warehouse(tmp_path):
    shutil.copytree(Path(__file__).parents[1] / "examples" / "sample", tmp_path / "sample")
    result = _cli("ingest", "sample", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "warehouse.db").exists()
    current = _cli("db", "current", cwd=tmp_path)
    assert current.stdout.strip() == schema.HEAD_REVISION


def test_hub_id_offline_is_one_clear_error(db_url, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([sys.executable, "-m", "warehouse", "--db", db_url, "ingest", "no-such-org/no-such-dataset"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: no-such-org/no-such-dataset: cannot fetch the dataset from the Hub")
    assert "Traceback" not in result.stderr


def test_hub_id_resolves_from_the_local_cache_offline(db_url, tmp_path):
    """A dataset already in huggingface_hub's cache is read from there with HF_HUB_OFFLINE=1:
    the real cache layout (refs/main naming the snapshot), no network, no stand-in."""
    repo = tmp_path / "hub-cache" / "datasets--org--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd" * 5)
    write_shard(repo / "snapshots" / ("0123abcd" * 5) / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, [("user", "from the cache")], run_id=None)])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub-cache")}
    result = subprocess.run([sys.executable, "-m", "warehouse", "--db", db_url, "ingest", "org/cached"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert "1 new" in result.stderr
    from warehouse.db.engine import make_engine, resolve_url

    engine = make_engine(resolve_url(db_url))
    assert _scalar(engine, "SELECT run_key FROM runs") == "org/cached"
    assert _scalar(engine, "SELECT kind || ' ' || uri || ' ' || revision FROM sources") == (
        "hub org/cached " + "0123abcd" * 5)
    engine.dispose()


def test_a_unit_larger_than_its_caches_still_stores_each_row_once(engine, tmp_path, monkeypatch):
    # A first load skips lookups while its caches hold every row of the (empty) tables; once
    # a cache is dropped, the rows it held must be found in the database again.
    from ingest.read import hub
    from ingest.write import bulk, writer

    monkeypatch.setattr(hub, "BATCH_ROWS", 4)
    monkeypatch.setattr(bulk, "PG_FLUSH_ROWS", 10)  # PostgreSQL: many flushes, written while the next batch is made
    monkeypatch.setattr(writer, "MESSAGE_CACHE", 6)
    monkeypatch.setattr(writer, "TRIAL_CACHE", 3)
    monkeypatch.setattr(writer, "EPISODE_CACHE", 3)
    shared = [("system", "You are a helpful agent."), ("user", "Solve the task.")]
    rows = [hub_row(f"task{i % 5}__{i % 7}", i % 3, [*shared, ("assistant", f"answer {i % 11}")])
            for i in range(60)]
    _dataset(tmp_path / "ds", rows)
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.errors == []
    distinct_texts = {c for row in rows for c in (m["content"] for m in row["conversations"])}
    distinct_episodes = {(row["trial_name"], row["episode"]) for row in rows}
    c = counts(engine)
    assert c["messages"] == len(distinct_texts)  # the verifier output is a trial column, not a message
    assert c["trials"] == len({row["trial_name"] for row in rows})
    assert c["episodes"] == len(distinct_episodes)
    assert c["episode_loads"] == len(rows)


def test_units_into_a_warehouse_holding_their_keys_store_each_row_once_whatever_their_caches(engine, tmp_path,
                                                                                          monkeypatch):
    # A unit into a warehouse that holds rows looks its cache misses up among the rows earlier
    # units committed (on PostgreSQL on a connection of its own, never waiting for the flush in
    # flight), while its caches hold every row it wrote; once a cache is dropped, in its own
    # transaction. Three shards whose trials, episodes and texts recur across them, loaded with
    # tiny caches and then with the usual ones: the same tables.
    from ingest.read import hub
    from ingest.write import bulk, writer
    from warehouse.db import models

    shared = [("system", "You are a helpful agent."), ("user", "Solve the task.")]
    # (a key, i % 45, has one conversation: each row after its first is a duplicate)
    rows = [hub_row(f"task{i % 5}__{i % 9}", i % 3, [*shared, ("assistant", f"answer {i % 45 % 13}")])
            for i in range(90)]
    source = tmp_path / "ds"
    for n in range(3):
        write_shard(source / "data" / f"train-0000{n}-of-00003.parquet", rows[n::3])
    kinds = []  # each lookup's `committed`
    real_lookup = bulk.Bulk.lookup

    def lookup(self, table, key_cols, keys, value_cols, *, committed=False):
        kinds.append(committed)
        return real_lookup(self, table, key_cols, keys, value_cols, committed=committed)

    monkeypatch.setattr(bulk.Bulk, "lookup", lookup)
    dumps = []
    for small in (True, False):
        with monkeypatch.context() as small_caches:
            if small:
                small_caches.setattr(hub, "BATCH_ROWS", 4)
                small_caches.setattr(bulk, "PG_FLUSH_ROWS", 10)
                small_caches.setattr(writer, "MESSAGE_CACHE", 6)
                small_caches.setattr(writer, "TRIAL_CACHE", 3)
                small_caches.setattr(writer, "EPISODE_CACHE", 3)
            with engine.begin() as conn:  # the warehouse emptied for the second load
                for table in reversed(models.metadata.sorted_tables):
                    conn.execute(table.delete())
            kinds.clear()
            summary = ingest(engine, [str(source)])
            assert summary.errors == [] and summary.units_loaded == 3
            # Both kinds of lookup were made: among committed rows, and (the caches dropped) in
            # the unit's transaction.
            assert set(kinds) == ({True, False} if small else {True}), kinds
            c = counts(engine)
            assert c["messages"] == len({text for _, text in shared} | {f"answer {i % 13}" for i in range(13)})
            assert c["trials"] == len({row["trial_name"] for row in rows})
            assert c["episodes"] == len({(row["trial_name"], row["episode"]) for row in rows})
            assert c["episode_loads"] == len(rows)
            assert c["conflicts"] == 0
            with engine.connect() as conn:
                dumps.append(sorted(conn.execute(text(
                    "SELECT r.run_key, t.trial_name, e.episode_index, e.conversation_hash, e.n_turns "
                    "FROM episodes e JOIN trials t ON t.id = e.trial_id JOIN runs r ON r.id = t.run_id")).all()))
    assert dumps[0] == dumps[1]


@pytest.mark.parametrize("backend", ["postgresql"])  # SQLite writes in process: no flush is ever in flight
def test_a_lookup_of_committed_rows_does_not_wait_for_the_flush_in_flight(db_url):
    # PostgreSQL: a unit's COPY runs in a thread on the unit's connection while the next batch is
    # prepared; that batch's lookups of rows earlier units committed go to a connection of their
    # own. Here the COPY is held up by a lock another session holds: the lookup answers anyway.
    import threading

    import psycopg

    from ingest.write import bulk, writer
    from warehouse.db.engine import make_engine, resolve_url
    from warehouse.db.session import write_transaction

    engine = make_engine(resolve_url(db_url))
    hashes = [bytes([i]) * 32 for i in range(3)]
    try:
        with write_transaction(engine) as conn:
            conn.execute(writer.T["messages"].insert(), [
                dict(id=i + 1, content_hash=h, content=f"text {i}", n_chars=6) for i, h in enumerate(hashes)])
        blocker = psycopg.connect(db_url.replace("postgresql+psycopg", "postgresql"))
        blocker.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")  # (its transaction stays open)
        with write_transaction(engine, check_references=False) as conn:
            b = bulk.Bulk(conn)
            try:
                b.insert(writer.T["tasks"], ["id", "name"], [[1], ["held up"]])
                b.flush(wait=False)
                found = b.lookup(writer.T["messages"], ["content_hash"], [(h,) for h in hashes] + [(b"z" * 32,)],
                                 ["id"], committed=True)
                assert not b._flushing.done()  # the COPY still waits for the lock
                assert found == {(h,): (i + 1,) for i, h in enumerate(hashes)}
                # A lookup in the unit's own transaction waits for the flush; it is let go.
                threading.Timer(0.5, blocker.rollback).start()
                assert b.lookup(writer.T["tasks"], ["name"], [("held up",)], ["id"]) == {("held up",): (1,)}
            finally:
                b.close()
        blocker.close()
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_stores_a_units_messages_in_hash_order_and_long_texts_with_lz4(engine, tmp_path):
    # Inserts in the order of the messages' (random) hash index walk it once per flush instead of
    # at random; out-of-line texts are compressed with LZ4 where the server has it (it is faster
    # to write than pglz). Either way every text comes back as it went in.
    long_texts = [f"{i} " + "long text, compressible " * 400 for i in range(5)]
    rows = [hub_row(f"task{i}__aaaaaaa", 0, [("user", f"question {i}"), ("assistant", long_texts[i % 5])])
            for i in range(40)]
    summary = ingest(engine, [str(_dataset(tmp_path / "ds", rows))])
    assert summary.errors == []
    with engine.connect() as conn:
        stored = [bytes(h) for h in conn.execute(text("SELECT content_hash FROM messages ORDER BY ctid")).scalars()]
        assert stored == sorted(stored) and len(stored) == 40 + 5
        lz4 = conn.execute(text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                                "WHERE name = 'default_toast_compression'")).scalar()
        methods = conn.execute(text("SELECT DISTINCT pg_column_compression(content) FROM messages "
                                    "WHERE length(content) > 4000")).scalars().all()
        assert methods == (["lz4"] if lz4 else ["pglz"])
        # The unit's setting ended with it.
        assert conn.execute(text("SHOW default_toast_compression")).scalar() == "pglz"
    for i in range(5):
        assert conversation_of(engine, UUID, f"task{i}__aaaaaaa", 0) == [("user", f"question {i}"),
                                                                          ("assistant", long_texts[i])]


def test_reference_checks_are_off_only_inside_an_ingest_unit(tmp_path):
    from warehouse.db.engine import make_engine, resolve_url
    from warehouse.db.session import write_transaction

    engine = make_engine(resolve_url(str(tmp_path / "w.db")))
    schema.upgrade(engine)
    try:
        with write_transaction(engine, check_references=False) as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0
        # The same pooled connection, in the next transaction: checked again.
        with write_transaction(engine) as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_lookups_on_sqlite_search_an_index_instead_of_scanning_the_table(tmp_path):
    # A lookup runs for every batch of an ingest into a non-empty warehouse; one that scanned
    # the table would make each ingest slower the more the warehouse holds.
    from ingest.write import bulk, writer
    from warehouse.db.engine import make_engine, resolve_url

    engine = make_engine(resolve_url(str(tmp_path / "w.db")))
    schema.upgrade(engine)
    lookups = [("messages", ["content_hash"], [(b"x" * 32,), (b"y" * 32,)]),
               ("trials", ["run_id", "trial_name"], [(1, "a"), (2, "b")]),
               ("episodes", ["trial_id", "trace_source", "episode_index"], [(1, "main", 0), (1, "main", 1)])]
    try:
        with engine.begin() as conn:
            b = bulk.Bulk(conn)
            for name, key_cols, keys in lookups:
                for sql, params in b._lookup_statements(writer.T[name], key_cols, [*key_cols, "id"], keys):
                    plan = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", tuple(params))]
                    assert any(step.startswith("SEARCH t ") for step in plan), (name, plan)
                    assert not any(step.startswith("SCAN t") for step in plan), (name, plan)
    finally:
        engine.dispose()


def test_wide_rows_are_read_in_smaller_batches(tmp_path):
    # A batch is about BATCH_BYTES of data: a shard of long conversations (terminal-bench rows
    # are ~80 KB) would otherwise keep the writer waiting for its first batch of BATCH_ROWS rows.
    from ingest.read import hub

    narrow = [hub_row(f"t{i}__aaaaaaa", 0, [("user", "short")]) for i in range(300)]
    wide = [hub_row(f"t{i}__aaaaaaa", 0, [("user", f"{i} " + "x" * 100_000)]) for i in range(30)]
    sizes = {}
    for name, rows in (("narrow", narrow), ("wide", wide)):
        path = write_shard(tmp_path / name / "data" / "train-00000-of-00001.parquet", rows)
        pf, _ = hub.open_shard(path)
        batches = list(hub.read_batches(pf, path, name, None))
        assert sum(len(b.trials) for b in batches) == len(rows)
        sizes[name] = [len(b.trials) for b in batches]
    assert sizes["narrow"][0] == hub.BATCH_ROWS
    assert max(sizes["wide"]) <= hub.BATCH_BYTES // 100_000 < hub.BATCH_ROWS


def test_every_column_ingest_writes_has_a_binary_copy_type():
    # PostgreSQL COPY runs in binary, which names each column's type; a column type added to
    # the schema without one would fail only at the first PostgreSQL ingest.
    from sqlalchemy.dialects.postgresql import psycopg

    from ingest.write import bulk, writer

    dialect = psycopg.dialect()
    for table in writer.T.values():
        for column in table.columns:
            assert column.type.compile(dialect=dialect) in bulk._PG_BINARY_TYPES, (table.name, column.name)


def test_a_prepared_trial_holds_each_field_under_its_name():
    # A batch's trials are bare tuples (TRIAL_ROW); a field out of place would store one column's
    # value in another.
    import dataclasses

    from ingest.shape.prepare import TRIAL_ROW, trial_row
    from ingest.shape.records import Trial

    trial = Trial(run_key="r", trial_name="n")
    for f in dataclasses.fields(Trial):
        if f.name != "episodes":
            setattr(trial, f.name, f"value of {f.name}")
    trial.detail = {"k": 1}
    row = dict(zip(TRIAL_ROW, trial_row(trial, b"instruction hash"), strict=True))
    assert row.pop("instruction_id") == b"instruction hash"
    assert row == {name: getattr(trial, name) for name in row}


def test_ingest_stores_timestamps_on_sqlite_as_the_orm_type_does():
    from datetime import datetime, timedelta, timezone

    from sqlalchemy.dialects import sqlite

    from ingest.write.bulk import sqlite_timestamp
    from warehouse.db.types import UtcDateTime

    orm = UtcDateTime()._cached_bind_processor(sqlite.dialect())
    for value in (datetime(2024, 1, 2, 3, 4, 5), datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc),
                  datetime(1, 1, 1), datetime(999, 5, 5, tzinfo=timezone(timedelta(hours=3, minutes=30))),
                  datetime(2024, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5)))):
        assert sqlite_timestamp(value) == orm(value), value


@pytest.mark.parametrize("profile", ["tiny", "tb", "math"])
def test_column_wise_reading_prepares_what_row_by_row_reading_does(tmp_path, profile):
    from ingest.read import hub
    from ingest.shape.prepare import prepare

    generate_dataset(tmp_path / "ds", profile, episodes="all" if profile == "tb" else "last", shards=1, seed=5,
                     scale=0.05 if profile != "tiny" else 1.0)
    odd = [hub_row("odd__1", 0, [("user", "nul \x00 inside"), ("assistant", "ünïcødé ✓"), ("tool", "")]),
           hub_row("odd__1", 1, [("user", "nul \x00 inside"), ("assistant", None)], instruction="do \x00 it")]
    _dataset(tmp_path / "odd", odd)
    shards = [*sorted((tmp_path / "ds" / "data").glob("*.parquet")), *sorted((tmp_path / "odd" / "data").glob("*.parquet"))]
    compared = 0
    for shard in shards:
        pf, _ = hub.open_shard(shard)
        first = 0
        for batch in pf.iter_batches(batch_size=7):
            columnar = hub._columnar(batch, shard, first, "name", None)
            assert columnar is not None
            expected = prepare(*hub.rows_of(batch, shard, first, "name", None), batch.nbytes)
            assert columnar == expected
            compared += 1
            first += batch.num_rows
    assert compared > 3


def _dies_on_first_shard(shard, run_name, run_override):
    # Runs in the reader process, which has the real function under its own name.
    if shard.name.startswith("train-00000"):
        os._exit(9)  # as if the reader process were killed (out of memory)
    yield from _prepared_batches(shard, run_name, run_override)


def _allocator_after_reading(shard, *args):
    # Runs in the reader process: the allocator Arrow used there.
    import pyarrow as pa

    for _ in _prepared_batches(shard, *args):
        pass
    yield pa.default_memory_pool().backend_name


def test_the_reader_process_reads_with_the_system_allocator_and_leaves_this_ones_alone(tmp_path):
    import pyarrow as pa

    from ingest.process.worker import Reader

    generate_dataset(tmp_path / "ds", "tiny", episodes="last", shards=1, seed=4)
    shard = next((tmp_path / "ds").rglob("*.parquet"))
    ours = pa.default_memory_pool().backend_name
    with Reader() as reader:
        assert list(reader.run(_allocator_after_reading, shard, "ds", None)) == ["system"]
    assert pa.default_memory_pool().backend_name == ours


def test_a_reader_that_dies_fails_its_shard_in_one_line_and_the_next_loads(engine, tmp_path, monkeypatch):
    from ingest import pipeline

    generate_dataset(tmp_path / "ds", "tiny", episodes="last", shards=2, seed=4)
    monkeypatch.setattr(pipeline, "_prepared_batches", _dies_on_first_shard)
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert summary.units_loaded == 1
    assert len(summary.errors) == 1
    assert "train-00000" in summary.errors[0] and "reader process ended unexpectedly" in summary.errors[0]
    assert "\n" not in summary.errors[0]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM loads WHERE status = 'loaded'")).scalar() == 1
