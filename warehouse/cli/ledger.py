"""`warehouse sources` and `warehouse loads`: the load ledger, as the canned queries of the same
names (their options, filters and formats), at the top level where a user looks for them."""

from __future__ import annotations

from warehouse.cli.app import app
from warehouse.cli.query import register
from warehouse.queries import QUERIES

register(QUERIES["sources"], app, examples=("warehouse sources", "warehouse sources --format json",
                                             "warehouse sources --run 9f8c2915"))
register(QUERIES["loads"], app, examples=("warehouse loads", "warehouse loads sample",
                                          "warehouse loads sample --format csv"))
