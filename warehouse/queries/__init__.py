"""Canned cross-run queries as data: see catalog (the queries) and registry (the machinery)."""

from warehouse.queries.catalog import QUERIES
from warehouse.queries.registry import CannedQuery, IntList, Param, run_canned

__all__ = ["QUERIES", "CannedQuery", "IntList", "Param", "run_canned"]
