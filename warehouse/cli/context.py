"""What every command gets from the global options: the database, opened for reading or for
writing. Only ingest, db upgrade|downgrade and index build|drop take the writing engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from warehouse.db import schema
from warehouse.db.engine import make_engine, make_read_engine, resolve_url


@dataclass
class State:
    db: str | None = None
    _engine: Engine | None = field(default=None, repr=False)
    _read_engine: Engine | None = field(default=None, repr=False)

    @property
    def url(self) -> URL:
        return resolve_url(self.db)

    @property
    def engine(self) -> Engine:
        """The writing engine, schema unchecked (what `db upgrade|downgrade` work on)."""
        if self._engine is None:
            self._engine = make_engine(self.url)
        return self._engine

    def write_engine(self, *, create: bool = False) -> Engine:
        """The writing engine, after checking the schema is the one this tool knows."""
        schema.ensure_current(self.engine, create=create)
        return self.engine

    def read_engine(self, *, check_schema: bool = True) -> Engine:
        """The engine that cannot write (see make_read_engine), after checking the schema unless
        told not to."""
        if self._read_engine is None:
            self._read_engine = make_read_engine(self.url)
        if check_schema:
            schema.ensure_current(self._read_engine)
        return self._read_engine


def state(ctx: typer.Context) -> State:
    return ctx.find_root().obj
