"""Substring search over turn texts, verifier output and exception messages, and its optional
trigram index.

Matching is a case-insensitive substring test that folds the ASCII letters A-Z only (what
SQLite's LIKE does): `Error` finds `ERROR` and `error`, but `É` finds only `É`. The exact
test is the same on both backends and with or without the index; an index only narrows the
candidate rows before it, so a search gives the same hits either way.

Hits come in the order of run key and trial name, and a search reads only what its page needs
(see CANDIDATES below). Without an index, a rare needle means reading every distinct message
text once (content addressing keeps the `messages` table far smaller than `turns`).

`warehouse index build` adds the index:
- SQLite: an FTS5 table with the trigram tokenizer over messages(id, content), with external
  content (it stores no second copy of the text). It is not kept in sync by triggers: those
  would make every ingest several times slower. Instead it covers the messages up to the
  highest id it holds (ids grow in arrival order), a search uses it for those and scans
  the messages that arrived since, so the hits stay exact; `warehouse index build` run again
  indexes just the newer messages. Needles shorter than 3 characters (a trigram) scan.
- PostgreSQL: the pg_trgm extension and a GIN trigram index on messages.content with its
  punctuation joined into words (see _JOINED), which PostgreSQL keeps current on every insert
  (ingest gets slower, as with any index) and its planner uses for the ILIKE below when that
  pays; and one on each of trials' verifier output and exception message.
The index's objects are created at run time, not by migrations, and their names start with
`search_`.
"""

from __future__ import annotations

import math
import re
import string
import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from warehouse.db.engine import resolve_url
from warehouse.db.session import write_transaction
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.readonly import DEFAULT_TIMEOUT, ReadResult, ReadSession, readonly_session
from warehouse.texts import split_text

FTS_TABLE = "search_fts_messages"
# FTS5's own table of the rows it has indexed (one per message id): its largest id is how far
# the index reaches.
FTS_DOCSIZE = f"{FTS_TABLE}_docsize"
# PostgreSQL's indexes, over the texts with their punctuation joined into words (_JOINED); and
# the names of those of earlier versions, over the texts as they are, which `index build` replaces.
PG_INDEX = "search_trgm_message_words"
PG_VERIFIER_INDEX = "search_trgm_verifier_words"
PG_EXCEPTION_INDEX = "search_trgm_exception_words"
PG_OLD_INDEXES = ("search_trgm_messages", "search_trgm_verifier_output")
MIN_INDEXED_LENGTH = 3
VERIFIER = "verifier"  # the role under which verifier output is reported and filtered
EXCEPTION = "exception"  # and a trial's exception message
# A trial's own texts, searched besides its turns: (the role they are reported and filtered
# under, their column). Their hits follow the trial's turns, in this order.
TRIAL_TEXTS = ((VERIFIER, "verifier_output"), (EXCEPTION, "exception_message"))
COLUMNS = ["run_key", "trial_name", "trace_source", "episode", "turn", "role", "snippet"]
# --by trial: a row per trial, its hits counted, with where its first hit is and its snippet.
TRIAL_COLUMNS = ["run_key", "trial_name", "hits", "trace_source", "episode", "turn", "role", "snippet"]
CONTEXT_CHARS = 60  # snippet characters on each side of the hit

_ASCII_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

# The exact test and the hit's position, per backend; {col} is the text column. Both fold
# ASCII letters only, so the backends agree.
_CONTAINS = {
    # SQLite's LIKE folds exactly A-Z.
    "sqlite": "{col} LIKE :pattern ESCAPE '\\'",
    # lower() under the "C" collation folds A-Z alone (translate() takes a hundred times as long
    # on long texts, ILIKE several times: it folds by locale, then the exact test must follow).
    "postgresql": "strpos(lower({col} COLLATE \"C\"), :needle) > 0",
}
# What PostgreSQL's trigram index serves: ILIKE, which folds at least A-Z (by locale, maybe more),
# so that the rows it keeps include every hit; put before the exact test where the index is.
# pg_trgm takes the trigrams of words (letters and digits) alone: over the texts as they are, a
# needle that joins two common words with punctuation (`installed_version`) has only the
# trigrams of each word, and PostgreSQL rechecked every text holding both (0.8 s on five times
# the math data). So the index is over the texts with the punctuation that joins words in code,
# paths and logs (_JOINERS) made a letter (_JOINED: `installedqversion`), and the needle is asked
# for made the same way: its trigrams across the punctuation (`dqv`, `qve`) are rare. A text
# holding the needle holds it joined too, so the index still keeps every hit; the exact test
# decides. A chain of replace() (each a fast pass) rather than one translate() of all 32 ASCII
# punctuation characters, which took 20 times as long: the index's recheck of each candidate
# text, and its build, pay for it.
_JOINERS = "_.-/:"
_JOINED = "{col}"
for _joiner in _JOINERS:
    _JOINED = f"replace({_JOINED}, '{_joiner}', 'q')"
_TRIGRAM = _JOINED + " ILIKE :joined"
_POSITION = {
    "sqlite": "instr(lower({col}), :needle)",  # SQLite's lower() folds ASCII only
    "postgresql": "strpos(lower({col} COLLATE \"C\"), :needle)",
}

# --regex: the same three, for a regular expression. PostgreSQL's own (`~*`, its POSIX ARE
# dialect), under the "C" collation, where case is folded, and \w and the classes are read, for
# ASCII alone; SQLite's a function of Python's `re` dialect (the `regex` module, which has a time
# limit) with the same flags, IGNORECASE and ASCII, registered on the session's connection.
# Neither index serves them: a regular-expression search reads every text it tests.
_REGEX_CONTAINS = {
    "sqlite": "warehouse_regexp(:regex, {col})",
    "postgresql": "{col} COLLATE \"C\" ~* :regex",
}
_REGEX_AT = {  # the first hit's first character (end 0) or the one after it (end 1), from 1; 0: none
    "sqlite": "warehouse_regexp_at(:regex, {col}, {end})",
    "postgresql": "regexp_instr({col} COLLATE \"C\", :regex, 1, 1, {end}, 'i')",
}


@dataclass(frozen=True)
class _Match:
    """How a search's text is matched, in SQL: a substring test or a regular expression's."""
    contains: str  # the exact test of {col}
    trigram: str | None  # PostgreSQL: the test its trigram index serves (keeping every hit), before it
    start: str  # the first hit's position in {col} (from 1)
    stop: str  # the position after it
    params: dict

    @staticmethod
    def of(backend: str, needle: str, regex: bool) -> "_Match":
        if not regex:
            folded = needle.translate(_ASCII_FOLD)
            return _Match(_CONTAINS[backend], _TRIGRAM, _POSITION[backend],
                          f"{_POSITION[backend]} + {len(needle)}",
                          {"pattern": "%" + _like_escaped(needle) + "%", "needle": folded,
                           "joined": "%" + _like_escaped(needle.translate(_JOIN)) + "%",
                           "phrase": '"' + needle.replace('"', '""') + '"'})
        # (no trigram test: the indexes hold joined texts, which a regular expression cannot ask)
        return _Match(_REGEX_CONTAINS[backend], None, _REGEX_AT[backend].replace("{end}", "0"),
                      _REGEX_AT[backend].replace("{end}", "1"), {"regex": needle})


_JOIN = str.maketrans(_JOINERS, "q" * len(_JOINERS))  # _JOINED, in Python


def _like_escaped(text: str) -> str:
    return re.sub(r"([\\%_])", r"\\\1", text)


def python_regex(pattern: str):
    """`pattern` compiled as SQLite's --regex runs it (IGNORECASE, ASCII), or WarehouseError."""
    import regex  # only a regular-expression search needs it

    try:
        return regex.compile(pattern, regex.IGNORECASE | regex.ASCII | regex.VERSION0)
    except regex.error as exc:
        raise WarehouseError(f"invalid regular expression {pattern!r}: {exc}") from None


def _register_regex(session: ReadSession, compiled) -> None:
    """SQLite's warehouse_regexp and warehouse_regexp_at on the session's connection, for the
    `compiled` pattern (python_regex's), each match held to the session's deadline: a pattern
    that backtracks without end (`(a+)+$`) is stopped there, as a query is."""
    raw = session.connection.connection.driver_connection

    def found(text: str | None):
        if text is None:
            return None
        left = session.deadline - time.monotonic()
        try:
            return compiled.search(text, timeout=max(left, 0.001))
        except TimeoutError:
            session.interrupt()  # the statement ends as one past its time limit
            return None

    def contains(_: str, text: str | None) -> int:
        return int(found(text) is not None)

    def at(_: str, text: str | None, end: int) -> int:
        hit = found(text)
        return 0 if hit is None else (hit.end() if end else hit.start()) + 1

    raw.create_function("warehouse_regexp", 2, contains, deterministic=True)
    raw.create_function("warehouse_regexp_at", 3, at, deterministic=True)


@dataclass
class SearchResult(ReadResult):
    # An index was there to use: on SQLite the FTS table was queried; on PostgreSQL the GIN
    # index exists and the planner uses it when that pays.
    via_index: bool = False
    note: str | None = None  # e.g. how many messages the index did not cover yet


# How the hits are found (the answer is the same either way; only its cost differs). The
# trials are walked in the answer's order (run key, trial name), each batch's turns tested
# against their texts, until the limit is met: a common needle costs what the page shows, not
# what the warehouse holds. When the hits so far say that the rest of the page would take more
# than LAST_BATCH trials, the needle is rare, and the texts holding it are listed (through the
# index where there is one), up to CANDIDATES of each kind. When both lists are complete and
# the turns using those messages are at most CANDIDATE_USES, every hit is found from them at
# once, then ordered: the cost follows the hits. Otherwise the walk goes on, testing turns
# against the lists that are complete. A needle that is rare but whose texts are too many to
# list costs the most; the time limit bounds it.
CANDIDATES = 250
CANDIDATE_USES = 20_000
FIRST_BATCH, LAST_BATCH = 32, 8_192


def search(url: URL | str, text: str, *, filters: Filters | None = None,
           role: str | None = None, limit: int = 50, by: str = "turn", regex: bool = False,
           timeout: float = DEFAULT_TIMEOUT) -> SearchResult:
    """Turns whose text contains `text`, and trials whose verifier output or exception message
    does: one row per distinct turn (a turn repeated by later episodes of the same trial, as
    exports of every episode do, is reported once, at the shortest episode holding it), with a
    snippet; in the order of run key, trial name, then by trace source, episode and turn, the
    trial's verifier output and exception message after its turns. `by="trial"`: one row per
    trial instead, its hits counted, with its first hit's place and snippet; `limit` counts
    trials. `regex`: `text` is a regular expression (see _REGEX_CONTAINS), matched as the
    substring is, ASCII letters in either case."""
    if isinstance(url, str):
        url = resolve_url(url)
    if not text:
        raise WarehouseError("the search text is empty")
    if limit < 1:
        raise WarehouseError("--limit must be at least 1")
    if by not in ("turn", "trial"):
        raise WarehouseError(f"--by must be turn or trial, not {by!r}")
    backend = url.get_backend_name()
    needle = split_text(text)[0]  # stored texts hold U+FFFD where the input had NUL
    # SQLite's pattern compiled first: one that does not compile is said before anything is read.
    compiled = python_regex(needle) if regex and backend == "sqlite" else None
    match = _Match.of(backend, needle, regex)
    with readonly_session(url, timeout=timeout, own_text=True) as session:
        if compiled is not None:
            _register_regex(session, compiled)
        index = _index_status(session, backend)
        use_fts = backend == "sqlite" and index.present and len(needle) >= MIN_INDEXED_LENGTH and not regex
        notes = []
        if use_fts and index.unindexed:
            plural = "s" if index.unindexed != 1 else ""
            notes.append(f"{index.unindexed} message{plural} arrived after the last `warehouse index build` "
                         "and were searched without the index; run it again to index them")
        if index.outdated and not index.present:
            notes.append("the search index is of an earlier version, which searches no longer use: "
                         "run `warehouse index build` again")
        filters = filters or Filters()
        if filters.narrows_trials or filters.labels:  # a value that matches nothing: said beside the hits
            notes.append(filters.unmatched(session.connection))
        finder = _Finder(session, backend, match, use_fts=use_fts, index=index, filters=filters, role=role)
        if by == "trial":
            counted = _by_trial(finder, limit + 1)
            truncated = len(counted) > limit
            counted = counted[:limit]
            rows = [first for first, _ in counted]
        else:
            rows = finder.first(limit + 1)  # one more than shown, to know whether there are more
            truncated = len(rows) > limit
            rows = rows[:limit]
        snippets = _snippets(session, rows, match)
    rows = [(*row[:6], snippets.get((row[6], row[7]))) for row in rows]
    columns = COLUMNS
    if by == "trial":
        columns = TRIAL_COLUMNS
        rows = [(*row[:2], hits, *row[2:]) for row, (_, hits) in zip(rows, counted)]
    return SearchResult(columns, rows, truncated, via_index=use_fts or (backend == "postgresql" and index.present and not regex),
                        note="; ".join(filter(None, notes)) or None)


def _by_trial(finder: _Finder, trials: int) -> list[tuple[tuple, int]]:
    """The first `trials` trials holding a hit: each one's first hit and how many it holds.
    Hits come trial by trial, so once a later trial's hit is found the earlier ones are whole:
    the hits are asked for in growing pages until `trials` + 1 trials show (or none are left)."""
    wanted = 4 * trials
    while True:
        rows = finder.first(wanted)
        counted: dict[tuple, list] = {}
        for row in rows:
            counted.setdefault(row[:2], [row, 0])[1] += 1
        if len(counted) > trials or len(rows) < wanted:
            return [(first, hits) for first, hits in list(counted.values())[:trials]]
        wanted *= 4


class _Finder:
    """The hits of one search, found in the answer's order (see CANDIDATES)."""

    def __init__(self, session: ReadSession, backend: str, match: _Match, *, use_fts: bool, index: IndexStatus,
                 filters: Filters, role: str | None):
        self.session, self.backend, self.use_fts, self.index = session, backend, use_fts, index
        self.role, self.match = role, match
        # The runs first (an unknown one is an error, not no hits), then a predicate over every
        # statement's trials (tr) and tasks (tk).
        self.run_ids = filters.run_ids(session.connection)
        where, filter_binds = filters.sql(session.connection, run_id="tr.run_id", task="tk.name", model="tr.model",
                                          agent="tr.agent", started_at="tr.started_at", run_ids=self.run_ids)
        self.params = {**match.params, "role": role, **filter_binds, "indexed_through": index.indexed_through}
        self.filters = f" AND {where}" if filters else ""

    @property
    def turns_wanted(self) -> bool:
        return self.role not in {role for role, _ in TRIAL_TEXTS}

    def trial_texts(self) -> list[tuple[str, str]]:
        """The trial texts (TRIAL_TEXTS) this search reads."""
        return [(role, column) for role, column in TRIAL_TEXTS if self.role in (None, role)]

    def first(self, wanted: int) -> list[tuple]:
        """The first `wanted` hits."""
        walk = _TrialsInOrder(self.session, self.run_ids, self.filters, self.params)
        # A common needle fills the page from the first trials, every text tested.
        rows = self._hits(None, {}, walk.take(FIRST_BATCH), wanted)
        # Every text is to be tested, until the texts holding the needle are listed: messages,
        # and per trial text the trials whose text holds it.
        messages: list[int] | None = None
        trials: dict[str, list[int] | None] = {}
        listed = False
        while len(rows) < wanted and not walk.done:
            # As many trials as the hits so far say the rest of the page needs, and half again.
            rate = len(rows) / walk.taken
            size = math.ceil(1.5 * (wanted - len(rows)) / rate) if rate else math.inf
            if size > LAST_BATCH and not listed:  # a rare needle: are its texts few?
                listed = True
                messages = self._matching_messages() if self.turns_wanted else []
                trials = {role: self._matching_trials(column, indexed=role in self.index.trial_texts)
                          for role, column in self.trial_texts()}
                if (messages is not None and None not in trials.values()
                        and self._uses(messages) <= CANDIDATE_USES):
                    return self._hits(messages, trials, None, wanted)
            batch = walk.take(max(FIRST_BATCH, min(size, 4 * walk.taken, LAST_BATCH)))
            rows += self._hits(messages, trials, batch, wanted - len(rows))
        return rows

    def _fetch(self, sql: str, max_rows: int | None = None) -> list[tuple]:
        return self.session.fetch(sql, self.params, max_rows=max_rows).rows

    def _matching_messages(self) -> list[int] | None:
        """The messages holding the needle, or None when there are more than CANDIDATES."""
        exact = self._listing_test("m.content", self.index.present)
        sql = f"SELECT m.id FROM messages m WHERE {exact}"
        if self.use_fts:
            # The index narrows the messages it covers to candidates (it folds case more widely
            # than the exact test, which then decides); the messages it does not cover yet are
            # scanned. Together: the hits of a full scan.
            sql = (f"SELECT m.id FROM messages m WHERE m.id IN (SELECT rowid FROM {FTS_TABLE} "
                   f"WHERE {FTS_TABLE} MATCH :phrase) AND {exact} "
                   f"UNION ALL SELECT m.id FROM messages m WHERE m.id > :indexed_through AND {exact}")
        return self._listed(sql)

    def _matching_trials(self, column: str, *, indexed: bool) -> list[int] | None:
        """The trials whose text `column` holds the needle, or None when more than CANDIDATES."""
        return self._listed(f"SELECT tr.id FROM trials tr JOIN runs r ON r.id = tr.run_id "
                            f"LEFT JOIN tasks tk ON tk.id = tr.task_id "
                            f"WHERE {self._listing_test(f'tr.{column}', indexed)}{self.filters}")

    def _listing_test(self, col: str, indexed: bool) -> str:
        exact = self.match.contains.format(col=col)
        if self.backend == "postgresql" and indexed and self.match.trigram:
            return f"{self.match.trigram.format(col=col)} AND {exact}"
        return exact

    def _listed(self, sql: str) -> list[int] | None:
        rows = self._fetch(f"{sql} LIMIT {CANDIDATES + 1}")
        return None if len(rows) > CANDIDATES else [int(row[0]) for row in rows]

    def _uses(self, messages: list[int]) -> int:
        if not messages:
            return 0
        return self._fetch(f"SELECT count(*) FROM (SELECT 1 FROM conversation_turns "
                           f"WHERE {_in('message_id', messages)} LIMIT {CANDIDATE_USES + 1}) used")[0][0]

    def _hits(self, messages: list[int] | None, listed: dict[str, list[int] | None], trials: list[int] | None,
              wanted: int) -> list[tuple]:
        """The first `wanted` hits among `trials` (None: all), in the answer's order. A list
        of messages, or (in `listed`, by trial text) of trials, is the texts that hold the
        needle; None or missing, that every text is to be tested."""
        if trials == [] or wanted < 1:
            return []
        batch, branches = "", []
        if trials is not None:
            # The batch's turns are read first, each tested against its message one by one: a
            # planner that misjudges how many texts hold the needle (PostgreSQL's, with the
            # trigram index) would otherwise start from those texts, every one of them.
            test = (_in("t.message_id", messages) if messages is not None
                    else f"(SELECT 1 FROM messages m WHERE m.id = t.message_id AND "
                         f"{self.match.contains.format(col='m.content')}) = 1")
            batch = (f"WITH batch AS MATERIALIZED (SELECT t.*, CASE WHEN {test} THEN 1 ELSE 0 END AS hit "
                     f"FROM conversations c JOIN conversation_turns t ON t.conversation_id = c.id "
                     f"WHERE {_in('c.trial_id', trials)})\n")
        if self.turns_wanted and messages != []:
            where = (" AND t.hit = 1" if batch else f" AND {_in('t.message_id', messages)}")
            branches.append(_turn_hits(turns="batch" if batch else "conversation_turns",
                                       where=where + (" AND t.role = :role" if self.role is not None else ""),
                                       filters=self.filters))
        for role, column in self.trial_texts():
            holding = listed.get(role)
            if holding == []:
                continue
            test = (_in("tr.id", holding) if holding is not None
                    else self.match.contains.format(col=f"tr.{column}"))
            within = f" AND {_in('tr.id', trials)}" if trials is not None else ""
            branches.append(_trial_text_hits(role, test + within + self.filters))
        if not branches:
            return []
        return self._fetch(batch + "\nUNION ALL\n".join(branches)
                           + f"\nORDER BY run_key, trial_name, kind, trace_source, episode, turn LIMIT {int(wanted)}")


class _TrialsInOrder:
    """The trials (that the filters keep) in the answer's order, taken in batches. A run's
    trials come by the unique index on (run, trial name): no sort."""

    def __init__(self, session: ReadSession, run_ids: set[int] | None, filters: str, params: dict):
        self.session, self.filters, self.params = session, filters, params
        self.runs = [row[0] for row in session.fetch("SELECT r.id FROM runs r ORDER BY r.run_key", {},
                                                     max_rows=None).rows
                     if run_ids is None or row[0] in run_ids]
        self.after: str | None = None  # the last trial name taken from runs[0]
        self.taken = 0

    @property
    def done(self) -> bool:
        return not self.runs

    def take(self, size: int) -> list[int]:
        """The next `size` trials' ids (fewer at the end)."""
        ids: list[int] = []
        while self.runs and len(ids) < size:
            wanted = size - len(ids)
            rows = self.session.fetch(
                "SELECT tr.id, tr.trial_name FROM trials tr LEFT JOIN tasks tk ON tk.id = tr.task_id "
                f"WHERE tr.run_id = {int(self.runs[0])}"
                + (" AND tr.trial_name > :after" if self.after is not None else "")
                + self.filters
                + f" ORDER BY tr.trial_name LIMIT {int(wanted)}",
                {**self.params, "after": self.after}, max_rows=None).rows
            ids += [int(row[0]) for row in rows]
            if len(rows) < wanted:
                self.runs.pop(0)
                self.after = None
            else:
                self.after = rows[-1][1]
        self.taken += len(ids)
        return ids


def _in(column: str, ids: list[int]) -> str:
    """`column` is one of `ids` (read from the database, written into the statement)."""
    return f"{column} IN ({', '.join(str(int(i)) for i in ids)})" if ids else "1 = 0"


def _turn_hits(*, turns: str, where: str, filters: str) -> str:
    # Each hit says where to cut its snippet from: kind 0 is a turn (ref: its message id),
    # kind 1 and on a trial's text, TRIAL_TEXTS' in order (ref: the trial id).
    # A hit turn is a turn of a conversation; it is reported at the shortest episode that
    # holds it (the first of a trajectory's to reach it), found by the index on episodes'
    # (conversation_id, n_turns) in one step, not by reading every episode of the
    # conversation. The same turn in several conversations of a trial is reported once.
    return f"""
        SELECT r.run_key AS run_key, tr.trial_name AS trial_name, e.trace_source AS trace_source,
               min(e.episode_index) AS episode, h.idx AS turn, h.role AS role,
               0 AS kind, h.message_id AS ref
        FROM (SELECT t.idx, t.role, t.message_id,
                     (SELECT s.id FROM episodes s
                      WHERE s.conversation_id = t.conversation_id AND s.n_turns > t.idx
                      ORDER BY s.n_turns, s.episode_index LIMIT 1) AS episode_id
              FROM {turns} t
              WHERE 1 = 1{where}) h
        JOIN episodes e ON e.id = h.episode_id
        JOIN trials tr ON tr.id = e.trial_id
        JOIN runs r ON r.id = tr.run_id
        LEFT JOIN tasks tk ON tk.id = tr.task_id
        WHERE 1 = 1{filters}
        GROUP BY r.run_key, tr.trial_name, e.trace_source, h.idx, h.role, h.message_id"""


def _kind(role: str) -> int:
    """A trial text's kind: 1 and on, in TRIAL_TEXTS' order (0 is a turn)."""
    return 1 + [text_role for text_role, _ in TRIAL_TEXTS].index(role)


def _trial_text_hits(role: str, where: str) -> str:
    return f"""
        SELECT r.run_key AS run_key, tr.trial_name AS trial_name, NULL AS trace_source,
               NULL AS episode, NULL AS turn, '{role}' AS role, {_kind(role)} AS kind, tr.id AS ref
        FROM trials tr
        JOIN runs r ON r.id = tr.run_id
        LEFT JOIN tasks tk ON tk.id = tr.task_id
        WHERE {where}"""


def _snippets(session: ReadSession, rows: list[tuple], match: _Match) -> dict[tuple[int, int], str]:
    """The text around the first hit, for each (kind, ref) in rows, cut out by the database
    so a 50 MB message never travels whole."""
    out: dict[tuple[int, int], str] = {}
    texts = [(0, "messages", "content")] + [(_kind(role), "trials", column) for role, column in TRIAL_TEXTS]
    for kind, table, column in texts:
        ids = sorted({int(row[7]) for row in rows if row[6] == kind})
        if not ids:
            continue
        # One character more than the snippet shows, to know whether the text goes on.
        sql = f"""
            SELECT id, pos, substr(body, start, stop - start + :after + 1) AS excerpt, start, stop
            FROM (SELECT id, {column} AS body, pos, stop,
                         CASE WHEN pos > :before THEN pos - :before ELSE 1 END AS start
                  FROM (SELECT id, {column}, {match.start.format(col=column)} AS pos,
                               {match.stop.format(col=column)} AS stop
                        FROM {table} WHERE {_in('id', ids)}) located) windowed"""
        found = session.fetch(sql, {**match.params, "before": CONTEXT_CHARS, "after": CONTEXT_CHARS}, max_rows=None)
        for ref, pos, excerpt, start, stop in found.rows:
            out[(kind, ref)] = _snippet(excerpt or "", pos - start, start > 1, stop - pos)
    return out


def _snippet(excerpt: str, offset: int, cut_before: bool, length: int) -> str:
    """The hit (at `offset` in `excerpt`) with up to CONTEXT_CHARS on each side, on one line."""
    end = offset + length + CONTEXT_CHARS
    text = ("…" if cut_before else "") + excerpt[:end] + ("…" if len(excerpt) > end else "")
    return printable(re.sub(r"\s+", " ", text)).strip()


def snippet_within(snippet: str, width: int, needle: str, *, regex: bool = False) -> str:
    """A snippet in at most `width` characters, cut around its hit so that the hit stays in
    view (a table narrower than the snippet): as much context on each side as fits, "…" where
    cut. The hit is found as the search matched it (ASCII letters in either case), in the
    snippet's own form (whitespace runs as one space, control characters made visible); where
    it is not found, the snippet keeps its beginning. `regex`: the needle is a regular
    expression, found in the snippet as SQLite's --regex finds it."""
    if len(snippet) <= width:
        return snippet
    if width < 2:
        return "…"[:width]
    if regex:
        try:
            hit = python_regex(needle).search(snippet, timeout=1)
        except (WarehouseError, TimeoutError):
            hit = None
        start, end = (hit.start(), hit.end()) if hit else (-1, -1)
    else:
        shown_needle = printable(re.sub(r"\s+", " ", needle)).translate(_ASCII_FOLD)
        start = snippet.translate(_ASCII_FOLD).find(shown_needle) if shown_needle else -1
        end = start + len(shown_needle)
    if start < 0:
        return snippet[:width - 1] + "…"
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
    # PostgreSQL: the trial texts (TRIAL_TEXTS' roles) indexed too (verifier output since
    # 2026-12, exception messages since 2026-12-03)
    trial_texts: frozenset[str] = frozenset()
    indexed_through: int = 0  # SQLite: the largest message id the index holds
    unindexed: int = 0  # SQLite: messages that arrived after it (searches scan them)
    outdated: bool = False  # PostgreSQL: an index of an earlier version, which search no longer uses


def index_status(url: URL | str, *, timeout: float = DEFAULT_TIMEOUT) -> IndexStatus:
    if isinstance(url, str):
        url = resolve_url(url)
    with readonly_session(url, timeout=timeout, own_text=True) as session:
        return _index_status(session, url.get_backend_name())


def _index_status(session: ReadSession, backend: str) -> IndexStatus:
    if backend == "postgresql":
        names = (PG_INDEX, PG_VERIFIER_INDEX, PG_EXCEPTION_INDEX, *PG_OLD_INDEXES)
        found = {row[0] for row in session.fetch(
            f"SELECT indexname FROM pg_indexes WHERE indexname IN ({', '.join(f':i{n}' for n in range(len(names)))})",
            {f"i{n}": name for n, name in enumerate(names)}).rows}
        return IndexStatus(present=PG_INDEX in found,
                           trial_texts=frozenset(role for role, name in ((VERIFIER, PG_VERIFIER_INDEX),
                                                                         (EXCEPTION, PG_EXCEPTION_INDEX))
                                                 if name in found),
                           outdated=any(name in found for name in PG_OLD_INDEXES))
    found = session.fetch("SELECT count(*) FROM sqlite_master WHERE name = :name", {"name": FTS_TABLE})
    if not found.rows[0][0]:
        return IndexStatus(present=False)
    reach = session.fetch(f"""
        SELECT through, (SELECT count(*) FROM messages WHERE id > through)
        FROM (SELECT coalesce(max(id), 0) AS through FROM {FTS_DOCSIZE}) coverage""")
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
            for old in PG_OLD_INDEXES:
                conn.exec_driver_sql(f"DROP INDEX IF EXISTS {old}")
            for name, table, column in ((PG_INDEX, "messages", "content"),
                                        (PG_VERIFIER_INDEX, "trials", "verifier_output"),
                                        (PG_EXCEPTION_INDEX, "trials", "exception_message")):
                joined = _JOINED.format(col=column)
                conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin (({joined}) gin_trgm_ops)")


def forget_messages(conn: Connection, ids: list[int]) -> None:
    """Take messages about to be deleted out of SQLite's FTS index, inside the deleting
    transaction: SQLite may give a later message a deleted one's id, which the index would
    then take for indexed with the old text. (PostgreSQL's index follows its table.)"""
    if conn.dialect.name != "sqlite" or not ids or not conn.exec_driver_sql(
            "SELECT count(*) FROM sqlite_master WHERE name = ?", (FTS_TABLE,)).scalar():
        return
    # With external content, an entry is deleted by giving the text it was indexed with; only
    # an indexed id may be (deleting one the index never held corrupts it).
    conn.exec_driver_sql(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) SELECT 'delete', id, content "
                         f"FROM messages WHERE {_in('id', ids)} AND id IN (SELECT id FROM {FTS_DOCSIZE})")


def drop_index(engine: Engine) -> None:
    """Remove the index (PostgreSQL keeps the pg_trgm extension: other things may use it)."""
    with write_transaction(engine) as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        else:
            for name in (PG_INDEX, PG_VERIFIER_INDEX, PG_EXCEPTION_INDEX, *PG_OLD_INDEXES):
                conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
