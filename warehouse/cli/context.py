"""What every command gets from the global options: the database to open."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url


@dataclass
class State:
    db: str | None = None
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def url(self) -> URL:
        return resolve_url(self.db)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.url)
        return self._engine

    def ready_engine(self, *, create: bool = False) -> Engine:
        """The engine, after checking the schema is the one this tool knows."""
        schema.ensure_current(self.engine, create=create)
        return self.engine


def state(ctx: typer.Context) -> State:
    return ctx.find_root().obj
