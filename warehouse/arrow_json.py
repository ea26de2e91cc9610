"""Arrow values as JSON and back, exactly: how a Hub shard's columns that the warehouse does not
model are kept (`episodes.extra`, and the extra fields of a message struct in `turns.extra`).

The shard's Arrow schema is kept in the ledger (`loads.arrow_schema`), so a stored value needs
no type tag: `to_json` writes each value in the JSON form below and `from_json` reads it back
given the column's type.

- Timestamps: ISO 8601 text, in UTC with `+00:00` when the type has a time zone, with 6
  fractional digits (9 for a `ns` unit) when the fraction is not zero. Years outside 0-9999
  (which `s`, `ms` and `us` timestamps can reach) are written with a sign: `+10000-01-01T…`.
- Dates: `YYYY-MM-DD` (the same years). Times of day: `HH:MM:SS[.ffffff]` (9 digits for `ns`).
- Durations: an integer, the count of the type's unit.
- Floats: numbers; NaN, Infinity, -Infinity and -0.0 as those words (JSON has no NaN and
  PostgreSQL's jsonb drops the sign of zero).
- Decimals: their text. Binary: `{"$bytes_b64": "..."}`. Maps: `[[key, value], ...]` in order,
  repeated keys kept. Dictionary-encoded columns: their values (the dictionary is rebuilt from
  them). Extension types (uuid, json, …): their storage values.

Values are read from Arrow as plain integers (a view of the same buffers), never through Python's
datetime or pandas, which would cut nanoseconds and overflow past year 9999 or 2262. Loads made
before this form kept other texts (Python's `isoformat()` in the column's zone, `str()` of a
timedelta); `from_json` reads those too.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from warehouse.errors import WarehouseError, first_line

PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
DAY_MS = 86_400_000
BYTES_KEY = "$bytes_b64"
# The words a float that JSON cannot hold is kept as (Python's json writes the first three).
FLOAT_WORDS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "-0.0": "-0.0"}

Convert = Callable[[Any], Any]


def unsupported(type: pa.DataType) -> str | None:
    """Why values of `type` cannot be kept exactly, or None: a struct with two fields of one
    name (a JSON object, like Python's dict, holds each key once)."""
    if pa.types.is_struct(type):
        names = [f.name for f in type]
        repeated = next((n for n in names if names.count(n) > 1), None)
        if repeated is not None:
            return f"has two struct fields named '{repeated}', which cannot be kept apart"
    return next((why for why in map(unsupported, _children(type)) if why), None)


# --- Arrow to JSON (ingest) ----------------------------------------------------------------


def to_json(array: pa.Array) -> list[Any]:
    """The values of `array` in their JSON form (see the module's docstring)."""
    values = _as_type(array, _plain_type(array.type)).to_pylist()
    encode = _encoder(array.type)
    return values if encode is None else [encode(v) for v in values]


@functools.lru_cache(maxsize=None)
def _encoder(type: pa.DataType) -> Convert | None:
    """The function turning one plain value (`_plain_type`'s to_pylist) of `type` into JSON;
    None when plain values are JSON already (strings, integers, booleans, lists of them)."""
    if pa.types.is_timestamp(type):
        unit, zoned = type.unit, type.tz is not None
        return _nullable(lambda v: _timestamp_text(v, unit, zoned))
    if pa.types.is_date32(type):
        return _nullable(_date_text)
    if pa.types.is_date64(type):
        return _nullable(_date64_text)
    if pa.types.is_time(type):
        unit = type.unit
        return _nullable(lambda v: _time_text(v, unit))
    if pa.types.is_floating(type):
        return _float_json
    if pa.types.is_decimal(type):
        return _nullable(str)
    if _is_binary(type):
        return _nullable(lambda v: {BYTES_KEY: base64.b64encode(v).decode()})
    if pa.types.is_map(type):
        key, item = _encoder(type.key_type) or _same, _encoder(type.item_type) or _same
        return _nullable(lambda v: [[key(k), item(i)] for k, i in v])
    return _nested(type, _encoder)


def _float_json(value: float | None) -> float | str | None:
    if value is None or (math.isfinite(value) and (value or math.copysign(1, value) > 0)):
        return value
    return FLOAT_WORDS[repr(value)]


def _date64_text(value: int) -> str | int:
    days, rest = divmod(value, DAY_MS)
    return value if rest else _date_text(days)  # Parquet keeps whole days only


def _timestamp_text(value: int, unit: str, zoned: bool) -> str:
    seconds, part = divmod(value, PER_SECOND[unit])
    days, second = divmod(seconds, 86400)
    return f"{_date_text(days)}T{_clock(second, part, unit)}{'+00:00' if zoned else ''}"


def _time_text(value: int, unit: str) -> str | int:
    second, part = divmod(value, PER_SECOND[unit])
    # Arrow does not check that a time is within a day: one that is not stays its integer.
    return _clock(second, part, unit) if 0 <= second < 86400 else value


def _clock(second: int, part: int, unit: str) -> str:
    """HH:MM:SS, and the fraction (of a second in `unit`s) when there is one."""
    minutes, s = divmod(second, 60)
    text = f"{minutes // 60:02d}:{minutes % 60:02d}:{s:02d}"
    if part:
        digits = 9 if unit == "ns" else 6
        text += f".{part * 10**digits // PER_SECOND[unit]:0{digits}d}"
    return text


def _date_text(days: int) -> str:
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d}" if 0 <= year <= 9999 else f"{year:+05d}-{month:02d}-{day:02d}"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian calendar, `days` after 1970-01-01, for any
    integer (Howard Hinnant's civil_from_days)."""
    z = days + 719468
    era, doe = divmod(z, 146097)
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


def _days(year: int, month: int, day: int) -> int:
    """The inverse of `_civil` (days_from_civil)."""
    year -= month <= 2
    era, yoe = divmod(year, 400)
    doy = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


# --- JSON to Arrow (export) ----------------------------------------------------------------


def from_json(values: list[Any], type: pa.DataType, name: str) -> pa.Array:
    """A column of JSON values (as `to_json` wrote them, or Python values of the type) as an
    Arrow array of `type`; values that do not fit it are a WarehouseError naming the column."""
    plain = _plain_type(type)
    decode = _decoder(type)
    if decode is not None:
        values = [decode(v) for v in values]
    try:
        return _as_type(pa.array(values, type=plain), type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
            OverflowError) as exc:
        raise WarehouseError(f"column '{name}': stored values do not fit its type {type} "
                             f"({first_line(exc)})") from None


@functools.lru_cache(maxsize=None)
def _decoder(type: pa.DataType) -> Convert | None:
    """The function turning one stored JSON value of `type` into what `pa.array` takes for
    `_plain_type(type)`; None when the JSON value is that already. A value in no known form is
    passed on for Arrow to refuse, naming the column."""
    if pa.types.is_timestamp(type):
        unit = type.unit
        return _texts(lambda v: _parse_instant(v, unit))
    if pa.types.is_date(type):
        per_day = 1 if pa.types.is_date32(type) else DAY_MS
        return _texts(lambda v: _parse_date(v, per_day))
    if pa.types.is_time(type):
        unit = type.unit
        return _texts(lambda v: _parse_time(v, unit))
    if pa.types.is_duration(type):
        unit = type.unit
        return _texts(lambda v: _parse_timedelta(v, unit))
    if pa.types.is_floating(type):
        return _float_value
    if pa.types.is_decimal(type):
        return _texts(Decimal)
    if _is_binary(type):
        return lambda v: base64.b64decode(v[BYTES_KEY]) if isinstance(v, dict) else v
    if pa.types.is_map(type):
        key, item = _decoder(type.key_type) or _same, _decoder(type.item_type) or _same
        return _nullable(lambda v: [(key(k), item(i)) for k, i in v])
    return _nested(type, _decoder)


def _float_value(value: Any) -> Any:
    """A float from its JSON: a number (PostgreSQL's jsonb gives 1e308 back as an integer) or
    a word (nan, inf and -inf too, as loads before 2026-11-30 kept them)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


_INSTANT = re.compile(r"([+-]?\d{4,})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?"
                      r"(Z|[+-]\d\d:\d\d(?::\d\d)?)?\Z")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?\Z")
# str() of a timedelta ("-1 day, 23:59:59.999999") or of a pandas Timedelta ("0 days 00:00:01"),
# as loads before this module kept durations.
_TIMEDELTA = re.compile(r"(?:(-?\d+) days?,? \+?)?(\d+):(\d\d):(\d\d)(?:\.(\d{1,9}))?\Z")


def _parse_instant(text: str, unit: str) -> int | str:
    match = _INSTANT.match(text)
    if match is None:
        return text
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    days = _day_number(int(year), int(month), int(day))
    if days is None:
        return text
    seconds = days * 86400 + _seconds(hour or 0, minute or 0, second or 0) - _offset_seconds(offset)
    return _in_unit(seconds, fraction, unit, text)


def _parse_date(text: str, per_day: int) -> int | str:
    match = _INSTANT.match(text)
    if match is None or match.group(4) is not None:
        return text
    days = _day_number(*map(int, match.groups()[:3]))
    return text if days is None else days * per_day


def _parse_time(text: str, unit: str) -> int | str:
    match = _TIME.match(text)
    if match is None:
        return text
    hour, minute, second, fraction = match.groups()
    return _in_unit(_seconds(hour, minute, second), fraction, unit, text)


def _parse_timedelta(text: str, unit: str) -> int | str:
    match = _TIMEDELTA.match(text)
    if match is None:
        return text
    days, hour, minute, second, fraction = match.groups()
    return _in_unit(int(days or 0) * 86400 + _seconds(hour, minute, second), fraction, unit, text)


def _day_number(year: int, month: int, day: int) -> int | None:
    """Days since 1970-01-01 of a calendar date; None for one that does not exist."""
    days = _days(year, month, day)
    return days if _civil(days) == (year, month, day) else None


def _seconds(hour, minute, second) -> int:
    return int(hour) * 3600 + int(minute) * 60 + int(second)


def _offset_seconds(offset: str | None) -> int:
    if offset in (None, "Z"):
        return 0
    sign = -1 if offset[0] == "-" else 1
    return sign * sum(int(part) * scale for part, scale in zip(offset[1:].split(":"), (3600, 60, 1)))


def _in_unit(seconds: int, fraction: str | None, unit: str, text: str) -> int | str:
    """seconds + .fraction as a count of `unit`s; the text itself when the unit cannot hold it."""
    nanos = seconds * 10**9 + int((fraction or "0").ljust(9, "0"))
    count, rest = divmod(nanos, 10**9 // PER_SECOND[unit])
    return text if rest else count


# --- shared --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _plain_type(type: pa.DataType) -> pa.DataType:
    """`type` with the same buffers but nothing Python would convert lossily: each temporal
    type an integer of its width, each extension type its storage type, at any depth."""
    if isinstance(type, pa.BaseExtensionType):
        return _plain_type(type.storage_type)
    if _is_temporal(type):
        return pa.int32() if type.bit_width == 32 else pa.int64()
    if pa.types.is_struct(type):
        return pa.struct([_plain_field(f) for f in type])
    if pa.types.is_map(type):
        return pa.map_(_plain_field(type.key_field), _plain_field(type.item_field), type.keys_sorted)
    if pa.types.is_dictionary(type):
        return pa.dictionary(type.index_type, _plain_type(type.value_type), type.ordered)
    kind = _list_kind(type)
    if kind is not None:
        size = (type.list_size,) if pa.types.is_fixed_size_list(type) else ()
        return kind[0](_plain_field(type.value_field), *size)
    return type


def _as_type(array: pa.Array, type: pa.DataType) -> pa.Array:
    """`array` as `type`, a type of the same layout (`_plain_type`'s), on the same buffers. Rebuilt
    level by level with only the leaves viewed: `Array.view` of a whole nested array gives a
    null-typed child its parent's length (pyarrow 26), which breaks a list of structs."""
    if array.type == type:
        return array
    if isinstance(array.type, pa.BaseExtensionType):
        return _as_type(array.storage, type)
    if isinstance(type, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(type, _as_type(array, type.storage_type))
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(type):
        children = [_as_type(array.field(i), f.type) for i, f in enumerate(type)]
        return pa.StructArray.from_arrays(children, fields=list(type), mask=mask)
    if pa.types.is_dictionary(type):
        return pa.DictionaryArray.from_arrays(array.indices, _as_type(array.dictionary, type.value_type),
                                              ordered=type.ordered)
    if pa.types.is_map(type):
        return pa.MapArray.from_arrays(_unsliced(array.offsets), _as_type(array.keys, type.key_type),
                                       _as_type(array.items, type.item_type), type=type, mask=mask)
    kind = _list_kind(type)
    if kind is None:
        return array.view(type)  # a leaf: temporal <-> integer
    if pa.types.is_fixed_size_list(type):
        size = type.list_size  # .values starts at the array's first list, not at its offset
        values = array.values.slice(array.offset * size, len(array) * size)
        return pa.FixedSizeListArray.from_arrays(_as_type(values, type.value_type), type=type, mask=mask)
    values = _as_type(array.values, type.value_type)
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        return kind[1].from_arrays(_unsliced(array.offsets), _unsliced(array.sizes), values, type=type, mask=mask)
    return kind[1].from_arrays(_unsliced(array.offsets), values, type=type, mask=mask)


def _unsliced(offsets: pa.Array) -> pa.Array:
    """The offsets of a slice, copied (from_arrays takes no sliced offsets beside a mask)."""
    return pa.concat_arrays([offsets]) if offsets.offset else offsets


def _plain_field(field: pa.Field) -> pa.Field:
    return field.with_type(_plain_type(field.type))


# Each kind of list: how to tell it, how to make its type, its array class.
_LISTS = ((pa.types.is_list, pa.list_, pa.ListArray), (pa.types.is_large_list, pa.large_list, pa.LargeListArray),
          (pa.types.is_fixed_size_list, pa.list_, pa.FixedSizeListArray),
          (pa.types.is_list_view, pa.list_view, pa.ListViewArray),
          (pa.types.is_large_list_view, pa.large_list_view, pa.LargeListViewArray))


def _list_kind(type: pa.DataType) -> tuple[Callable, Any] | None:
    return next(((make, cls) for is_list, make, cls in _LISTS if is_list(type)), None)


def _children(type: pa.DataType) -> list[pa.DataType]:
    if isinstance(type, pa.BaseExtensionType):
        return [type.storage_type]
    if pa.types.is_struct(type):
        return [f.type for f in type]
    if pa.types.is_map(type):
        return [type.key_type, type.item_type]
    if pa.types.is_dictionary(type):
        return [type.value_type]
    if _list_kind(type) is not None:
        return [type.value_type]
    return []


def _nested(type: pa.DataType, convert: Callable[[pa.DataType], Convert | None]) -> Convert | None:
    """The conversion (`_encoder` or `_decoder`) of a struct, list, dictionary or extension type,
    from its children's; None when no child needs one."""
    if isinstance(type, pa.BaseExtensionType) or pa.types.is_dictionary(type):
        return convert(_children(type)[0])
    if pa.types.is_struct(type):
        fields = [(f.name, convert(f.type) or _same) for f in type]
        if all(c is _same for _, c in fields):
            return None
        return lambda v: {name: c(v.get(name)) for name, c in fields} if isinstance(v, dict) else v
    children = _children(type)
    if children:
        item = convert(children[0])
        return None if item is None else _nullable(lambda v: [item(x) for x in v])
    return None


def _same(value: Any) -> Any:
    return value


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def _texts(parse: Convert) -> Convert:
    """Parse a stored text; numbers (a raw count of the unit) and null pass as they are."""
    return lambda v: parse(v) if isinstance(v, str) else v


def _is_temporal(type: pa.DataType) -> bool:
    """Timestamps, dates, times and durations: integers underneath (Parquet holds no intervals)."""
    return (pa.types.is_timestamp(type) or pa.types.is_date(type) or pa.types.is_time(type)
            or pa.types.is_duration(type))


def _is_binary(type: pa.DataType) -> bool:
    return (pa.types.is_binary(type) or pa.types.is_large_binary(type) or pa.types.is_fixed_size_binary(type)
            or pa.types.is_binary_view(type))


# -- the shard's schema, as the ledger keeps it (loads.arrow_schema) -------------------------


def schema_to_json(schema: pa.Schema) -> str:
    """A shard's Arrow schema as the ledger keeps it: base64 of its IPC form, in JSON."""
    return json.dumps({"arrow_ipc_b64": base64.b64encode(schema.serialize().to_pybytes()).decode()})


def schema_from_json(text: str) -> pa.Schema:
    """The schema schema_to_json kept."""
    data = base64.b64decode(json.loads(text)["arrow_ipc_b64"])
    return pa.ipc.read_schema(pa.py_buffer(data))
