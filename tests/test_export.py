"""Exporting: ingest then `export hub` reproduces every input shard exactly (schema and values),
run and source selection, trace-directory rows with Harbor's columns, `export tables` read back
with pyarrow, and the CLI, on both backends."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sqlalchemy import text

import forked_cli
from helpers import CONVERSATIONS, TABLES, counts, hub_row, write_shard
from ingest.pipeline import ingest
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from tools.generate import generate_dataset
from warehouse.errors import WarehouseError
from warehouse.export import export_hub
from warehouse.export_tables import export_tables
from warehouse.filters import Filters
from warehouse.harbor_rows import Columns

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
UUID = "6a29732a-0000-4000-8000-000000000001"
OTHER_UUID = "6a29732a-0000-4000-8000-000000000002"


def assert_same_shards(input_dir: Path, output_dir: Path) -> int:
    """Every input shard has an output shard of the same name with equal schema (metadata
    included) and values; returns the number of rows compared."""
    inputs = sorted((input_dir / "data").glob("*.parquet"))
    outputs = sorted((output_dir / "data").glob("*.parquet"))
    assert [p.name for p in outputs] == [p.name for p in inputs]
    n = 0
    for src, out in zip(inputs, outputs):
        expected, got = pq.read_table(src), pq.read_table(out)
        assert got.schema.equals(expected.schema, check_metadata=True), src.name
        assert got.equals(expected), f"{src.name}: {_first_difference(expected, got)}"
        n += got.num_rows
    return n


def _first_difference(expected: pa.Table, got: pa.Table) -> str:
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} rows, expected {expected.num_rows}"
    for name in expected.schema.names:
        want, have = expected[name].to_pylist(), got[name].to_pylist()
        for i, (a, b) in enumerate(zip(want, have)):
            if a != b:
                return f"column {name!r} row {i}: {b!r:.300} != expected {a!r:.300}"
    return "equal as Python values, different as Arrow"


def round_trip(engine, dataset: Path, out: Path, **ingest_kw) -> int:
    summary = ingest(engine, [str(dataset)], **ingest_kw)
    assert summary.errors == []
    info = export_hub(engine, out, sources=[str(dataset)])
    assert info.notes == []
    n = assert_same_shards(dataset, out)
    assert info.n_rows == n
    return n


# --- generated datasets --------------------------------------------------------------------


@pytest.mark.parametrize("episodes, rl", [("last", False), ("all", False), ("last", True), ("all", True)])
def test_generated_tiny_round_trips(engine, tmp_path, episodes, rl):
    info = generate_dataset(tmp_path / "ds", "tiny", episodes=episodes, shards=3, seed=7, rl=rl,
                            instruction=rl)
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == info.n_rows


def test_generated_tb_round_trips(engine, tmp_path):
    info = generate_dataset(tmp_path / "ds", "tb", episodes="all", shards=2, scale=0.2, seed=11)
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == info.n_rows


@pytest.mark.parametrize("golden", ["terminus_2/hello-world-invalid-json", "openhands/hello-world"])
def test_goldens_round_trip(engine, tmp_path, golden):
    rows = json.loads((FIXTURES / "golden" / f"{golden}.traces.json").read_text())
    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ds" / "data" / "train-00000-of-00001.parquet")
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == len(rows)


# --- corner cases --------------------------------------------------------------------------

TOKEN_IDS = pa.list_(pa.list_(pa.int64()))


def _corner_rows() -> list[dict]:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"cmd": "string"}}}]
    rows = [
        hub_row("nul__aaaaaaa", 0, [("user", "nul\x00byte\x00"), ("assistant", "")], instruction="Do\x00it."),
        hub_row("bmp__bbbbbbb", 0, [("user", "non-BMP 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 漢字 שלום"), ("assistant", "\ufeff\u200b")],
                verifier_output="passed \x00 with a NUL", instruction=""),
        hub_row("empty__ccccccc", 0, [("user", ""), ("assistant", "")], agent="", model="", result="",
                verifier_output="", date=""),
        hub_row("pad__ddddddd", 0, [("user", "padded")], episode="episode-007", trace_source="main"),
        hub_row("pad__ddddddd", 8, [("user", "padded"), ("assistant", "more")], episode="episode-0008",
                trace_source="summarization-1-summary"),
        hub_row("nulls__eeeeeee", 0, [("user", "x")], agent=None, model=None, model_provider=None, date=None,
                task=None, run_id=None, result=None, verifier_output=None, instruction=None, trace_source=None),
        hub_row("rl__fffffff", 3, [("user", "rollout"), ("assistant", "done")], run_id="rl__fffffff"),
    ]
    rows[0]["conversations"].append({"role": "assistant", "content": None})  # a null content
    for i, row in enumerate(rows):
        row.setdefault("trace_source", "main")
        row.setdefault("instruction", f"instruction for {row['trial_name']}")  # a trial column
        row["tool_definitions"] = json.dumps(tools) if i % 2 else None
        row["completion_token_ids"] = [[1, 2, 2**40], [], [i]] if i != 2 else None
        row["prompt_token_ids"] = [[]] if i == 3 else [[7] * i]
        row["logprobs"] = [[-0.5, float(i)]]
        row["my_unknown_column"] = f"kept {i}" if i != 4 else None
    return rows


CORNER_FIELDS = [pa.field("completion_token_ids", TOKEN_IDS), pa.field("prompt_token_ids", TOKEN_IDS),
                 pa.field("logprobs", pa.list_(pa.list_(pa.float64())))]


def test_corner_cases_round_trip(engine, tmp_path):
    write_shard(tmp_path / "ds" / "data" / "train-00000-of-00003.parquet", _corner_rows(), CORNER_FIELDS)
    # A shard with no rows at all comes back as an empty shard with its schema.
    write_shard(tmp_path / "ds" / "data" / "train-00001-of-00003.parquet", [])
    # Columns typed null (every value missing), beside a normal row.
    write_shard(tmp_path / "ds" / "data" / "train-00002-of-00003.parquet",
                [hub_row("nulltype__ggggggg", 0, [("user", "y")], result=None, verifier_output=None)],
                [pa.field("result", pa.null()), pa.field("verifier_output", pa.null())])
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == len(_corner_rows()) + 1


def test_odd_arrow_types_round_trip(engine, tmp_path):
    """Columns and struct fields whose values are JSON-ified on ingest come back as their type."""
    message = pa.struct([("content", pa.large_string()), ("role", pa.large_string()), ("name", pa.string()),
                         ("blob", pa.binary())])
    schema = pa.schema([
        pa.field("conversations", pa.large_list(message)),
        pa.field("trial_name", pa.string()), pa.field("episode", pa.large_string()),
        pa.field("run_id", pa.string()),
        pa.field("when", pa.timestamp("us", tz="UTC")), pa.field("naive", pa.timestamp("ms")),
        pa.field("day", pa.date32()), pa.field("price", pa.decimal128(12, 4)),
        pa.field("raw", pa.binary()), pa.field("fixed", pa.binary(3)),
        pa.field("scores", pa.map_(pa.string(), pa.int64())), pa.field("ratio", pa.float32()),
        pa.field("flag", pa.bool_()), pa.field("small", pa.int8()),
        pa.field("label", pa.dictionary(pa.int32(), pa.string())),
        pa.field("nested", pa.struct([("when", pa.timestamp("us", tz="UTC")), ("ids", pa.list_(pa.int32()))])),
        pa.field("sharegpt", pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))),
    ], metadata={"note": "custom metadata survives"})
    rows = [
        dict(conversations=[{"content": "hi", "role": "user", "name": "me", "blob": b"\x00\xff"},
                            {"content": None, "role": "assistant", "name": None, "blob": None}],
             trial_name=f"odd{i}__hhhhhhh", episode=f"episode-{i}", run_id=UUID,
             when=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc), naive=datetime(2026, 1, 2, 3, 4, 5, 6000),
             day=date(2026, 2, 3), price=Decimal("12345678.1234"), raw=b"\x00bytes\xff", fixed=b"abc",
             scores=[("a", 1), ("b", 2**50)], ratio=0.1, flag=bool(i), small=-7, label="x" if i else "y",
             nested={"when": datetime(2026, 5, 1, tzinfo=timezone.utc), "ids": [1, 2]},
             sharegpt=[{"from": "human", "value": "hi"}])
        for i in range(3)
    ]
    rows.append({name: None for name in schema.names} | dict(conversations=[], trial_name="odd3__hhhhhhh",
                                                                episode="episode-3"))
    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "ds" / "data" / "train-00000.parquet")
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == 4


def test_floats_that_are_not_numbers_round_trip(engine, tmp_path):
    # JSON has no NaN or infinities: an extra column keeps them as words, turned back on export.
    schema = pa.schema([
        pa.field("conversations", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        pa.field("trial_name", pa.string()), pa.field("episode", pa.string()),
        pa.field("score", pa.float64()), pa.field("ratio", pa.float32()),
        pa.field("curve", pa.list_(pa.float64())), pa.field("stats", pa.struct([("mean", pa.float64())])),
    ])
    values = [float("nan"), float("inf"), float("-inf"), 1.5]
    rows = [dict(conversations=[{"role": "user", "content": f"q{i}"}], trial_name=f"f{i}__fffffff",
                 episode="episode-0", score=v, ratio=v, curve=[v, 0.25], stats={"mean": v})
            for i, v in enumerate(values)]
    (tmp_path / "ds" / "data").mkdir(parents=True)
    shard = tmp_path / "ds" / "data" / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), shard)
    assert ingest(engine, [str(tmp_path / "ds")]).errors == []
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT e.extra FROM episodes e JOIN trials t ON t.id = e.trial_id "
                                   "WHERE t.trial_name = 'f0__fffffff'")).scalar_one()
    assert (json.loads(stored) if isinstance(stored, str) else stored)["score"] == "NaN"
    export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "ds")])
    got = pq.read_table(tmp_path / "out" / "data" / shard.name)
    assert got.schema.equals(schema)
    # NaN equals nothing, itself included: compared by its text.
    assert repr(got.to_pylist()) == repr(pq.read_table(shard).to_pylist())


@pytest.mark.slow
def test_a_50_mb_message_round_trips(engine, tmp_path):
    huge = "0123456789abcdef\x00" * (50 * 1024 * 1024 // 17)
    write_shard(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet",
                [hub_row("big__iiiiiii", 0, [("user", "small"), ("assistant", huge)])])
    started = time.perf_counter()
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == 1
    assert time.perf_counter() - started < 60


def test_second_source_values_of_a_trial_come_back(engine, tmp_path):
    """A dataset that disagrees with an earlier one about a trial (a regraded result) exports
    its own values: the conflict records them."""
    write_shard(tmp_path / "one" / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, [("user", "x")], result="1.0", verifier_output="ok")])
    write_shard(tmp_path / "two" / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, [("user", "x")], result="0.0", verifier_output="regraded"),
                 hub_row("t__abcdefg", 1, [("user", "x"), ("assistant", "y")], result="0.0",
                         verifier_output="regraded")])
    round_trip(engine, tmp_path / "one", tmp_path / "out-one")
    round_trip(engine, tmp_path / "two", tmp_path / "out-two")
    assert counts(engine)["conflicts"] >= 2


def test_a_row_whose_conversation_conflicts_comes_back_from_its_own_source(engine, tmp_path):
    """A second dataset with another conversation under a stored episode's key: the tables keep
    the first version, the conflict keeps the row's own, and each source exports exactly what
    it had."""
    write_shard(tmp_path / "one" / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, [("user", "x"), ("assistant", "first answer")])])
    write_shard(tmp_path / "two" / "data" / "train-00000-of-00001.parquet",
                [hub_row("u__hijklmn", 0, [("user", "y")]),
                 hub_row("t__abcdefg", 0, [("user", "x"), ("assistant", "second answer"), ("user", "more\x00")]),
                 hub_row("t__abcdefg", 1, [("user", "x")])])
    round_trip(engine, tmp_path / "one", tmp_path / "out-one")
    round_trip(engine, tmp_path / "two", tmp_path / "out-two")
    assert counts(engine)["conflicts"] == 1

    by_run = pq.read_table(export_hub(engine, tmp_path / "out-run", Filters(runs=(UUID,))).files[0]).to_pylist()
    first = [r for r in by_run if (r["trial_name"], r["episode"]) == ("t__abcdefg", "episode-0")]
    assert [m["content"] for m in first[0]["conversations"]] == ["x", "first answer"]
    assert len(by_run) == 3

    # A load from before schema 0005 kept no provenance for such a row: the export says so.
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM episode_loads WHERE (load_id, row_number) IN "
                          "(SELECT load_id, row_number FROM conflicts WHERE entity = 'episode')"))
    info = export_hub(engine, tmp_path / "out-legacy", sources=[str(tmp_path / "two")])
    assert info.n_rows == 2 and len(info.notes) == 1 and "1 rows differ" in info.notes[0]


def test_a_repeated_episode_keeps_each_rows_own_extra_columns(engine, tmp_path):
    """The same episode (same conversation) in two datasets whose other columns differ: one
    episode, no conflict, and each dataset's rows come back with their own columns."""
    conversation = [("user", "x"), ("assistant", "y")]
    write_shard(tmp_path / "one" / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, conversation, split="train")])
    write_shard(tmp_path / "two" / "data" / "train-00000-of-00001.parquet",
                [hub_row("t__abcdefg", 0, conversation, split="test", episode="episode-000", note="kept"),
                 hub_row("t__abcdefg", 1, conversation, split="test", note=None)])
    # A third dataset with the first one's rows, under another file name (a unit of its own).
    write_shard(tmp_path / "three" / "data" / "train-00000-of-00002.parquet",
                [hub_row("t__abcdefg", 0, conversation, split="train")])
    for name in ("one", "two", "three"):
        round_trip(engine, tmp_path / name, tmp_path / f"out-{name}")
    c = counts(engine)
    assert (c["episodes"], c["episode_loads"], c["conflicts"]) == (2, 4, 0)
    with engine.connect() as conn:  # only the row that differs keeps extra columns of its own
        own = conn.execute(text("SELECT count(*) FROM episode_loads WHERE extra IS NOT NULL")).scalar()
    assert own == 1


def test_byte_identical_shards_each_come_back(engine, tmp_path):
    """Two shards of one dataset with the same bytes are two inputs: each has its own ledger
    row and provenance (its rows are duplicates of the first's episodes, not new episodes), a
    re-ingest skips both, and `export hub --source` writes both, under their own names."""
    rows = [hub_row(f"t{i}__abcdefg", 0, [("user", f"q{i}"), ("assistant", f"a{i}")]) for i in range(3)]
    first = write_shard(tmp_path / "ds" / "data" / "train-00000-of-00002.parquet", rows)
    (tmp_path / "ds" / "data" / "train-00001-of-00002.parquet").write_bytes(first.read_bytes())
    summary = ingest(engine, [str(tmp_path / "ds")])
    assert (summary.units_loaded, summary.episodes_new, summary.episodes_duplicate, summary.errors) == (2, 3, 3, [])
    c = counts(engine)
    assert (c["loads"], c["episodes"], c["episode_loads"], c["conflicts"]) == (2, 3, 6, 0)
    with engine.connect() as conn:
        ledger = conn.execute(text("SELECT unit, n_rows, n_episodes_new, n_episodes_duplicate FROM loads "
                                   "ORDER BY id")).all()
    assert [tuple(r) for r in ledger] == [("data/train-00000-of-00002.parquet", 3, 3, 0),
                                          ("data/train-00001-of-00002.parquet", 3, 0, 3)]
    again = ingest(engine, [str(tmp_path / "ds")])
    assert (again.units_loaded, again.units_skipped) == (0, 2)
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "ds")])
    assert (info.n_rows, info.notes) == (6, [])
    assert assert_same_shards(tmp_path / "ds", tmp_path / "out") == 6


# --- selection -----------------------------------------------------------------------------


def test_export_by_run_selects_only_that_run(engine, tmp_path):
    rows = [hub_row(f"a{i}__aaaaaaa", 0, [("user", f"a{i}")], run_id=UUID) for i in range(3)]
    rows += [hub_row(f"b{i}__bbbbbbb", 0, [("user", f"b{i}")], run_id=OTHER_UUID) for i in range(2)]
    rows.insert(1, hub_row("b9__bbbbbbb", 0, [("user", "b9")], run_id=OTHER_UUID))
    shard = write_shard(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", rows)
    ingest(engine, [str(tmp_path / "ds")])

    info = export_hub(engine, tmp_path / "out", Filters(runs=(OTHER_UUID,)))
    assert [p.name for p in info.files] == ["train-00000-of-00001.parquet"]
    table = pq.read_table(shard)
    expected = table.filter(pc.equal(table["run_id"], OTHER_UUID))
    assert pq.read_table(info.files[0]).equals(expected)

    # A run filter on a source keeps the source's shard names and schema.
    info = export_hub(engine, tmp_path / "out2", Filters(runs=(UUID,)), sources=["ds"])
    assert pq.read_table(info.files[0]).equals(table.filter(pc.equal(table["run_id"], UUID)))

    with pytest.raises(WarehouseError, match="no run 'nope'"):
        export_hub(engine, tmp_path / "out3", Filters(runs=("nope",)))
    with pytest.raises(WarehouseError, match="no source"):
        export_hub(engine, tmp_path / "out3", sources=["nope"])
    assert not (tmp_path / "out3").exists()


def test_overlapping_dataset_exports_exactly_its_own_rows(engine, tmp_path):
    generate_dataset(tmp_path / "full", "tiny", episodes="all", seed=5)
    full = pq.read_table(next((tmp_path / "full" / "data").glob("*.parquet")))
    success = full.filter(pc.equal(full["result"], "1.0"))
    assert 0 < success.num_rows < full.num_rows
    (tmp_path / "success" / "data").mkdir(parents=True)
    pq.write_table(success, tmp_path / "success" / "data" / "train-00000-of-00001.parquet")

    ingest(engine, [str(tmp_path / "full")])
    assert round_trip(engine, tmp_path / "success", tmp_path / "out-success") == success.num_rows
    export_hub(engine, tmp_path / "out-full", sources=[str(tmp_path / "full")])
    assert assert_same_shards(tmp_path / "full", tmp_path / "out-full") == full.num_rows

    # By run, each episode once although two datasets hold it.
    info = export_hub(engine, tmp_path / "out-all")
    assert info.n_rows == full.num_rows


def test_run_export_uses_the_union_of_the_schemas(engine, tmp_path):
    write_shard(tmp_path / "a" / "data" / "train-00000.parquet",
                [hub_row("a__aaaaaaa", 0, [("user", "a")], instruction="inst")])
    write_shard(tmp_path / "b" / "data" / "train-00000.parquet",
                [hub_row("b__bbbbbbb", 0, [("user", "b")], trace_source="main", token_ids=[[1, 2]])],
                [pa.field("token_ids", TOKEN_IDS)])
    ingest(engine, [str(tmp_path / "a"), str(tmp_path / "b")])
    info = export_hub(engine, tmp_path / "out", Filters(runs=(UUID,)))
    got = pq.read_table(info.files[0])
    assert got.schema.names[-3:] == ["instruction", "trace_source", "token_ids"]
    assert got.schema.field("token_ids").type == TOKEN_IDS
    assert got.to_pylist()[0]["token_ids"] is None and got.to_pylist()[1]["token_ids"] == [[1, 2]]
    assert got.column("instruction").to_pylist() == ["inst", None]

    # Two sources whose shards share a file name: renumbered rather than overwritten.
    info = export_hub(engine, tmp_path / "out2", sources=["a", "b"])
    assert [p.name for p in info.files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]


# --- trace-directory rows (no Hub schema) --------------------------------------------------


def _ingest_trace_trial(engine) -> None:
    """What the trace-directory ingester writes: a load without an Arrow schema and a trial
    with main and subagent episodes (written here through the writer directly)."""
    source_id = writer.ensure_source(engine, "traces", "/jobs/job-1", "job-1")
    turns = [Turn("user", "Solve it."), Turn("assistant", "lone \ud800 surrogate")]
    trial = Trial(
        run_key=UUID, trial_name="hello__abcdefg", task_name="harbor/hello", agent="terminus-2",
        model=None, model_provider=None, result="1.0", reward=1.0, date_raw="2026-05-27T13:46:14Z",
        verifier_output="1 passed\x00", instruction="Solve it.", source_run_id=None,
        episodes=[
            Episode(0, turns[:1] + turns[1:], "main", 0, {"agent": "terminus-2", "model": "openai/gpt-4o"}),
            Episode(1, turns + [Turn("user", "obs"), Turn("assistant", "done")], "main", 1,
                    {"agent": "terminus-2", "model": "openai/gpt-4o"}),
            Episode(0, [Turn("user", "summarize"), Turn("assistant", "summary")], "summarization-1-summary", 2,
                    {"agent": "terminus-2"}),
        ],
    )
    with writer.unit(engine, source_id, "hello__abcdefg", "hash-1") as unit:
        unit.add_trials([trial])


def test_trace_rows_export_with_harbor_columns(engine, tmp_path):
    _ingest_trace_trial(engine)
    info = export_hub(engine, tmp_path / "out", sources=["job-1"], columns=Columns(instruction=True, verifier_output=True))
    assert [p.name for p in info.files] == ["train-00000-of-00001.parquet"]
    assert any("surrogate" in note for note in info.notes)
    table = pq.read_table(info.files[0])
    assert table.schema.names == ["conversations", "agent", "model", "model_provider", "date", "task", "episode",
                                  "run_id", "trial_name", "result", "instruction", "verifier_output", "trace_source"]
    assert table.schema.field("conversations").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    rows = table.to_pylist()
    assert [(r["episode"], r["trace_source"]) for r in rows] == [
        ("episode-0", "main"), ("episode-1", "main"), ("episode-0", "summarization-1-summary")]
    first = rows[0]
    assert first["conversations"] == [{"role": "user", "content": "Solve it."},
                                      {"role": "assistant", "content": "lone \ufffd surrogate"}]
    assert (first["model"], first["model_provider"], first["run_id"]) == (
        "openai/gpt-4o", "unknown-provider", "hello__abcdefg")
    assert rows[2]["model"] == "unknown-model"
    assert (first["verifier_output"], first["instruction"], first["date"]) == (
        "1 passed\x00", "Solve it.", "2026-05-27T13:46:14Z")
    # The exported dataset is itself a valid Hub dataset.
    assert ingest(engine, [str(tmp_path / "out")]).errors == []


def test_trace_directory_export_reingests_as_the_same_episodes(engine, tmp_path):
    job = FIXTURES / "jobs" / "pinchbench-147-kimi2.6"
    first = ingest(engine, [str(job)])
    assert first.errors == [] and first.episodes_new > 0
    info = export_hub(engine, tmp_path / "out", sources=[str(job)], columns=Columns(instruction=True, verifier_output=True))
    assert info.n_rows == first.episodes_new
    assert {"instruction", "verifier_output"} <= set(pq.read_schema(info.files[0]).names)
    again = ingest(engine, [str(tmp_path / "out")])
    assert (again.episodes_new, again.episodes_duplicate, again.conflicts) == (0, first.episodes_new, 0)


def _golden_trial(root: Path, golden: str, name: str = "hello-world__AbCdEfG") -> list[dict]:
    """A trial directory root/job/<name> holding a golden trajectory and the result.json values
    its exported rows carry (the trial named `name`, its job UUID a fixed one); returns those
    rows."""
    rows = json.loads((FIXTURES / "golden" / f"{golden}.traces.json").read_text())
    for row in rows:
        row.update(trial_name=name, run_id=UUID)
    first = rows[0]
    trial = root / "job" / first["trial_name"]
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_bytes((FIXTURES / "golden" / f"{golden}.trajectory.json").read_bytes())
    config = {"trial_name": first["trial_name"], "job_id": first["run_id"], "agent": {"name": first["agent"]}}
    (trial / "result.json").write_text(json.dumps({
        "task_name": first["task"], "trial_name": first["trial_name"], "config": config,
        "agent_info": {"name": first["agent"], "model_info": {"name": first["model"], "provider": first["model_provider"]}},
        "verifier_result": {"rewards": {"reward": float(first["result"])}}, "started_at": first["date"]}))
    return rows


def test_trace_export_writes_harbors_tool_definitions_column(engine, tmp_path):
    rows = _golden_trial(tmp_path / "traces", "openhands/hello-world")
    assert ingest(engine, [str(tmp_path / "traces")]).errors == []
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "traces")])
    table = pq.read_table(info.files[0])
    # Every column of Harbor's rows, in Harbor's order, with Harbor's values and types.
    assert [n for n in table.schema.names if n in rows[0]] == list(rows[0])
    # The structs' fields in the trajectory's own key order, as `datasets` infers them (the
    # golden rows were saved with sorted keys).
    tools = json.loads((FIXTURES / "golden" / "openhands" / "hello-world.trajectory.json").read_text())["agent"]["tool_definitions"]
    pq.write_table(pa.table({"tool_definitions": [tools]}), tmp_path / "expected.parquet")
    assert table.schema.field("tool_definitions").type == pq.read_schema(tmp_path / "expected.parquet").field("tool_definitions").type
    got = table.to_pylist()
    assert [{k: r[k] for k in rows[0]} for r in got] == rows
    # A trajectory without tools adds no column.
    _golden_trial(tmp_path / "plain", "terminus_2/hello-world-invalid-json", "other__1234567")
    assert ingest(engine, [str(tmp_path / "plain")]).errors == []
    plain = export_hub(engine, tmp_path / "out2", sources=[str(tmp_path / "plain")])
    assert "tool_definitions" not in pq.read_schema(plain.files[0]).names


# --- export tables -------------------------------------------------------------------------


def test_export_tables_read_back_with_pyarrow(engine, tmp_path):
    generate_dataset(tmp_path / "ds", "tiny", episodes="all", shards=2, seed=2)
    write_shard(tmp_path / "odd" / "data" / "train-00000.parquet", _corner_rows(), CORNER_FIELDS)
    ingest(engine, [str(tmp_path / "ds"), str(tmp_path / "odd")])
    write_shard(tmp_path / "conflict" / "data" / "train-00000.parquet",
                [hub_row("nul__aaaaaaa", 0, [("user", "different")], result="0.0")])
    ingest(engine, [str(tmp_path / "conflict")])
    _ingest_trace_trial(engine)
    expected = counts(engine)
    assert expected["conflicts"] > 0

    info = export_tables(engine, tmp_path / "tables")
    assert info.rows == {table: expected[table] for table in TABLES}  # the tables, not the view `turns`
    for table in TABLES:
        dataset = ds.dataset(tmp_path / "tables" / table, partitioning="hive")
        assert dataset.count_rows() == expected[table], table

    trials = ds.dataset(tmp_path / "tables" / "trials", partitioning="hive").to_table()
    with engine.connect() as conn:
        by_run = dict(conn.execute(text("SELECT run_id, count(*) FROM trials GROUP BY run_id")).all())
    counted = pc.value_counts(trials["run_id"]).to_pylist()
    assert {c["values"]: c["counts"] for c in counted} == by_run
    assert trials.schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert trials.schema.field("reward").type == pa.float64()
    details = [json.loads(d) for d in trials["detail"].to_pylist() if d is not None]
    assert {"verifier_output": "1 passed\x00"} in [d.get("raw_text") for d in details]

    messages = ds.dataset(tmp_path / "tables" / "messages").to_table()
    assert messages.schema.field("content_raw").type == pa.binary()
    assert messages.schema.field("content_hash").type == pa.binary()
    assert b"nul\x00byte\x00" in messages["content_raw"].to_pylist()
    assert "lone \ud800 surrogate".encode("utf-8", "surrogatepass") in messages["content_raw"].to_pylist()
    turns = ds.dataset(tmp_path / "tables" / "conversation_turns", partitioning="hive")
    assert set(turns.schema.names) == {"conversation_id", "idx", "role", "message_id", "extra", "run_id"}


VIEWS = {"turns", "turn_text", "trial_summary"}  # the views the migrations make


def _duckdb_over(out: Path):
    """A DuckDB connection with OUT/views.sql run in it, from another folder (file_search_path)."""
    import duckdb

    duck = duckdb.connect()
    duck.execute(f"SET file_search_path = '{out}'")
    duck.execute((out / "views.sql").read_text(encoding="utf-8"))
    return duck


def _plain(column: str, value):
    """A value as both sides can give it: a datetime (SQLite's is text) in UTC, JSON (PostgreSQL
    gives jsonb as objects, the export JSON text) as its object."""
    if column == "extra" and isinstance(value, str):
        return json.loads(value)
    if column == "started_at" and value is not None:
        when = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    return value


def _rows(columns, rows) -> list[tuple]:
    return sorted((tuple(_plain(c, v) for c, v in zip(columns, row)) for row in rows), key=repr)


def _warehouse_rows(engine, sql: str) -> tuple[list[str], list[tuple]]:
    with engine.connect() as conn:
        result = conn.execute(text(sql))
        return list(result.keys()), _rows(list(result.keys()), result.all())


def _duckdb_rows(duck, sql: str) -> tuple[list[str], list[tuple]]:
    result = duck.execute(sql)
    columns = [d[0] for d in result.description]
    return columns, _rows(columns, result.fetchall())


def _with_tool_calls(engine) -> None:
    """A trial whose turns carry extra fields (a trace's tool calls), in two episodes, one a prefix."""
    import query_fixture

    query_fixture.build(engine)
    source_id = writer.ensure_source(engine, "traces", "/jobs/views", "views")
    call = {"tool_calls": [{"function_name": "bash", "arguments": {"cmd": "ls"}}], "step_id": 2}
    turns = [Turn("user", "List the files."), Turn("assistant", "Listing.", call), Turn("user", "a.txt"),
             Turn("assistant", "One file.", {"step_id": 4})]
    trial = Trial(run_key=UUID, trial_name="views__abcdefg", task_name=None, agent="terminus-2", model="m1",
                  model_provider=None, result="0.0", reward=0.0, n_input_tokens=7,
                  episodes=[Episode(0, turns[:2], "main", 0), Episode(1, turns, "main", 1)])
    with writer.unit(engine, source_id, "views", "hash-views") as unit:
        unit.add_trials([trial])


def test_export_tables_views_run_in_duckdb(engine, tmp_path):
    """views.sql, run in DuckDB, gives each of the warehouse's views the rows the warehouse
    gives it, and each table its rows; a view joins a table there as in the warehouse."""
    _with_tool_calls(engine)
    out = tmp_path / "tables"
    info = export_tables(engine, out)
    assert set(info.views) == VIEWS
    duck = _duckdb_over(out)
    for view in sorted(VIEWS):
        want = _warehouse_rows(engine, f"SELECT * FROM {view}")
        assert want[1], view  # the fixture gives every view rows
        assert _duckdb_rows(duck, f"SELECT * FROM {view}") == want, view
    extras = [row[-1] for row in _warehouse_rows(engine, "SELECT * FROM turns")[1] if row[-1]]
    assert {"step_id": 4} in extras  # turns' JSON reached DuckDB and compared
    for table in TABLES:
        with engine.connect() as conn:
            n = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
        assert duck.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == n, table
    # A view joined with a table, and a view over a view joined with the tables it reads.
    for sql in ("SELECT ts.run_key, ts.task, count(*) AS trials, sum(t.n_input_tokens) AS tokens, "
                "sum(ts.n_episodes) AS episodes FROM trial_summary ts JOIN trials t ON t.id = ts.trial_id "
                "GROUP BY ts.run_key, ts.task",
                "SELECT tt.role, tt.content, e.trace_source, t.trial_name FROM turn_text tt "
                "JOIN episodes e ON e.id = tt.episode_id JOIN trials t ON t.id = e.trial_id WHERE tt.idx = 1"):
        want = _warehouse_rows(engine, sql)
        assert want[1] and _duckdb_rows(duck, sql) == want, sql


def test_export_tables_views_of_an_empty_warehouse_run_in_duckdb(engine, tmp_path):
    """In OUT itself, as views.sql says to run it; every view there, empty, with its columns."""
    import duckdb

    out = tmp_path / "empty"
    export_tables(engine, out)
    duck = duckdb.connect()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(out)
        duck.execute((out / "views.sql").read_text(encoding="utf-8"))
        for view in VIEWS:
            result = duck.execute(f"SELECT * FROM {view}")
            assert result.fetchall() == [], view
            assert [d[0] for d in result.description] == _warehouse_rows(engine, f"SELECT * FROM {view}")[0]


# --- CLI and output folder -----------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return forked_cli.run(list(args))


def test_cli_export_hub_and_tables(engine, db_url, tmp_path):
    generate_dataset(tmp_path / "ds", "tiny", shards=2, seed=4)
    ingest(engine, [str(tmp_path / "ds")])

    out = tmp_path / "out"
    ok = _cli("--db", db_url, "export", "hub", str(out), "--source", str(tmp_path / "ds"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "" and "rows in 2 files" in ok.stderr
    assert_same_shards(tmp_path / "ds", out)
    assert (out / "README.md").read_text().startswith("---\nconfigs:")

    refused = _cli("--db", db_url, "export", "hub", str(out))
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: ") and "not empty" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr

    # --force replaces README.md and data/ (no stale shard survives) and keeps anything else.
    (out / "data" / "train-00009-of-00010.parquet").write_bytes(b"stale")
    (out / "notes.txt").write_text("mine")
    forced = _cli("--db", db_url, "export", "hub", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert [p.name for p in (out / "data").iterdir()] == ["train-00000-of-00001.parquet"]
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "notes.txt"]

    bad = _cli("--db", db_url, "export", "hub", str(tmp_path / "new"), "--run", "nope")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: no run 'nope'")

    tables = _cli("--db", db_url, "export", "tables", str(tmp_path / "tables"))
    assert tables.returncode == 0, tables.stderr
    assert ds.dataset(tmp_path / "tables" / "conversation_turns", partitioning="hive").count_rows() > 0
    again = _cli("--db", db_url, "export", "tables", str(tmp_path / "tables"))
    assert again.returncode == 1 and "not empty" in again.stderr


def test_cli_export_checks_the_schema_first(tmp_path):
    result = _cli("--db", str(tmp_path / "nothing.db"), "export", "hub", str(tmp_path / "out"))
    assert result.returncode == 1 and "no warehouse at" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "nothing.db").exists()


def test_out_that_is_a_file_is_refused(engine, tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(WarehouseError, match="not a directory"):
        export_tables(engine, tmp_path / "out")


def test_export_tables_of_an_empty_warehouse_has_every_tables_columns(engine, tmp_path):
    """No rows at all: every table still gets a file, and pyarrow reads each table with the
    schema an export of a loaded warehouse has, and no rows."""
    empty = export_tables(engine, tmp_path / "empty")
    assert set(empty.rows) == set(TABLES) and not any(empty.rows.values())
    generate_dataset(tmp_path / "ds", "tiny", seed=5)
    ingest(engine, [str(tmp_path / "ds")])
    export_tables(engine, tmp_path / "loaded")
    for table in TABLES:
        got = ds.dataset(tmp_path / "empty" / table, partitioning="hive")
        loaded = ds.dataset(tmp_path / "loaded" / table, partitioning="hive")
        assert got.count_rows() == 0, table
        assert got.schema.equals(loaded.schema), (table, got.schema, loaded.schema)


def test_cli_export_force_says_what_it_replaced(engine, db_url, tmp_path):
    generate_dataset(tmp_path / "ds", "tiny", seed=4)
    ingest(engine, [str(tmp_path / "ds")])

    out = tmp_path / "hub"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    first = _cli("--db", db_url, "export", "hub", str(out), "--force")
    assert first.returncode == 0 and "replaced" not in first.stderr, first.stderr  # nothing was there
    (out / "data" / "stale.parquet").write_bytes(b"stale")
    again = _cli("--db", db_url, "export", "hub", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert f"replaced in {out}: README.md, data/ (2 files)\n" in again.stderr
    assert (out / "notes.txt").read_text() == "mine"

    tables = tmp_path / "tables"
    assert _cli("--db", db_url, "export", "tables", str(tables)).returncode == 0
    forced = _cli("--db", db_url, "export", "tables", str(tables), "--force")
    assert forced.returncode == 0, forced.stderr
    [line] = [line for line in forced.stderr.splitlines() if line.startswith("replaced in ")]
    replaced = line.split(": ", 1)[1].split(", ")
    assert replaced[0] == "README.md"
    assert sorted(entry.split("/")[0] for entry in replaced[1:]) == sorted([*TABLES, "views.sql"])
