"""Every Arrow type a Hub shard can hold comes back from `export hub --source` as it went in
(type for type, value for value, nulls and extremes included), on both backends; a type whose
values cannot be kept apart is refused at ingest in one line. The JSON form the values are kept
in is warehouse/arrow_json.py's."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from helpers import CONVERSATIONS, hub_row
from ingest.pipeline import ingest
from test_export import round_trip
from warehouse.arrow_json import from_json, to_json
from warehouse.export import export_hub

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
NS_PER_DAY = 86_400 * 10**9

# name: (type, values). Each column gets the values in its first rows and nulls after them;
# every list and struct column below holds the same values again.
TYPES: dict[str, tuple[pa.DataType, list]] = {
    "duration_s": (pa.duration("s"), [0, I64_MAX, I64_MIN, -1]),
    "duration_ms": (pa.duration("ms"), [1, -86_400_001]),
    "duration_us": (pa.duration("us"), [I64_MAX, I64_MIN]),
    "duration_ns": (pa.duration("ns"), [1, I64_MAX, I64_MIN, -1]),
    "time32_s": (pa.time32("s"), [0, 86_399]),  # Parquet keeps it as time32[ms]
    "time32_ms": (pa.time32("ms"), [1, 86_399_999]),
    "time64_us": (pa.time64("us"), [0, 1, 86_399_999_999]),
    "time64_ns": (pa.time64("ns"), [1, 86_399_999_999_999, 43_200 * 10**9 + 7]),
    # timestamp[s] is written as ms by Parquet, so its range is ms's: years ±292 million.
    "ts_s": (pa.timestamp("s"), [I64_MAX // 1000, I64_MIN // 1000 + 1, -62_135_596_801, 253_402_300_800]),
    "ts_ms": (pa.timestamp("ms"), [-1, 32_503_680_000_000]),  # 1969, and year 3000
    "ts_us": (pa.timestamp("us"), [I64_MAX, I64_MIN, -62_135_596_800_000_001]),  # year 0 (1 BC)
    "ts_ns": (pa.timestamp("ns"), [1, -1, I64_MAX, I64_MIN, 1_700_000_000_123_456_789]),
    "ts_ns_utc": (pa.timestamp("ns", "UTC"), [1_700_000_000_123_456_789, -NS_PER_DAY * 365 * 100 - 1]),
    "ts_us_utc": (pa.timestamp("us", "UTC"), [I64_MAX, -1]),
    "ts_ms_0530": (pa.timestamp("ms", "+05:30"), [1, -1, 253_402_300_800_000]),  # year 10000
    "ts_ns_new_york": (pa.timestamp("ns", "America/New_York"), [1_700_000_000_000_000_001, -NS_PER_DAY * 36500]),
    "ts_us_new_york": (pa.timestamp("us", "America/New_York"), [-2_717_640_000_000_000]),  # before 1883's zones
    "date32": (pa.date32(), [0, -1, -(2**31), 2**31 - 1, -719_528]),  # year 0 too
    "date64": (pa.date64(), [86_400_000, -86_400_000 * 800_000]),  # Parquet keeps it as date32
    "decimal38": (pa.decimal128(38, 10), [Decimal("9" * 28 + "." + "9" * 10), Decimal("-" + "9" * 28 + "." + "9" * 10),
                                          Decimal("0E-10"), Decimal("-1E-10")]),
    "decimal38_0": (pa.decimal128(38, 0), [Decimal("9" * 38), Decimal("-1")]),
    "decimal256": (pa.decimal256(76, 20), [Decimal("9" * 56 + "." + "9" * 20), Decimal("-1.5")]),
    "decimal32": (pa.decimal32(9, 2), [Decimal("1234567.89")]),
    "decimal64": (pa.decimal64(18, 4), [Decimal("-12345678901234.5678")]),
    "large_string": (pa.large_string(), ["x", "", "naïve 😀", "nul\x00inside"]),
    "string_view": (pa.string_view(), ["view", ""]),
    "binary": (pa.binary(), [b"a\x00b", b"", b"\xff\xfe\x00", bytes(range(256))]),
    "large_binary": (pa.large_binary(), [b"\x00", b"", b"\x00\x00\xff"]),
    "fixed_binary": (pa.binary(4), [b"\x00\x00\x00\x00", b"\xff\x00\xff\x00"]),
    "binary_view": (pa.binary_view(), [b"\x00v", b""]),
    "dictionary": (pa.dictionary(pa.int8(), pa.string()), ["b", "a", "b", "c"]),
    "dictionary_int32": (pa.dictionary(pa.int32(), pa.large_string()), ["x", "x"]),
    "map": (pa.map_(pa.string(), pa.int64()), [[("k", 1), ("k", 2), ("a", I64_MIN)], [], [("z", None)]]),
    "map_of_times": (pa.map_(pa.string(), pa.timestamp("ns")), [[("at", 1), ("at", -1)]]),
    "fixed_list": (pa.list_(pa.int32(), 2), [[1, None], [2**31 - 1, -(2**31)]]),
    "fixed_list_of_durations": (pa.list_(pa.duration("ns"), 2), [[I64_MAX, I64_MIN]]),
    "large_list": (pa.large_list(pa.time64("ns")), [[1, None], []]),
    "list_view": (pa.list_view(pa.int64()), [[1, 2], []]),
    "float16": (pa.float16(), [1.5, -0.0, 65504.0, 6e-08, float("inf")]),
    "float32": (pa.float32(), [-0.0, 3.4028234663852886e38, 1e-45, 0.1]),
    "float64": (pa.float64(), [-0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 0.1]),
    "uint64": (pa.uint64(), [2**64 - 1, 0]),
    "int64": (pa.int64(), [I64_MIN, I64_MAX]),
    "int8": (pa.int8(), [-128, 127]),
    "bool": (pa.bool_(), [True, False]),
    "null": (pa.null(), []),
    "uuid": (pa.uuid(), [b"\x00" * 16, bytes(range(16))]),
    "json": (pa.json_(), ['{"a": [1, 2]}', "null"]),
}
N_ROWS = 6  # the longest list of values, and a row of nulls in every column
NAN_TYPES = {"float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64()}


def _array(arrow_type: pa.DataType, values: list) -> pa.Array:
    values = values + [None] * (N_ROWS - len(values))
    if isinstance(arrow_type, pa.BaseExtensionType):  # pa.array builds no extension values
        return pa.ExtensionArray.from_storage(arrow_type, pa.array(values, arrow_type.storage_type))
    return pa.array(values, arrow_type)


def _list_of(array: pa.Array) -> pa.Array:
    """Each row's value in a list of two: [value, value]; the last row a null list."""
    n = len(array)
    offsets = pa.array([2 * i for i in range(n + 1)], pa.int32())
    doubled = pa.concat_arrays([array.slice(i // 2, 1) for i in range(2 * n)])  # take() has no view kernel
    return pa.ListArray.from_arrays(offsets, doubled, mask=pa.array([i == n - 1 for i in range(n)]))


def _base_columns(prefix: str) -> dict[str, pa.Array]:
    rows = [hub_row(f"{prefix}{i}__aaaaaaa", 0, [("user", f"q{i}"), ("assistant", f"a{i}")]) for i in range(N_ROWS)]
    base = pa.Table.from_pylist(rows)
    columns = {name: base[name].combine_chunks() for name in base.column_names if name != "conversations"}
    # Messages with fields beyond role and content (kept in turns.extra) of the odd types too.
    message = pa.struct([("content", pa.string()), ("role", pa.string()), ("at", pa.timestamp("ns", "UTC")),
                         ("took", pa.duration("ns")), ("cost", pa.decimal128(38, 18)), ("raw", pa.binary())])
    conversations = [[{"content": f"q{i}", "role": "user", "at": I64_MAX - i, "took": I64_MIN + i,
                       "cost": Decimal("-0.000000000000000001"), "raw": b"\x00" * i},
                      {"content": None, "role": "assistant", "at": None, "took": None, "cost": None, "raw": None}]
                     for i in range(N_ROWS)]
    columns["conversations"] = pa.array(conversations, pa.list_(message))
    return columns


def _every_type_table() -> pa.Table:
    columns = _base_columns("types")
    arrays = {name: _array(arrow_type, values) for name, (arrow_type, values) in TYPES.items()}
    for name, array in arrays.items():
        columns[name] = array
        columns[f"{name}_list"] = _list_of(array)
    columns["every_type_struct"] = pa.StructArray.from_arrays(
        list(arrays.values()), list(arrays), mask=pa.array([i == 2 for i in range(N_ROWS)]))
    # (pyarrow's Parquet writer cannot write views inside a list of structs: "Slicing not
    # implemented for StringView", so no shard holds them there.)
    unviewed = {name: a for name, a in arrays.items() if name not in ("string_view", "binary_view")}
    columns["list_of_structs"] = _list_of(pa.StructArray.from_arrays(list(unviewed.values()), list(unviewed)))
    return pa.table(columns, metadata={"note": "kept"})


def _not_a_number_table() -> pa.Table:
    """NaN, ±Infinity and -0.0 in each float width, alone, in lists and in a struct."""
    columns = _base_columns("nan")
    values = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0]
    arrays = {name: _array(arrow_type, values) for name, arrow_type in NAN_TYPES.items()}
    for name, array in arrays.items():
        columns[name] = array
        columns[f"{name}_list"] = _list_of(array)
    columns["floats"] = pa.StructArray.from_arrays(list(arrays.values()), list(arrays))
    return pa.table(columns)


def _write(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_every_arrow_type_round_trips_through_export_by_source(engine, tmp_path):
    types = _write(tmp_path / "ds" / "data" / "train-00000-of-00002.parquet", _every_type_table())
    floats = _write(tmp_path / "ds" / "data" / "train-00001-of-00002.parquet", _not_a_number_table())

    # Schema (metadata included) and values equal, compared by pyarrow after reading both
    # (round_trip: `pa.Table.equals` for every shard but the one with NaN, which equals nothing).
    with pytest.raises(AssertionError):  # NaN != NaN
        round_trip(engine, tmp_path / "ds", tmp_path / "out")
    out = tmp_path / "out" / "data"
    expected, got = pq.read_table(types), pq.read_table(out / types.name)
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert got.equals(expected)
    assert got.num_rows == N_ROWS
    # Bytes exactly, NUL bytes included; the sign of a zero (equals() takes -0.0 == 0.0).
    for name in ("binary", "large_binary", "fixed_binary", "binary_view"):
        assert got[name].to_pylist() == expected[name].to_pylist() == TYPES[name][1] + [None] * (N_ROWS - len(TYPES[name][1]))
    for name in ("float16", "float32", "float64"):
        assert repr(got[name].to_pylist()) == repr(expected[name].to_pylist())
    # The types Parquet itself changes come back as Parquet reads them back.
    assert (expected.schema.field("time32_s").type, expected.schema.field("date64").type) == (pa.time32("ms"), pa.date32())

    expected, got = pq.read_table(floats), pq.read_table(out / floats.name)
    assert got.schema.equals(expected.schema, check_metadata=True)
    for name in expected.column_names:  # NaN as its text; -0.0 is not 0.0
        assert repr(got[name].to_pylist()) == repr(expected[name].to_pylist()), name


def test_nanosecond_and_out_of_range_values_are_kept_as_exact_text(engine, tmp_path):
    """What the database holds: ISO text with every nanosecond and years past 9999 or before 1,
    durations as integers of their unit, -0.0 as a word; readable in SQL."""
    schema = pa.schema([pa.field("conversations", CONVERSATIONS), pa.field("trial_name", pa.string()),
                        pa.field("episode", pa.string()), pa.field("at", pa.timestamp("ns", "America/New_York")),
                        pa.field("far", pa.timestamp("us")), pa.field("took", pa.duration("ns")),
                        pa.field("clock", pa.time64("ns")), pa.field("zero", pa.float64()),
                        pa.field("day", pa.date32())])
    row = dict(conversations=[{"role": "user", "content": "q"}], trial_name="ns__aaaaaaa", episode="episode-0",
               at=1_700_000_000_123_456_789, far=I64_MAX, took=I64_MIN, clock=1, zero=-0.0, day=-719_529)
    _write(tmp_path / "ds" / "data" / "train-00000.parquet", pa.Table.from_pylist([row], schema=schema))
    assert ingest(engine, [str(tmp_path / "ds")]).errors == []
    with engine.connect() as conn:
        extra = conn.execute(text("SELECT extra FROM episodes")).scalar_one()
    assert (json.loads(extra) if isinstance(extra, str) else extra) == {
        "at": "2023-11-14T22:13:20.123456789+00:00", "far": "+294247-01-10T04:00:54.775807", "took": I64_MIN,
        "clock": "00:00:00.000000001", "zero": "-0.0", "day": "-0001-12-31"}


def test_values_kept_by_earlier_versions_still_export():
    """Loads made before the exact form kept Python's text of the values (isoformat() in the
    column's zone, str() of a timedelta, nan): those come back as the values they named."""
    cases = [
        (pa.timestamp("us", "America/New_York"), "2026-01-02T03:04:05.678901-05:00", 1_767_341_045_678_901),
        (pa.timestamp("ns"), "1970-01-01T00:00:00.000000001", 1),
        (pa.timestamp("ms", "UTC"), "1883-11-18T12:03:58-04:56:02", -2_717_650_800_000),
        (pa.date32(), "2026-02-03", 20_487),
        (pa.time64("us"), "13:05:07", 47_107_000_000),
        (pa.duration("us"), "-1 day, 23:59:59.999999", -1),
        (pa.duration("us"), "1 day, 0:00:00", 86_400_000_000),
        (pa.duration("ns"), "0 days 00:00:00.000000001", 1),
        (pa.float64(), "nan", None),
    ]
    for arrow_type, stored, count in cases:
        got = from_json([stored, None], arrow_type, "c")
        assert got.type == arrow_type
        if count is None:
            assert repr(got.to_pylist()) == "[nan, None]"
        else:
            assert got.view(pa.int64() if arrow_type.bit_width == 64 else pa.int32()).to_pylist() == [count, None]
    # What no type can take is refused naming the column, not a traceback.
    with pytest.raises(Exception, match="column 'c': stored values do not fit its type timestamp"):
        from_json(["not a time"], pa.timestamp("ns"), "c")


def test_the_json_form_is_exact_for_every_type_without_a_database():
    """to_json then from_json gives back the same array, for each type alone, in a list and in a
    struct (the ingest and the export without the database between them)."""
    for name, (arrow_type, values) in TYPES.items():
        array = _array(arrow_type, values)
        for case in (array, _list_of(array), pa.StructArray.from_arrays([array], [name])):
            stored = json.loads(json.dumps(to_json(case), allow_nan=False))  # what a JSON column holds
            back = from_json(stored, case.type, name)
            assert back.type == case.type and back.equals(case), name


def test_a_struct_with_two_fields_of_one_name_is_refused_in_one_line(engine, tmp_path):
    """A JSON object holds each key once: such a column cannot be kept, so its shard is refused
    before anything of it is written; the other shard loads."""
    dup = pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], ["a", "a"])
    bad = pa.table({"conversations": pa.array([[{"content": "q", "role": "user"}]], CONVERSATIONS),
                    "trial_name": ["dup__aaaaaaa"], "episode": ["episode-0"], "twice": dup})
    path = _write(tmp_path / "ds" / "data" / "train-00000-of-00002.parquet", bad)
    _write(tmp_path / "ds" / "data" / "train-00001-of-00002.parquet", pa.Table.from_pylist(
        [hub_row("ok__bbbbbbb", 0, [("user", "q")])]))
    summary = ingest(engine, [str(tmp_path / "ds")], keep_going=True)
    assert summary.errors == [f"{path}: column 'twice' has two struct fields named 'a', which cannot be kept apart"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT trial_name FROM trials")).scalars().all() == ["ok__bbbbbbb"]
    info = export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "ds")])
    assert [p.name for p in info.files] == ["train-00001-of-00002.parquet"]


def test_a_nanosecond_date_keeps_its_text_and_starts_at_its_microsecond(engine, tmp_path):
    """The Hub `date` column (a string) is a modelled column: `started_at` holds what both backends'
    timestamps can (microseconds), `date_raw` and the export the text as written."""
    date = "2026-05-27T13:46:14.647436789Z"
    shard = _write(tmp_path / "ds" / "data" / "train-00000.parquet",
                   pa.Table.from_pylist([hub_row("ns__aaaaaaa", 0, [("user", "q")], date=date)]))
    assert round_trip(engine, tmp_path / "ds", tmp_path / "out") == 1
    with engine.connect() as conn:
        started_at, date_raw = conn.execute(text("SELECT started_at, date_raw FROM trials")).one()
    assert date_raw == date
    assert str(started_at).startswith("2026-05-27 13:46:14.647436")
    assert pq.read_table(tmp_path / "out" / "data" / shard.name)["date"].to_pylist() == [date]


def test_a_dictionary_column_keeps_its_values_and_rebuilds_its_dictionary(engine, tmp_path):
    """The values of a dictionary-encoded column come back under its type; the dictionary itself
    (here with an entry no row uses, in no row's order) is rebuilt from the values."""
    labels = pa.DictionaryArray.from_arrays(pa.array([1, 0, None, 1], pa.int8()), pa.array(["b", "a", "unused"]))
    rows = pa.Table.from_pylist([hub_row(f"dict{i}__aaaaaaa", 0, [("user", "q")]) for i in range(4)])
    shard = _write(tmp_path / "ds" / "data" / "train-00000.parquet", rows.append_column("label", labels))
    assert ingest(engine, [str(tmp_path / "ds")]).errors == []
    export_hub(engine, tmp_path / "out", sources=[str(tmp_path / "ds")])
    expected, got = pq.read_table(shard), pq.read_table(tmp_path / "out" / "data" / shard.name)
    assert got.schema.equals(expected.schema, check_metadata=True)
    assert got["label"].to_pylist() == expected["label"].to_pylist() == ["a", "b", None, "a"]
    assert got["label"].chunk(0).dictionary.to_pylist() == ["a", "b"]
