"""Substring search over turn texts and verifier output, and its optional trigram index.

Matching is a case-insensitive substring test that folds the ASCII letters A-Z only (what
SQLite's LIKE does): `Error` finds `ERROR` and `error`, but `É` finds only `É`. The exact
test is the same on both backends and with or without the index; an index only narrows the
candidate rows before it, so a search gives the same hits either way.

Without an index the search scans the distinct message texts (content addressing keeps the
`messages` table far smaller than `turns`) and joins the matching ones to the turns that use
them; verifier output (one text per trial) is always scanned.

`warehouse index build` adds the index:
- SQLite: an FTS5 table with the trigram tokenizer over messages(id, content), with external
  content (it stores no second copy of the text). It is not kept in sync by triggers: those
  would make every ingest several times slower. Instead it covers the messages up to the
  highest id it holds (ids grow in arrival order), a search uses it for those and scans
  the messages that arrived since, so the hits stay exact; `warehouse index build` run again
  indexes just the newer messages. Needles shorter than 3 characters (a trigram) scan.
- PostgreSQL: the pg_trgm extension and a GIN trigram index on messages.content, which
  PostgreSQL keeps current on every insert (ingest gets slower, as with any index) and its
  planner uses for the ILIKE below when that pays.
The index's objects are created at run time, not by migrations, and their names start with
`search_`.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from warehouse.db.engine import resolve_url
from warehouse.db.session import write_transaction
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.filters import Filters, has_wildcard
from warehouse.readonly import DEFAULT_TIMEOUT, ReadResult, readonly_session, run_readonly
from warehouse.runs import resolve_run
from warehouse.texts import split_text

FTS_TABLE = "search_fts_messages"
# FTS5's own table of the rows it has indexed (one per message id): its largest id is how far
# the index reaches.
FTS_DOCSIZE = f"{FTS_TABLE}_docsize"
PG_INDEX = "search_trgm_messages"
MIN_INDEXED_LENGTH = 3
VERIFIER = "verifier"  # the role under which verifier output is reported and filtered
COLUMNS = ["run_key", "trial_name", "trace_source", "episode", "turn", "role", "snippet"]
CONTEXT_CHARS = 60  # snippet characters on each side of the hit

_UPPER, _LOWER = string.ascii_uppercase, string.ascii_lowercase
_ASCII_FOLD = str.maketrans(_UPPER, _LOWER)

# The exact test and the hit's position, per backend; {col} is the text column. Both fold
# ASCII letters only, so the backends agree.
_CONTAINS = {
    # SQLite's LIKE folds exactly A-Z.
    "sqlite": "{col} LIKE :pattern ESCAPE '\\'",
    # ILIKE is what a trigram index can serve, but it may fold more than ASCII (by locale);
    # strpos over translate() is the exact test.
    "postgresql": f"({{col}} ILIKE :pattern ESCAPE '\\' "
                  f"AND strpos(translate({{col}}, '{_UPPER}', '{_LOWER}'), :needle) > 0)",
}
_POSITION = {
    "sqlite": "instr(lower({col}), :needle)",  # SQLite's lower() folds ASCII only
    "postgresql": f"strpos(translate({{col}}, '{_UPPER}', '{_LOWER}'), :needle)",
}


@dataclass
class SearchResult(ReadResult):
    # An index was there to use: on SQLite the FTS table was queried; on PostgreSQL the GIN
    # index exists and the planner uses it when that pays.
    via_index: bool = False
    note: str | None = None  # e.g. how many messages the index did not cover yet


def search(url: URL | str, text: str, *, run: str | None = None, task: str | None = None,
           role: str | None = None, limit: int = 50, timeout: float = DEFAULT_TIMEOUT) -> SearchResult:
    """Turns whose text contains `text`, and trials whose verifier output does: one row per
    distinct turn (a turn repeated by later episodes of the same trial, as exports of every
    episode do, is reported once, at the shortest episode holding it), with a snippet."""
    if isinstance(url, str):
        url = resolve_url(url)
    if not text:
        raise WarehouseError("the search text is empty")
    if limit < 1:
        raise WarehouseError("--limit must be at least 1")
    backend = url.get_backend_name()
    needle = split_text(text)[0]  # stored texts hold U+FFFD where the input had NUL
    folded = needle.translate(_ASCII_FOLD)
    index = index_status(url, timeout=timeout)
    use_fts = backend == "sqlite" and index.present and len(needle) >= MIN_INDEXED_LENGTH
    note = None
    if use_fts and index.unindexed:
        plural = "s" if index.unindexed != 1 else ""
        note = (f"{index.unindexed} message{plural} arrived after the last `warehouse index build` "
                "and were searched without the index; run it again to index them")

    if run is not None or task is not None:
        with readonly_session(url, timeout=timeout) as session:
            if run is not None:  # a key, a unique prefix, a name; an unknown one is an error, not no hits
                run = resolve_run(session.connection, run).run_key
            # A task no task is named (--task is a name here, not a glob): said beside the hits.
            missing = None if task is None or has_wildcard(task) else Filters.of(task=task).unmatched(
                session.connection)
            note = "; ".join(filter(None, (note, missing))) or None
    params = {"pattern": "%" + re.sub(r"([\\%_])", r"\\\1", needle) + "%", "needle": folded,
              "run": run, "task": task, "role": role,
              "limit": limit + 1,  # one more than shown, to know whether there are more
              "phrase": '"' + needle.replace('"', '""') + '"', "indexed_through": index.indexed_through}
    hits = run_readonly(url, _hits_sql(backend, use_fts, run, task, role), params,
                        timeout=timeout, max_rows=limit)
    snippets = _snippets(url, backend, hits.rows, folded, len(needle), timeout)
    rows = [(*row[:6], snippets.get((row[6], row[7]))) for row in hits.rows]
    return SearchResult(COLUMNS, rows, hits.truncated,
                        via_index=use_fts or (backend == "postgresql" and index.present), note=note)


def _hits_sql(backend: str, use_fts: bool, run: str | None, task: str | None, role: str | None) -> str:
    filters = "".join([" AND r.run_key = :run" if run is not None else "",
                       " AND tk.name = :task" if task is not None else ""])
    contains = _CONTAINS[backend]
    # Each hit says where to cut its snippet from: kind 0 is a turn (ref: its message id),
    # kind 1 a trial's verifier output (ref: the trial id).
    branches = []
    if role != VERIFIER:
        exact = contains.format(col="m.content")
        messages = f"SELECT m.id FROM messages m WHERE {exact}"
        if use_fts:
            # The index narrows the messages it covers to candidates (it folds case more widely
            # than the exact test, which then decides); the messages it does not cover yet are
            # scanned. Together: the hits of a full scan.
            messages = (f"SELECT m.id FROM messages m WHERE m.id IN (SELECT rowid FROM {FTS_TABLE} "
                        f"WHERE {FTS_TABLE} MATCH :phrase) AND {exact} "
                        f"UNION ALL SELECT m.id FROM messages m WHERE m.id > :indexed_through AND {exact}")
        role_filter = " AND t.role = :role" if role is not None else ""
        # A hit turn is a turn of a conversation; it is reported at the shortest episode that
        # holds it (the first of a trajectory's to reach it), found by the index on episodes'
        # (conversation_id, n_turns) in one step, not by reading every episode of the
        # conversation. The same turn in several conversations of a trial is reported once.
        branches.append(f"""
            SELECT r.run_key AS run_key, tr.trial_name AS trial_name, e.trace_source AS trace_source,
                   min(e.episode_index) AS episode, h.idx AS turn, h.role AS role,
                   0 AS kind, h.message_id AS ref
            FROM (SELECT t.idx, t.role, t.message_id,
                         (SELECT s.id FROM episodes s
                          WHERE s.conversation_id = t.conversation_id AND s.n_turns > t.idx
                          ORDER BY s.n_turns, s.episode_index LIMIT 1) AS episode_id
                  FROM conversation_turns t
                  WHERE t.message_id IN ({messages}){role_filter}) h
            JOIN episodes e ON e.id = h.episode_id
            JOIN trials tr ON tr.id = e.trial_id
            JOIN runs r ON r.id = tr.run_id
            LEFT JOIN tasks tk ON tk.id = tr.task_id
            WHERE 1 = 1{filters}
            GROUP BY r.run_key, tr.trial_name, e.trace_source, h.idx, h.role, h.message_id""")
    if role is None or role == VERIFIER:
        branches.append(f"""
            SELECT r.run_key AS run_key, tr.trial_name AS trial_name, NULL AS trace_source,
                   NULL AS episode, NULL AS turn, '{VERIFIER}' AS role, 1 AS kind, tr.id AS ref
            FROM trials tr
            JOIN runs r ON r.id = tr.run_id
            LEFT JOIN tasks tk ON tk.id = tr.task_id
            WHERE {contains.format(col="tr.verifier_output")}{filters}""")
    return ("\nUNION ALL\n".join(branches)
            + "\nORDER BY run_key, trial_name, kind, trace_source, episode, turn\nLIMIT :limit")


def _snippets(url: URL, backend: str, rows: list[tuple], folded: str, length: int,
              timeout: float) -> dict[tuple[int, int], str]:
    """The text around the first hit, for each (kind, ref) in rows, cut out by the database
    so a 50 MB message never travels whole."""
    out: dict[tuple[int, int], str] = {}
    for kind, table, column in ((0, "messages", "content"), (1, "trials", "verifier_output")):
        ids = sorted({int(row[7]) for row in rows if row[6] == kind})
        if not ids:
            continue
        sql = f"""
            SELECT id, pos, substr(body, start, :width) AS excerpt, start
            FROM (SELECT id, {column} AS body, pos,
                         CASE WHEN pos > :before THEN pos - :before ELSE 1 END AS start
                  FROM (SELECT id, {column}, {_POSITION[backend].format(col=column)} AS pos
                        FROM {table} WHERE id IN ({", ".join(map(str, ids))})) located) windowed"""
        # One character more than the snippet shows, to know whether the text goes on.
        found = run_readonly(url, sql, {"needle": folded, "before": CONTEXT_CHARS,
                                        "width": 2 * CONTEXT_CHARS + length + 1},
                             timeout=timeout, max_rows=None)
        for ref, pos, excerpt, start in found.rows:
            out[(kind, ref)] = _snippet(excerpt or "", pos - start, start > 1, length)
    return out


def _snippet(excerpt: str, offset: int, cut_before: bool, length: int) -> str:
    """The hit (at `offset` in `excerpt`) with up to CONTEXT_CHARS on each side, on one line."""
    end = offset + length + CONTEXT_CHARS
    text = ("…" if cut_before else "") + excerpt[:end] + ("…" if len(excerpt) > end else "")
    return printable(re.sub(r"\s+", " ", text)).strip()


def snippet_within(snippet: str, width: int, needle: str) -> str:
    """A snippet in at most `width` characters, cut around its hit so that the hit stays in
    view (a table narrower than the snippet): as much context on each side as fits, "…" where
    cut. The hit is found as the search matched it (ASCII letters in either case), in the
    snippet's own form (whitespace runs as one space, control characters made visible); where
    it is not found, the snippet keeps its beginning."""
    if len(snippet) <= width:
        return snippet
    if width < 2:
        return "…"[:width]
    shown_needle = printable(re.sub(r"\s+", " ", needle)).translate(_ASCII_FOLD)
    start = snippet.translate(_ASCII_FOLD).find(shown_needle) if shown_needle else -1
    if start < 0:
        return snippet[:width - 1] + "…"
    end = start + len(shown_needle)
    if end - start >= width - 2:  # the hit alone is wider: its beginning
        return "…" + snippet[start:start + width - 2] + "…" if start else snippet[:width - 1] + "…"
    begin = max(0, start - (width - 2 - (end - start)) // 2)
    if begin == 0:
        return snippet[:width - 1] + "…"
    if begin + width - 1 >= len(snippet):
        return "…" + snippet[len(snippet) - (width - 1):]
    return "…" + snippet[begin:begin + width - 2] + "…"


# --- the index ---------------------------------------------------------------------------

@dataclass
class IndexStatus:
    present: bool
    indexed_through: int = 0  # SQLite: the largest message id the index holds
    unindexed: int = 0  # SQLite: messages that arrived after it (searches scan them)


def index_status(url: URL | str, *, timeout: float = DEFAULT_TIMEOUT) -> IndexStatus:
    if isinstance(url, str):
        url = resolve_url(url)
    if url.get_backend_name() == "postgresql":
        found = run_readonly(url, "SELECT count(*) FROM pg_indexes WHERE indexname = :name",
                             {"name": PG_INDEX}, timeout=timeout, max_rows=1)
        return IndexStatus(present=bool(found.rows[0][0]))
    found = run_readonly(url, "SELECT count(*) FROM sqlite_master WHERE name = :name",
                         {"name": FTS_TABLE}, timeout=timeout, max_rows=1)
    if not found.rows[0][0]:
        return IndexStatus(present=False)
    reach = run_readonly(url, f"""
        SELECT through, (SELECT count(*) FROM messages WHERE id > through)
        FROM (SELECT coalesce(max(id), 0) AS through FROM {FTS_DOCSIZE}) coverage""",
                         timeout=timeout, max_rows=1)
    through, unindexed = reach.rows[0]
    return IndexStatus(present=True, indexed_through=through, unindexed=unindexed)


def build_index(engine: Engine) -> None:
    """Create the index, or extend it to the messages that arrived since; harmless to repeat."""
    with write_transaction(engine) as conn:
        if engine.dialect.name == "sqlite":
            try:
                conn.exec_driver_sql(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
                    "content, content='messages', content_rowid='id', tokenize='trigram')")
            except OperationalError as exc:
                raise WarehouseError(f"this SQLite cannot build the index (FTS5 with the trigram "
                                     f"tokenizer, SQLite 3.34+): {exc.orig}") from None
            # With external content, inserting a message's id and text indexes it.
            conn.exec_driver_sql(
                f"INSERT INTO {FTS_TABLE}(rowid, content) SELECT id, content FROM messages "
                f"WHERE id > (SELECT coalesce(max(id), 0) FROM {FTS_DOCSIZE}) ORDER BY id")
        else:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON messages "
                                 "USING gin (content gin_trgm_ops)")


def drop_index(engine: Engine) -> None:
    """Remove the index (PostgreSQL keeps the pg_trgm extension: other things may use it)."""
    with write_transaction(engine) as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        else:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_INDEX}")
