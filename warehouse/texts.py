"""Lossless storage of arbitrary Python strings in SQL text and JSON columns.

PostgreSQL `text` and `jsonb` reject NUL characters, and no UTF-8 column on either backend
can hold a lone surrogate (JSON escapes such as "\\ud800" produce them). The warehouse keeps
every such string exactly: text columns hold a display-safe copy and a companion bytes
column holds the exact UTF-8 (with surrogates passed through) only when the two differ; JSON
values wrap each unsafe string in a one-key object.
"""

from __future__ import annotations

import base64
import re
from typing import Any

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_WRAP_KEY = "$warehouse_text_b64"
REPLACEMENT = "\ufffd"


def is_safe(text: str) -> bool:
    if "\x00" in text:
        return False
    # Most text is ASCII, which cannot hold a surrogate; str.isascii() is a flag check. For
    # the rest, strict UTF-8 encoding fails exactly on lone surrogates, and is several times
    # faster than searching for them.
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def to_bytes(text: str) -> bytes:
    """The exact UTF-8 of any Python string, lone surrogates included."""
    return text.encode("utf-8", "surrogatepass")


def from_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def split_text(text: str | None) -> tuple[str | None, bytes | None]:
    """(display-safe text, exact bytes or None when the text is already safe)."""
    if text is None or is_safe(text):
        return text, None
    return _UNSAFE.sub(REPLACEMENT, text), to_bytes(text)


def join_text(text: str | None, raw: bytes | memoryview | None) -> str | None:
    """The exact text a (display-safe text, exact bytes) pair stands for (split_text's inverse)."""
    return from_bytes(bytes(raw)) if raw is not None else text


# Trial text columns (verifier output, exception message) hold display-safe copies; the exact
# value of any that had to change is kept in trials.detail under this key.
RAW_TEXT = "raw_text"


def safe_columns(values: dict[str, str | None]) -> tuple[dict[str, str | None], dict[str, str]]:
    """(display-safe values for text columns, {column: exact value} for those that changed)."""
    safe, exact = {}, {}
    for name, value in values.items():
        safe[name], raw = split_text(value)
        if raw is not None:
            exact[name] = value
    return safe, exact


def exact_column(detail: dict | None, name: str, stored: str | None) -> str | None:
    """A trial text column's exact value: its kept copy when the column holds a safe one."""
    return ((detail or {}).get(RAW_TEXT) or {}).get(name, stored)


# The walks below take one Python frame per level of nesting (map and zip call back from C, where
# a comprehension would add a frame of its own): trace files nest up to
# ingest.read.trace_files.MAX_JSON_DEPTH levels, which must stay well inside the recursion limit.

def json_to_db(value: Any) -> Any:
    if isinstance(value, str):
        return value if is_safe(value) else {_WRAP_KEY: base64.b64encode(to_bytes(value)).decode()}
    if isinstance(value, dict):
        return dict(zip(map(json_to_db_key, value), map(json_to_db, value.values())))
    if isinstance(value, (list, tuple)):
        return list(map(json_to_db, value))
    return value


def json_to_db_key(key: Any) -> Any:
    # Keys are short names in every format we read; an unsafe one is replaced, not wrapped.
    return _UNSAFE.sub(REPLACEMENT, key) if isinstance(key, str) else key


def json_from_db(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _WRAP_KEY in value:
            return from_bytes(base64.b64decode(value[_WRAP_KEY]))
        return dict(zip(value, map(json_from_db, value.values())))
    if isinstance(value, list):
        return list(map(json_from_db, value))
    return value
