"""`warehouse search` and `warehouse index`: hits and misses, filters, case folding, the same
hits with and without the trigram index, messages ingested after the index was built, NUL."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pytest
from sqlalchemy import text

import query_fixture
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from query_fixture import cli
from warehouse import search as search_lib
from warehouse.filters import Filters
from warehouse.search import build_index, drop_index, index_status, search

VERIFIER_HIT = ("run-b", "task1__b0", None, None, None, "verifier", "FAILED: AssertionError: expected error")
ERROR_TURN = ("run-b", "task2__b0", "main", 0, 1, "assistant", "Found an ERROR here")
ECOLE_TURN = ("run-c", "shared", "main", 1, 2, "user", "Déjà vu: ÉCOLE 100% done")
NUL_TURN = ("run-c", "c2", "main", 0, 0, "user", "binary\ufffddata with needle-xyz inside")
HI_TURN = ("run-c", "shared", "main", 0, 1, "assistant", "hi")
TIMEOUT_HIT = ("run-a", "task2__a1", None, None, None, "exception", "Agent execution timed out after 540.0 seconds")

# needle, filters -> expected rows; the same with and without the index.
CASES = [
    ("error", {}, [VERIFIER_HIT, ERROR_TURN]),  # the turn is in 2 episodes: listed once, at the first
    ("ERROR", {}, [VERIFIER_HIT, ERROR_TURN]),
    ("eRrOr", {"role": "assistant"}, [ERROR_TURN]),
    ("error", {"role": "verifier"}, [VERIFIER_HIT]),
    ("error", {"task": "task2"}, [ERROR_TURN]),
    ("error", {"run": "run-a"}, []),
    ("error", {"run": "run-b", "task": "task1"}, [VERIFIER_HIT]),
    ("needle-xyz", {}, [NUL_TURN]),  # the message holds a NUL
    ("NEEDLE-X", {}, [NUL_TURN]),
    ("ÉCOLE", {}, [ECOLE_TURN]),
    ("École", {}, [ECOLE_TURN]),  # É exact, the ASCII letters folded
    ("école", {}, []),  # only ASCII letters fold
    ("0%", {}, [ECOLE_TURN]),  # % and _ are literal, not wildcards ("1000 items" must not match)
    ("1_00", {}, []),
    ("hi", {}, [HI_TURN]),  # shorter than a trigram: always a scan
    ("do it", {"run": "run-c"}, []),
    ("no such text anywhere", {}, []),
    ('"quoted" AND NEAR(', {}, []),  # FTS5 query syntax is taken literally
    ("timed out", {}, [TIMEOUT_HIT]),  # exception messages too
    ("TIMED OUT", {"role": "exception"}, [TIMEOUT_HIT]),
    ("timed out", {"role": "verifier"}, []),
    ("error", {"role": "exception"}, []),
    ("error", {"task": "task*"}, [VERIFIER_HIT, ERROR_TURN]),  # --task takes a glob, as every query's
    ("error", {"task": "task?"}, [VERIFIER_HIT, ERROR_TURN]),
    ("error", {"task": "*2"}, [ERROR_TURN]),
    ("error", {"task": "task"}, []),
]


def _search(url, needle: str, *, run=None, task=None, **rest):
    """search, its run and task given as the API and the CLI give them: as filters."""
    return search(url, needle, filters=Filters.of(run=run, task=task), **rest)


@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index"])
def test_hits_and_misses(url, engine, indexed):
    if indexed:
        build_index(engine)
    for needle, filters, expected in CASES:
        result = _search(url, needle, **filters)
        assert result.rows == expected, (needle, filters)
        assert result.columns == ["run_key", "trial_name", "trace_source", "episode", "turn", "role", "snippet"]
    assert search(url, "error").via_index is indexed


def test_index_and_scan_agree(url, engine):
    needles = ["e", "er", "err", "ERROR", "do it", "done", "pass", "TESTS", "100%", "ÉCO", "xyz", "items"]
    scanned = {n: search(url, n, limit=1000).rows for n in needles}
    build_index(engine)
    assert {n: search(url, n, limit=1000).rows for n in needles} == scanned
    assert len(scanned["done"]) == 19  # 18 trials with the default episode, and the ÉCOLE turn


# The ways search finds hits (see warehouse.search.CANDIDATES), each forced on the fixture: the
# texts listed then every hit at once; trials walked in order, every text tested (the texts too
# many to list); trials walked, the listed texts' turns (their uses too many to order at once);
# batches of one trial, so that a page ends inside a run and a walk crosses runs.
STRATEGIES = {
    "default": {},
    "walk, every text tested": {"CANDIDATES": 0, "FIRST_BATCH": 1, "LAST_BATCH": 2},
    "walk, listed texts": {"CANDIDATE_USES": 0, "FIRST_BATCH": 1, "LAST_BATCH": 3},
    "listed at once": {"FIRST_BATCH": 1, "LAST_BATCH": 1},
}


def _reference(engine, needle: str, run=None, task=None, role=None) -> list[tuple]:
    """Every hit, found the plain way: each episode's turns read whole through the turns view,
    tested in Python, a turn kept at the first episode holding it, then sorted."""
    fold = search_lib._ASCII_FOLD
    folded = needle.translate(fold)
    with engine.connect() as conn:
        turns = conn.execute(text("""
            SELECT r.run_key, tr.trial_name, e.trace_source, e.episode_index, t.idx, t.role, t.message_id,
                   m.content, tk.name
            FROM turns t JOIN episodes e ON e.id = t.episode_id JOIN trials tr ON tr.id = e.trial_id
            JOIN runs r ON r.id = tr.run_id LEFT JOIN tasks tk ON tk.id = tr.task_id
            JOIN messages m ON m.id = t.message_id""")).all()
        trial_texts = conn.execute(text("""
            SELECT r.run_key, tr.trial_name, tr.verifier_output, tr.exception_message, tk.name FROM trials tr
            JOIN runs r ON r.id = tr.run_id LEFT JOIN tasks tk ON tk.id = tr.task_id""")).all()
    first: dict[tuple, int] = {}
    for run_key, trial, source, episode, idx, turn_role, message, content, task_name in turns:
        if (folded in content.translate(fold) and run in (None, run_key) and task in (None, task_name)
                and role in (None, turn_role)):
            key = (run_key, trial, source, idx, turn_role, message)
            first[key] = min(episode, first.get(key, episode))
    hits = [(k[0], k[1], 0, k[2], episode, k[3], k[4]) for k, episode in first.items()]
    for kind, text_role in ((1, "verifier"), (2, "exception")):
        if role in (None, text_role):
            hits += [(run_key, trial, kind, "", -1, -1, text_role)
                     for run_key, trial, *texts, task_name in trial_texts
                     if texts[kind - 1] and folded in texts[kind - 1].translate(fold) and run in (None, run_key)
                     and task in (None, task_name)]
    hits.sort()
    return [(h[0], h[1], h[3] if h[2] == 0 else None, h[4] if h[2] == 0 else None, h[5] if h[2] == 0 else None,
             h[6]) for h in hits]


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_way_of_finding_hits_gives_the_plain_answer(url, engine, indexed, strategy, monkeypatch):
    for name, value in STRATEGIES[strategy].items():
        monkeypatch.setattr(search_lib, name, value)
    if indexed:
        build_index(engine)
    searches = [("e", {}), ("done", {}), ("error", {}), ("ERROR", {"role": "assistant"}), ("do", {"run": "run-c"}),
                ("e", {"task": "task1"}), ("e", {"role": "verifier"}), ("e", {"role": "exception"}),
                ("no such text", {}), ("Déjà", {}), ("out", {}), ("needle-xyz", {}), ("AssertionError: exp", {}),
                ("0% d", {}), ("vu: É", {})]
    for needle, filters in searches:
        expected = _reference(engine, needle, **filters)
        for limit in (1, 2, 3, 5, 8, 13, 1000):
            found = _search(url, needle, limit=limit, **filters)
            assert [row[:6] for row in found.rows] == expected[:limit], (needle, filters, limit)
            assert found.truncated == (len(expected) > limit), (needle, filters, limit)


@pytest.mark.parametrize("strategy", ["default", "walk, every text tested"])
def test_by_trial_counts_each_trials_hits_and_gives_its_first(url, engine, strategy, monkeypatch):
    """--by trial: a row per trial holding a hit, in the answer's order, its hits counted, with
    its first hit's place and snippet; the limit counts trials."""
    for name, value in STRATEGIES[strategy].items():
        monkeypatch.setattr(search_lib, name, value)
    for needle in ("e", "done", "error", "timed out", "no such text"):
        hits = search(url, needle, limit=1000).rows
        trials: dict[tuple, list] = {}
        for hit in hits:
            trials.setdefault(hit[:2], []).append(hit)
        expected = [(*key, len(found), *found[0][2:]) for key, found in trials.items()]
        for limit in (1, 2, 5, 1000):
            result = search(url, needle, limit=limit, by="trial")
            assert result.columns == ["run_key", "trial_name", "hits", "trace_source", "episode", "turn", "role",
                                      "snippet"]
            assert result.rows == expected[:limit], (needle, limit)
            assert result.truncated == (len(expected) > limit)
    done = cli(url, "search", "e", "--by", "trial", "--limit", "2", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [tuple(row.values()) for row in json.loads(done.stdout)] == \
        [tuple(row) for row in search(url, "e", limit=2, by="trial").rows]
    assert done.stderr.strip() == "(stopped at 2 trials: there are more; raise --limit or narrow the search)"


def _add_late_message(engine, text: str, key: str) -> None:
    source = writer.ensure_source(engine, "parquet", f"/fixture/{key}", key)
    with writer.unit(engine, source, f"unit-{key}", f"hash-{key}") as u:
        u.add_trials([Trial(run_key="run-late", trial_name=f"{key}__0", task_name="task1", reward=1.0,
                            result="1.0", episodes=[Episode(0, [Turn("user", text)])])])


def test_index_covers_messages_ingested_after_it(url, engine, backend):
    build_index(engine)
    _add_late_message(engine, "a Late-Arriving message", "late")
    result = search(url, "late-arriving")
    assert result.via_index
    assert result.rows == [("run-late", "late__0", "main", 0, 0, "user", "a Late-Arriving message")]
    if backend == "sqlite":  # the FTS index does not follow ingests: the newer messages are scanned
        assert index_status(url).unindexed == 1
        assert "1 message arrived after" in result.note
        build_index(engine)  # indexes just the new message
    status = index_status(url)
    assert status.present and status.unindexed == 0
    again = search(url, "late-arriving")
    assert again.rows == result.rows and again.note is None


def test_index_build_is_idempotent_and_drop_removes_it(url, engine):
    assert not index_status(url).present
    build_index(engine)
    build_index(engine)
    assert index_status(url).present
    assert search(url, "needle").rows == [NUL_TURN]
    drop_index(engine)
    drop_index(engine)
    assert not index_status(url).present
    assert search(url, "needle").rows == [NUL_TURN]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_index_holds_every_message_once(url, engine):
    build_index(engine)
    build_index(engine)
    with engine.connect() as conn:
        indexed = conn.exec_driver_sql(f"SELECT count(*) FROM {search_lib.FTS_DOCSIZE}").scalar()
        assert indexed == conn.exec_driver_sql("SELECT count(*) FROM messages").scalar()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgres_planner_can_use_the_index(url, engine):
    build_index(engine)
    # The message filter search runs; the planner picks the index for it on large tables (here
    # the table is tiny, so sequential scans are ruled out to see that it can).
    sql = "SELECT m.id FROM messages m WHERE " + search_lib._TRIGRAM.format(col="m.content")
    with engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(text("EXPLAIN " + sql), {"joined": "%needleqxyz%"}))
    assert search_lib.PG_INDEX in plan


@pytest.mark.parametrize("backend", ["postgresql"])
def test_an_index_of_an_earlier_version_is_named_and_replaced(url, engine):
    """Before 2026-12 the trigram indexes were over the texts as they are; search no longer uses
    them (it asks for the texts with their punctuation joined), says so, and `index build`
    replaces them."""
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        conn.exec_driver_sql(f"CREATE INDEX {search_lib.PG_OLD_INDEXES[0]} ON messages USING gin (content gin_trgm_ops)")
    result = search(url, "needle-xyz")
    assert result.rows == [NUL_TURN] and "earlier version" in result.note
    build_index(engine)
    with engine.connect() as conn:
        names = set(conn.exec_driver_sql("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'search_%%'").scalars())
    assert names == {search_lib.PG_INDEX, search_lib.PG_VERIFIER_INDEX, search_lib.PG_EXCEPTION_INDEX}
    assert index_status(url).trial_texts == {"verifier", "exception"}
    assert search(url, "needle-xyz").note is None


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_needle_joined_by_punctuation_is_asked_of_the_index_joined(url, engine, monkeypatch):
    """The index holds the texts with their punctuation made letters, and keeps every hit: a
    needle with punctuation in any place finds what the scan finds (the texts listed through
    the index, as for a rare needle)."""
    monkeypatch.setattr(search_lib, "FIRST_BATCH", 1)
    monkeypatch.setattr(search_lib, "LAST_BATCH", 1)
    for needle in ("needle-xyz", "a-xyz", "0%", "d: éc", "AssertionError: exp", "'", "%", "{", "ÉCOLE 100%"):
        scanned = search(url, needle).rows
        build_index(engine)
        assert search(url, needle).rows == scanned, needle
        drop_index(engine)


def test_limit_and_snippet_context(url, engine):
    result = search(url, "done", limit=3)
    assert len(result.rows) == 3 and result.truncated
    _add_late_message(engine, "x" * 200 + " the MIDDLE part " + "y" * 200, "long")
    (row,) = search(url, "middle").rows
    assert row[-1] == "…" + "x" * 55 + " the MIDDLE part " + "y" * 54 + "…"


def test_cli(url):
    done = cli(url, "search", "ERROR", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        dict(zip(["run_key", "trial_name", "trace_source", "episode", "turn", "role", "snippet"], row))
        for row in (VERIFIER_HIT, ERROR_TURN)]
    assert cli(url, "index", "build").returncode == 0
    assert cli(url, "index", "build").returncode == 0
    again = cli(url, "search", "ERROR", "--format", "json")
    assert again.stdout == done.stdout
    capped = cli(url, "search", "done", "--limit", "2", "--format", "csv")
    assert len(capped.stdout.splitlines()) == 3 and "stopped at 2 hits" in capped.stderr
    assert cli(url, "index", "drop").returncode == 0
    assert cli(url, "search", "").returncode == 2


def test_a_snippet_is_cut_around_its_hit():
    snippet = "…" + "x" * 55 + " the MIDDLE part " + "y" * 54 + "…"
    for width in (13, 20, 30, 60, 100):
        cut = search_lib.snippet_within(snippet, width, "middle")
        assert len(cut) == width and "MIDDLE" in cut and cut.startswith("…") and cut.endswith("…")
    assert search_lib.snippet_within("the MIDDLE part " + "y" * 50, 20, "middle").startswith("the MIDDLE part")
    assert search_lib.snippet_within("x" * 50 + " the MIDDLE", 20, "middle") == "…" + "x" * 8 + " the MIDDLE"
    assert search_lib.snippet_within(snippet, 500, "middle") == snippet  # fits: as it is
    # A hit wider than the column: its beginning. A needle with a newline matches its snippet's space.
    assert search_lib.snippet_within("a " + "H" * 40 + " b", 12, "h" * 40) == "…" + "H" * 10 + "…"
    assert "one two" in search_lib.snippet_within("z" * 40 + " one two " + "z" * 40, 15, "one\ntwo")


def test_a_narrow_table_keeps_the_snippet_and_names_runs(url, engine):
    _add_late_message(engine, "x" * 200 + " the MIDDLE part " + "y" * 200, "long")
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET name = 'bee' WHERE run_key = 'run-b'"))
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "warehouse", "--db", url, "search", "middle"], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "60"}, timeout=120)
    assert done.returncode == 0, done.stderr
    header, _, hit = done.stdout.splitlines()
    assert header.split()[:2] == ["run_key", "run_name"] and header.split()[-1] == "snippet"
    assert "MIDDLE" in hit and all(len(line) <= 60 for line in done.stdout.splitlines())
    named = subprocess.run([sys.executable, "-m", "warehouse", "--db", url, "search", "ERROR"], capture_output=True,
                           text=True, env={**os.environ, "COLUMNS": "200"}, timeout=120)
    assert [line.split()[:3] for line in named.stdout.splitlines()[2:]] == [
        ["run-b", "bee", "task1__b0"], ["run-b", "bee", "task2__b0"]]
    # CSV and JSON keep their columns (scripts read them by position too).
    assert cli(url, "search", "ERROR", "--format", "csv").stdout.splitlines()[0] == \
        "run_key,trial_name,trace_source,episode,turn,role,snippet"


def _utc(value) -> datetime | None:
    """A stored start as a naive UTC datetime: SQLite gives the text it stores, PostgreSQL an
    aware datetime in the session's zone."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def test_every_filter_narrows_a_search_to_the_trials_it_keeps(url, engine):
    """--model, --agent, --label, --since and --until as every query takes them: the hits are
    the unfiltered search's hits in the trials the filter keeps (read here from the trials
    table by hand), in the same order, on the CLI as through the library."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO run_labels (run_id, key, value) SELECT id, 'kind', 'x' FROM runs "
                          "WHERE run_key IN ('run-b', 'run-c')"))
    with engine.connect() as conn:
        trials = conn.execute(text("SELECT r.run_key, tr.trial_name, tr.model, tr.agent, tr.started_at "
                                   "FROM trials tr JOIN runs r ON r.id = tr.run_id")).all()
    start = {(run, trial): _utc(started) for run, trial, _, _, started in trials}
    eleven = datetime(2024, 1, 1, 11)
    cases = [
        ({"model": "m2"}, {(r, t) for r, t, model, _, _ in trials if model == "m2"}),
        ({"agent": "OPEN*"}, {(r, t) for r, t, _, agent, _ in trials if agent == "openhands"}),
        ({"label": "kind=x"}, {(r, t) for r, t, *_ in trials if r in ("run-b", "run-c")}),
        ({"since": "2024-01-01T11:00"},
         {k for k, s in start.items() if s is not None and s >= eleven}),
        ({"until": "2024-01-01T11:00Z", "run": "run-a"},
         {k for k, s in start.items() if s is not None and s < eleven}),
    ]
    everything = search(url, "e", limit=1000).rows
    for given, kept in cases:
        assert kept, given
        want = [row for row in everything if (row[0], row[1]) in kept]
        assert want, given
        assert search(url, "e", limit=1000, filters=Filters.of(**given)).rows == want, given
        args = [a for option, value in given.items() for a in (f"--{option}", value)]
        done = cli(url, "search", "e", *args, "--limit", "1000", "--format", "json")
        assert done.returncode == 0, done.stderr
        assert [(h["run_key"], h["trial_name"], h["turn"]) for h in json.loads(done.stdout)] == [
            (row[0], row[1], row[4]) for row in want], given


# --- --regex ------------------------------------------------------------------------------------

@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "index"])
def test_a_literal_as_a_regular_expression_finds_what_the_substring_finds(url, engine, indexed):
    """Every case above, its needle escaped: the same hits and snippets, case folded alike
    (ASCII letters only: `école` still misses `ÉCOLE`), with and without the index."""
    if indexed:
        build_index(engine)
    for needle, filters, expected in CASES:
        assert _search(url, re.escape(needle), regex=True, **filters).rows == expected, (needle, filters)


REGEX_CASES = [
    (r"timed? out after \d+", {}, [TIMEOUT_HIT]),
    (r"^found AN", {}, [ERROR_TURN]),  # anchored at the text's start
    (r"er+or$", {}, [VERIFIER_HIT]),  # at its end: the turn goes on ("here")
    (r"\wCOLE", {}, []),  # \w is ASCII on both backends: É is no word character
    (r"[0-9]{4} items", {}, [("run-c", "shared", "main", 1, 3, "assistant", "1000 items")]),
    (r"needle|ÉCOLE", {"run": "run-c"}, [NUL_TURN, ECOLE_TURN]),  # trial names in order: c2, shared
    (r"error", {"role": "assistant", "task": "task2"}, [ERROR_TURN]),
]


def test_regular_expressions_match_alike_on_both_backends(url):
    for pattern, filters, expected in REGEX_CASES:
        assert _search(url, pattern, regex=True, **filters).rows == expected, pattern
    by_trial = _search(url, "error|timed out", regex=True, by="trial")
    assert [(row[1], row[2]) for row in by_trial.rows] == [("task2__a1", 1), ("task1__b0", 1), ("task2__b0", 1)]


def test_a_snippet_is_cut_around_the_regular_expressions_hit(url):
    row = _search(url, r"after \d+\.\d", regex=True).rows[0]
    assert row[6] == TIMEOUT_HIT[6]
    assert search_lib.snippet_within("x" * 80 + " timed out after 540.0 s " + "y" * 80, 30, r"after \d+", regex=True) \
        .startswith("…")


def test_an_invalid_regular_expression_is_one_line(url):
    done = cli(url, "search", "--regex", "(unclosed")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and "regular expression" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_regular_expression_that_backtracks_without_end_is_stopped_at_the_time_limit(db_url, engine, backend):
    """`(x+x+)+y` over 5,000 x's takes Python's re longer than the universe has: SQLite's
    function is stopped at --timeout as a query is. PostgreSQL's engine is not a backtracker
    (it answers at once, or its statement_timeout stops it)."""
    source = writer.ensure_source(engine, "parquet", "/fixture/long", "long")
    with writer.unit(engine, source, "unit-long", "hash-long") as u:
        u.add_trials([Trial(run_key="run-long", trial_name="long__0", task_name="task1", reward=1.0,
                            episodes=[Episode(episode_index=0, turns=[Turn("user", "x" * 5000)])])])
    started = time.monotonic()
    done = cli(db_url, "search", "--regex", "(x+x+)+y", "--timeout", "1")
    took = time.monotonic() - started
    assert took < 15, took
    if backend == "sqlite":
        assert done.returncode == 1 and "time limit" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    else:
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr
