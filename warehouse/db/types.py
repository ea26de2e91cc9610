"""Portable column types: one Python meaning on SQLite and PostgreSQL."""

from __future__ import annotations

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
