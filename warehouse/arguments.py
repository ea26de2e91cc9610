"""The Python API's arguments, checked before anything is opened: a value of the wrong type or
out of range is a UsageError (warehouse.errors) in one line naming the argument, never a plain
TypeError or AttributeError from deep inside. (The CLI's options are typed by Typer.)"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from warehouse.errors import ArgumentTypeError, ArgumentValueError

# The largest value an integer column or parameter holds on both backends (64-bit signed).
MAX_INT = 2**63 - 1


def _kind(value: Any) -> str:
    return type(value).__name__


def text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str, not {_kind(value)}")
    return value


def optional_text(value: Any, name: str) -> str | None:
    return None if value is None else text(value, name)


def path(value: Any, name: str) -> str:
    """A str or an os.PathLike giving a str (a bytes path names no database or source)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str or a path, not {_kind(value)}")
    return value


def optional_path(value: Any, name: str) -> str | None:
    return None if value is None else path(value, name)


def paths(value: Any, name: str) -> list[str]:
    """One path or an iterable of them (not a bare bytes or mapping)."""
    if isinstance(value, (str, os.PathLike)):
        return [path(value, name)]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, Mapping)):
        raise ArgumentTypeError(f"{name} must be a path or a list of paths, not {_kind(value)}")
    return [path(item, f"each of {name}") for item in value]


def texts(value: Any, name: str) -> str | list[str] | None:
    """None, a str, or an iterable of str (the filters: one value or several)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, Iterable) or isinstance(value, (bytes, Mapping)):
        raise ArgumentTypeError(f"{name} must be a str or a list of str, not {_kind(value)}")
    return [text(item, f"each of {name}") for item in value]


def when(value: Any, name: str) -> Any:
    """None, or a time as the filters take it: a str (a date, a time, an age), a date or a datetime."""
    if value is not None and not isinstance(value, (str, date)):  # (a datetime is a date)
        raise ArgumentTypeError(f"{name} must be a str, a date or a datetime, not {_kind(value)}")
    return value


def labels(value: Any, name: str = "label") -> Any:
    """None, "key=value", a (key, value) pair, several of those, or a mapping of str to str."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key, item in value.items():
            text(key, f"each key of {name}")
            text(item, f"each value of {name}")
        return value
    items = [value] if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value) \
        else value
    if not isinstance(items, Iterable) or isinstance(items, bytes):
        raise ArgumentTypeError(f"{name} must be 'key=value', several, or a dict, not {_kind(value)}")
    for item in items:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ArgumentValueError(f"each {name} pair must be (key, value), not {len(item)} items")
            for part in item:
                text(part, f"each {name} key and value")
        else:
            text(item, f"each {name}")
    return value


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, not {_kind(value)}")
    return value


def integer(value: Any, name: str, minimum: int) -> int:
    """An int (not a bool, not a float) from `minimum` to MAX_INT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, not {_kind(value)}")
    if not minimum <= value <= MAX_INT:
        raise ArgumentValueError(f"{name} must be from {minimum} to {MAX_INT}, not {value}")
    return value


def optional_integer(value: Any, name: str, minimum: int) -> int | None:
    return None if value is None else integer(value, name, minimum)


def optional_seconds(value: Any, name: str, most: float = 3600) -> float | None:
    """None, or a number of seconds above 0 and at most `most`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, not {_kind(value)}")
    if not 0 < value <= most:
        raise ArgumentValueError(f"{name} must be above 0 and at most {most:g} seconds, not {value!r}")
    return float(value)


def trial(value: Any) -> str:
    """A trial as `show` takes it: its name, RUN/TRIAL, or its id (an int or digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(integer(value, "trial", 0))
    if not isinstance(value, str):
        raise ArgumentTypeError(f"trial must be a str or an int, not {_kind(value)}")
    return value


def mapping(value: Any, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(f"{name} must be a dict of parameter values, not {_kind(value)}")
    for key in value:
        text(key, f"each key of {name}")
    return value


def optional_callable(value: Any, name: str) -> Any:
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"{name} must be callable, not {_kind(value)}")
    return value


def implements(value: Any, kind: type, name: str) -> Any:
    """None, or an object with every method `kind` declares (a protocol: the CLI's progress line
    implements ingest.report.Progress without importing it, which would cost its start-up)."""
    methods = [m for m in vars(kind) if not m.startswith("_") and callable(getattr(kind, m))]
    if value is not None and not all(callable(getattr(value, m, None)) for m in methods):
        raise ArgumentTypeError(f"{name} must implement {kind.__module__}.{kind.__qualname__} "
                                f"({', '.join(methods)}), not {_kind(value)}")
    return value
