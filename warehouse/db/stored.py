"""SQLite's declared types, as a reader sees them, and JSON objects in one key order.

Kept apart from warehouse.db.types (which imports PostgreSQL's types): every SQLite reader's
connection registers these (warehouse.db.engine), and a read on SQLite imports nothing of
PostgreSQL's."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

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
            return jsonb_order(json.loads(self))
        except ValueError:
            return str(self)


@lru_cache(maxsize=4096)  # a trajectory's objects repeat a few keys thousands of times
def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw), raw


def jsonb_order(value: Any) -> Any:
    """A JSON value read from the warehouse with its objects' keys in jsonb's order (shorter
    keys first, keys of one length in the order of their UTF-8 bytes), as PostgreSQL gives them
    back: what a reader shows from SQLite (which keeps the order they came in) is then the same
    as from PostgreSQL."""
    if type(value) is dict:
        return {key: jsonb_order(value[key]) for key in sorted(value, key=_jsonb_key)}
    if type(value) is list:
        return [jsonb_order(item) for item in value]
    return value


def stored(raw: bytes, kind: type[str]) -> str:
    return kind(raw.decode("utf-8", "surrogateescape"))


def as_declared(row: tuple) -> tuple:
    """A raw SQLite row with its declared timestamps and JSON as PostgreSQL's driver gives them."""
    if not any(type(value) in _DECLARED for value in row):
        return row
    return tuple(value.value() if type(value) in _DECLARED else value for value in row)


_DECLARED = (StoredTime, StoredJson)
