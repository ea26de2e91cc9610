"""Portable column types: one Python meaning on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer, LargeBinary
from sqlalchemy.dialects.postgresql import BYTEA, JSONB
from sqlalchemy.types import TypeDecorator

from warehouse.texts import json_from_db, json_to_db

# SQLite only autoincrements a column declared exactly INTEGER PRIMARY KEY; PostgreSQL needs
# 64 bits for archives of 10^8 turns.
Id = Integer().with_variant(BigInteger(), "postgresql")

Blob = LargeBinary().with_variant(BYTEA(), "postgresql")


class UtcDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes. SQLite keeps no offset, so values are normalised to UTC
    on the way in and marked UTC on the way out; naive inputs are taken to be UTC already."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        elif value.tzinfo is not timezone.utc:  # readers hand over UTC already: skip the conversion
            value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class Json(TypeDecorator):
    """JSON on SQLite, JSONB on PostgreSQL, lossless for any Python string inside.

    JSONB cannot hold NUL characters and neither backend can hold lone surrogates, so such
    strings are wrapped on the way in and unwrapped on the way out (see warehouse.texts)."""

    impl = JSON().with_variant(JSONB(), "postgresql")
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> Any:
        return json_to_db(value)

    def process_result_value(self, value: Any, dialect) -> Any:
        return json_from_db(value)


# --- SQLite's declared types, as a reader sees them ------------------------------------------
# SQLite hands a raw query's values back by their storage class: a DATETIME column as the text
# SQLAlchemy wrote (`2026-06-04 13:19:21.912314`, UTC, no zone), a JSON column as its text, where
# PostgreSQL hands back a timestamptz and a jsonb's value. A reader's connection marks such
# values (warehouse.db.engine registers these as converters of the declared types) as text of
# their own class: SQLAlchemy's processors, canned queries and everything else still see text;
# `sql` turns them into what PostgreSQL gives (as_declared), so both backends print alike.

class StoredTime(str):
    """A value of a column declared DATETIME (UtcDateTime): UTC text with no zone."""

    def value(self) -> datetime | str:
        try:
            moment = datetime.fromisoformat(self)
        except ValueError:  # not a timestamp (SQLite stores what it is given): the text itself
            return str(self)
        return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


class StoredJson(str):
    """A value of a column declared JSON (Json): its text."""

    def value(self) -> Any:
        try:
            return json.loads(self, object_pairs_hook=_jsonb_object)
        except ValueError:
            return str(self)


def _jsonb_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as PostgreSQL's jsonb holds it: a repeated key's last value, shorter keys
    first, keys of one length in the order of their UTF-8 bytes."""
    return dict(sorted(dict(pairs).items(), key=_jsonb_key))


def _jsonb_key(item: tuple[str, Any]) -> tuple[int, bytes]:
    key = item[0].encode("utf-8", "surrogatepass")
    return len(key), key


def jsonb_order(value: Any) -> Any:
    """A JSON value read from the warehouse with its objects' keys in jsonb's order, as
    PostgreSQL gives them back: what a reader shows from SQLite (which keeps the order they came
    in) is then the same as from PostgreSQL."""
    if isinstance(value, dict):
        return {key: jsonb_order(item) for key, item in sorted(value.items(), key=_jsonb_key)}
    if isinstance(value, list):
        return list(map(jsonb_order, value))
    return value


def stored(raw: bytes, kind: type[str]) -> str:
    return kind(raw.decode("utf-8", "surrogateescape"))


def as_declared(row: tuple) -> tuple:
    """A raw SQLite row with its declared timestamps and JSON as PostgreSQL's driver gives them."""
    if not any(type(value) in _DECLARED for value in row):
        return row
    return tuple(value.value() if type(value) in _DECLARED else value for value in row)


_DECLARED = (StoredTime, StoredJson)
