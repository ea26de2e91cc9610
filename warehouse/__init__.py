"""The trajectory warehouse: agent trajectories from Harbor runs and Hub datasets, in SQL.

The Python API (warehouse.api): `warehouse.open(db)` gives a `Warehouse`, whose reads return a
`Result`; errors are `WarehouseError`s. They are imported on first use, not here: every CLI
start imports this package."""

__version__ = "0.1.0"
__all__ = ["IngestError", "Result", "Warehouse", "WarehouseError", "open"]

_API = {"open", "Warehouse", "Result", "IngestError"}


def __getattr__(name: str):
    if name in _API:
        from warehouse import api

        return getattr(api, name)
    if name == "WarehouseError":
        from warehouse.errors import WarehouseError

        return WarehouseError
    raise AttributeError(f"module 'warehouse' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
