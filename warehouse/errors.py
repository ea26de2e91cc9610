"""Errors a user can act on. The CLI prints them as one line and exits 1; nothing else does."""


class WarehouseError(Exception):
    """A runtime or data error with a message fit to show as is."""


class SchemaError(WarehouseError):
    """The database's schema is not the one this version of the tool was built for."""
