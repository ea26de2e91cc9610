"""Planner statistics, brought up to date by the command that changed the tables, not left to
autovacuum (which may be off, or a minute behind).

PostgreSQL plans every query from statistics gathered by ANALYZE. A table loaded since its last
ANALYZE is planned as what it held then (for a fresh table, nothing at all): measured on five
times the math profile, `query runs` took 606 ms and `query failures` 285 ms before an ANALYZE,
tens of milliseconds after. Index-only scans, which the summary tables' covering indexes are
built for, also need the visibility map that VACUUM sets; without it each index entry costs a
visit to its table row (`query lengths` 39 ms before, 17 ms after). So an ingest ends, and a
`db upgrade` ends, with refresh() on the tables that changed.

A table counts as changed when the rows added or modified since its last ANALYZE, as the server
reckons them, are more than _CHANGED_FLOOR + _CHANGED_SHARE of the rows it had then (the
thresholds of autovacuum's own default, so a small ingest into a large warehouse costs one
catalog query and no ANALYZE). The rows added are read two ways, since each can lag: the
server's count of modified rows (flushed by each session at most once a second) and the growth
of the table's file since the last ANALYZE measured it (exact, but blind to rows updated in
place). ANALYZE reads a sample of bounded size, whatever the table holds; VACUUM, of the small
summary tables only, reads just the pages not yet marked all-visible; the large base tables
are sampled more coarsely than the rest (see _COARSE_TABLES).

SQLite plans without statistics unless ANALYZE has stored some, and the canned queries are
written for that planner (CROSS JOIN pins the join order where it matters); measured with
ANALYZE's statistics they were no faster (pass-at-k slower), so nothing is done there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from warehouse.db import models

# Analysed when the rows changed since the last ANALYZE are more than this many plus this share
# of the rows it counted (autovacuum_analyze_threshold and _scale_factor's defaults).
_CHANGED_FLOOR = 50
_CHANGED_SHARE = 0.1

# Read through their covering indexes by the canned queries (index-only scans): vacuumed as
# well, which sets the visibility map those scans need. Small (one row per run and task, or per
# trial), and VACUUM reads only their pages written since it last ran.
_SUMMARY_TABLES = frozenset({"trial_lengths", "run_task_breakdown", "run_task_outcomes", "run_sources"})

# The tables of a row per trial or more, which no summary query reads: sampled with a statistics
# target of _COARSE_TARGET (3,000 rows) rather than the server's default (100: 30,000 rows, which
# is most of a table the size of the math profile's, read at random). Their plans (the
# definitions behind other thresholds, show, search, export) turn on their sizes and key
# columns, which the smaller sample gets right. Measured on the math profile: 0.54-0.65 s for the
# default sample of these, 0.10-0.13 s for this one (a loaded machine); every other table 0.04 s.
# A column given a target of its own (ALTER TABLE ... SET STATISTICS) keeps it.
_COARSE_TABLES = frozenset({"trials", "episodes", "conversations", "conversation_turns", "messages", "episode_loads", "trial_loads", "conflicts"})
_COARSE_TARGET = 10

_TABLE_STATE = text("""
SELECT c.relname, c.reltuples, c.relpages,
       pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages,
       coalesce(s.n_mod_since_analyze, 0) AS modified
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname = ANY(:tables)
""")


@dataclass
class Analysis:
    """What refresh() did: the tables it analysed (and vacuumed), and how long it took."""

    analysed: list[str] = field(default_factory=list)
    vacuumed: list[str] = field(default_factory=list)
    seconds: float = 0.0


def refresh(engine: Engine, *, every_table: bool = False) -> Analysis:
    """ANALYZE the warehouse's tables that changed enough since their last ANALYZE (with
    `every_table`, all that hold rows: for a migration, which may have rewritten any of them),
    and VACUUM the summary tables among them. PostgreSQL only; one round trip when none did.

    Autovacuum is often at work on a table an ingest has just grown, and ANALYZE waits for it
    (a second, deadlock_timeout, before the server cancels it), table after table. So the tables
    are first taken as they come free (SKIP_LOCKED), then those skipped, waiting: one wait at
    most, and none for a table autovacuum analysed meanwhile."""
    done = Analysis()
    if engine.dialect.name != "postgresql":
        return done
    started = time.perf_counter()
    names = sorted(models.metadata.tables)
    # Autocommit: VACUUM cannot run inside a transaction, and each table's statistics are
    # committed (and used) as soon as they are gathered.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        done.analysed = [row.relname for row in conn.execute(_TABLE_STATE, {"tables": names})
                         if _stale(row.reltuples, row.relpages, row.pages, row.modified, every_table)]
        done.vacuumed = [name for name in done.analysed if name in _SUMMARY_TABLES]
        if done.analysed:
            before = _analysed_at(conn, done.analysed)
            _gather(conn, done.analysed, skip_locked=True)
            after = _analysed_at(conn, done.analysed)
            _gather(conn, [name for name in done.analysed if after[name] == before[name]], skip_locked=False)
    done.seconds = time.perf_counter() - started
    return done


def _gather(conn, tables: list[str], *, skip_locked: bool) -> None:
    """VACUUM (ANALYZE) the summary tables among `tables`, ANALYZE the others (the coarse ones at
    _COARSE_TARGET); with `skip_locked`, leaving out any another session holds."""
    def listed(names: list[str]) -> str:
        return ", ".join(map(conn.dialect.identifier_preparer.quote, names))

    vacuumed = [name for name in tables if name in _SUMMARY_TABLES]
    coarse = [name for name in tables if name in _COARSE_TABLES]
    rest = [name for name in tables if name not in _SUMMARY_TABLES and name not in _COARSE_TABLES]
    analyze = "ANALYZE (SKIP_LOCKED)" if skip_locked else "ANALYZE"
    if vacuumed:
        conn.exec_driver_sql(f"VACUUM (ANALYZE{', SKIP_LOCKED' if skip_locked else ''}) {listed(vacuumed)}")
    if rest:
        conn.exec_driver_sql(f"{analyze} {listed(rest)}")
    if coarse:  # the target for this transaction only (ANALYZE, unlike VACUUM, may run in one)
        conn.exec_driver_sql(f"BEGIN; SET LOCAL default_statistics_target = {_COARSE_TARGET}; "
                             f"{analyze} {listed(coarse)}; COMMIT")


_ANALYSED_AT = text("""
SELECT relname, last_analyze, last_autoanalyze FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname = ANY(:tables)
""")


def _analysed_at(conn, tables: list[str]) -> dict[str, tuple]:
    """When each table was last analysed, by a command or by autovacuum."""
    return {row.relname: (row.last_analyze, row.last_autoanalyze)
            for row in conn.execute(_ANALYSED_AT, {"tables": tables})}


def _stale(reltuples: float, relpages: int, pages: int, modified: int, every_table: bool) -> bool:
    """Whether a table of `pages` pages now needs ANALYZE, its last one having counted
    `reltuples` rows in `relpages` pages (reltuples is -1 for a table never analysed)."""
    if pages == 0:
        return False  # empty: nothing to sample, and the planner knows an empty file
    if every_table or reltuples < 0 or relpages == 0:
        return True
    grown = (pages - relpages) * reltuples / relpages  # rows in the pages added since
    return max(grown, modified) > _CHANGED_FLOOR + _CHANGED_SHARE * reltuples
