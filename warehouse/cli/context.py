"""What every command gets from the global options: the database, as a warehouse.api.Warehouse
(opened for reading or for writing when first used). Only ingest, db upgrade|downgrade and index
build|drop take the writing engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from warehouse.api import Warehouse


@dataclass
class State:
    db: str | None = None
    db_typed: bool = False  # --db was given (not $WAREHOUSE_DB): what --lake may not be given with
    _warehouse: Warehouse | None = field(default=None, repr=False)

    @property
    def warehouse(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = Warehouse(self.db)
        return self._warehouse

    @property
    def url(self) -> URL:
        return self.warehouse.url

    @property
    def engine(self) -> Engine:
        """The writing engine, schema unchecked (what `db upgrade|downgrade` work on)."""
        return self.warehouse.engine

    def write_engine(self, *, create: bool = False) -> Engine:
        """The writing engine, after checking the schema is the one this tool knows."""
        return self.warehouse.write_engine(create=create)

    def read_engine(self, *, check_schema: bool = True) -> Engine:
        """The engine that cannot write (see make_read_engine), after checking the schema unless
        told not to."""
        return self.warehouse.read_engine(check_schema=check_schema)


def state(ctx: typer.Context) -> State:
    return ctx.find_root().obj
