"""The trajectory warehouse: agent trajectories from Harbor runs and Hub datasets, in SQL.

The Python API (warehouse.api): `warehouse.open(db)` gives a `Warehouse`, whose reads return a
`Result` (as do the canned queries of a lake, `warehouse.open_lake(OUT)`); errors are
`WarehouseError`s. They, and `__version__` (warehouse.version), are imported on first use, not
here: every CLI start imports this package."""

__all__ = ["IngestError", "Result", "Warehouse", "WarehouseError", "open", "open_lake"]

_API = {"open", "open_lake", "Warehouse", "Result", "IngestError"}


def __getattr__(name: str):
    if name in _API:
        from warehouse import api

        return getattr(api, name)
    if name == "__version__":
        from warehouse.version import __version__

        return __version__
    if name == "WarehouseError":
        from warehouse.errors import WarehouseError

        return WarehouseError
    raise AttributeError(f"module 'warehouse' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__, "__version__"])
