"""Statements a team member could aim at `warehouse sql` to write, reach past the warehouse's
tables, or outlast its limits: the attack corpus tests/test_sql_attacks.py runs each through the
real CLI.

Each case is (sql, outcome, backends). Outcomes:
- "refused": exit 1 with one line `Error: …` on stderr and nothing on stdout.
- "bounded": exit 0 or 1 (a refusal or the time limit) within the time limit and a margin, with
  at most a small output.
- "harmless": exit 0: the statement is one query that only reads (a quote trick that fools a
  splitter but not the grammar), and its output is checked for nothing else.
Placeholders: {tmp} a scratch folder that must stay empty, {pid} the backend of a second session
of the same role that must stay alive, {lock} the ingest writer's advisory lock key.

SIZED (`warehouse sql` with options of its own: fetch size and row cap) and WHERE (`export hub
--where`) are run the same way, each with its own outcome.
"""

from __future__ import annotations

BOTH = ("sqlite", "postgresql")
PG = ("postgresql",)
SQLITE = ("sqlite",)

CASES: list[tuple[str, str, tuple[str, ...]]] = [
    # --- a second statement, hidden from a hand-written splitter -------------------------------
    ("EXPLAIN SELECT 1 AS x$q$; COMMIT; TRUNCATE runs, loads, messages CASCADE; EXPLAIN SELECT 1 AS y$q$", "refused", PG),
    ("EXPLAIN SELECT 1 AS x$q$; COMMIT; TRUNCATE runs CASCADE; EXPLAIN SELECT 1 AS y$q$", "refused", PG),
    ("EXPLAIN SELECT 1 /* /* */ ' */; COMMIT; UPDATE trials SET reward = 0; SELECT 1 /* ' */", "refused", PG),
    ("SELECT 1 /* /* */ ' */; COMMIT; UPDATE trials SET reward = 0; SELECT 1 /* ' */", "refused", PG),
    ("SHOW search_path; COMMIT; DELETE FROM conflicts", "refused", PG),
    ("SELECT $a$ $$ ; $a$; COMMIT; DELETE FROM runs", "refused", PG),
    ("SELECT E'\\'; COMMIT; DELETE FROM runs; --' AS s", "harmless", PG),  # one E'' string
    ("SELECT 1 AS [x]; DELETE FROM runs; SELECT ']'", "refused", BOTH),
    ("SELECT 1; DELETE FROM trials", "refused", BOTH),
    ("SELECT 1 /* ; */; DELETE FROM runs", "refused", BOTH),
    ("SELECT 1 -- \n; DELETE FROM runs", "refused", BOTH),
    ("SELECT 1; COMMIT", "refused", BOTH),
    ("SELECT (1 -- )", "refused", BOTH),  # a syntax error at the end of the input, which has no position
    ("SELECT FROM trials", "refused", BOTH),  # PostgreSQL's rows of no columns (a traceback once)
    ("SELECT FROM trials WHERE 1 = 0", "refused", PG),
    ("SELECT 'a'';DELETE FROM runs;--' AS s", "harmless", BOTH),
    ("SELECT $$;DELETE FROM runs;$$ AS s", "harmless", PG),
    ("SELECT /* /* */ ; DELETE FROM runs; */ 1 AS s", "harmless", PG),
    ("SELECT \"a;DELETE FROM runs\" FROM (SELECT 1 AS \"a;DELETE FROM runs\") q", "harmless", BOTH),
    # --- transaction control and settings -------------------------------------------------------
    ("COMMIT", "refused", BOTH),
    ("ROLLBACK", "refused", BOTH),
    ("BEGIN", "refused", BOTH),
    ("BEGIN IMMEDIATE", "refused", SQLITE),
    ("SAVEPOINT a", "refused", BOTH),
    ("START TRANSACTION READ WRITE", "refused", PG),
    ("SET TRANSACTION READ WRITE", "refused", PG),
    ("SET statement_timeout = 0", "refused", PG),
    ("RESET ROLE", "refused", PG),
    ("SET ROLE NONE", "refused", PG),
    ("SET SESSION AUTHORIZATION DEFAULT", "refused", PG),
    ("SELECT set_config('role', session_user, true)", "refused", PG),
    ("SELECT set_config('transaction_read_only', 'off', true)", "refused", PG),
    ("SELECT pg_catalog.set_config('statement_timeout', '0', false)", "refused", PG),
    ("DISCARD ALL", "refused", PG),
    ("PRAGMA query_only = 0", "refused", SQLITE),
    ("PRAGMA writable_schema = 1", "refused", SQLITE),
    ("PRAGMA journal_mode = DELETE", "refused", SQLITE),
    # --- writes, DDL, commands ------------------------------------------------------------------
    ("TRUNCATE runs CASCADE", "refused", PG),
    ("DELETE FROM runs", "refused", BOTH),
    ("UPDATE trials SET reward = 0", "refused", BOTH),
    ("INSERT INTO runs (run_key) VALUES ('sneaky')", "refused", BOTH),
    ("DROP TABLE trials", "refused", BOTH),
    ("CREATE TEMP TABLE scratch AS SELECT 1", "refused", BOTH),
    ("CREATE TEMP VIEW v AS SELECT 1", "refused", BOTH),
    ("SELECT * INTO scratch FROM runs", "refused", PG),
    ("WITH x AS (DELETE FROM trials RETURNING 1) SELECT count(*) FROM x", "refused", BOTH),
    ("WITH x AS (UPDATE trials SET reward = 0 RETURNING 1) SELECT count(*) FROM x", "refused", PG),
    ("EXPLAIN ANALYZE DELETE FROM trials", "refused", PG),
    ("EXPLAIN DELETE FROM trials", "refused", BOTH),
    ("SELECT * FROM trials FOR UPDATE", "refused", PG),
    ("SELECT * FROM trials FOR SHARE NOWAIT", "refused", PG),
    ("DO $$BEGIN DELETE FROM runs; END$$", "refused", PG),
    ("CALL nothing()", "refused", PG),
    ("PREPARE p AS DELETE FROM runs", "refused", PG),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", "refused", PG),
    ("GRANT ALL ON runs TO PUBLIC", "refused", PG),
    ("CREATE ROLE sneaky SUPERUSER", "refused", PG),
    ("VACUUM", "refused", BOTH),
    ("VACUUM INTO '{tmp}/copy.db'", "refused", SQLITE),
    ("ANALYZE", "refused", BOTH),
    ("REINDEX", "refused", SQLITE),
    ("CHECKPOINT", "refused", PG),
    ("NOTIFY warehouse", "refused", PG),
    ("ATTACH DATABASE '{tmp}/elsewhere.db' AS other", "refused", SQLITE),
    # --- files, programs, large objects ---------------------------------------------------------
    ("COPY (SELECT 1) TO PROGRAM 'id > {tmp}/out.txt'", "refused", PG),
    ("COPY runs TO '{tmp}/runs.csv'", "refused", PG),
    ("SELECT pg_read_file('/etc/passwd')", "refused", PG),
    ("SELECT pg_catalog.pg_read_binary_file('/etc/passwd')", "refused", PG),
    ("SELECT ('/etc/passwd'::text).pg_read_file", "refused", PG),
    ("SELECT \"pg_read_file\"('/etc/passwd')", "refused", PG),
    ("SELECT * FROM pg_ls_dir('.')", "refused", PG),
    ("SELECT pg_stat_file('postgresql.conf')", "refused", PG),
    ("SELECT lo_import('/etc/passwd')", "refused", PG),
    ("SELECT lo_export(1, '{tmp}/lo.bin')", "refused", PG),
    ("SELECT lo_from_bytea(0, 'x')", "refused", PG),
    ("SELECT query_to_xml('COPY (SELECT 1) TO PROGRAM ''id > {tmp}/xml.txt''', true, true, '')", "refused", PG),
    ("SELECT query_to_xml('SELECT set_config(''role'', session_user, true)', true, true, '')", "refused", PG),
    ("SELECT load_extension('/tmp/evil')", "refused", SQLITE),
    ("SELECT writefile('{tmp}/w.txt', 'x')", "refused", SQLITE),
    ("SELECT readfile('/etc/passwd')", "refused", SQLITE),
    # --- the server, other sessions, WAL, locks, sequences --------------------------------------
    ("SELECT pg_reload_conf()", "refused", PG),
    ("SELECT pg_switch_wal()", "refused", PG),
    ("SELECT pg_stat_reset()", "refused", PG),
    ("SELECT pg_rotate_logfile()", "refused", PG),
    ("SELECT pg_terminate_backend({pid})", "refused", PG),
    ("SELECT pg_cancel_backend({pid})", "refused", PG),
    ("SELECT ({pid}).pg_terminate_backend", "refused", PG),
    ("SELECT pg_logical_emit_message(false, 'x', repeat('x', 50000000))", "refused", PG),
    ("LOCK TABLE trials IN ACCESS EXCLUSIVE MODE", "refused", PG),
    ("SELECT pg_advisory_lock({lock}), pg_sleep(20)", "refused", PG),
    ("SELECT pg_try_advisory_xact_lock({lock})", "refused", PG),
    ("SELECT pg_advisory_lock_shared({lock})", "refused", PG),
    ("SELECT pg_notify('warehouse', 'x')", "refused", PG),
    ("SELECT nextval('trials_id_seq')", "refused", PG),
    ("SELECT setval('trials_id_seq', 1)", "refused", PG),
    ("SELECT txid_current()", "refused", PG),
    # --- resource bombs: refused, or stopped by the time limit ----------------------------------
    ("SELECT randomblob(3e8), randomblob(3e8), randomblob(3e8)", "refused", SQLITE),
    ("SELECT length(randomblob(1e9))", "refused", SQLITE),
    ("SELECT zeroblob(1000000000)", "refused", SQLITE),
    # printf past SQLite's length limit gives up building the text: NULL, or "string or blob too
    # big" (seen both ways); either way bounded in time and memory.
    ("SELECT length(printf('%.*c', 1000000000, 'x'))", "bounded", SQLITE),
    ("SELECT length(repeat('x', 1000000000))", "bounded", PG),
    ("SELECT repeat('x', 50000000) AS big", "refused", PG),  # -f csv: over the cell limit
    ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c", "bounded", BOTH),
    ("SELECT count(*) FROM generate_series(1, 1000000000000)", "bounded", PG),
    ("SELECT pg_sleep(30)", "bounded", PG),
    ("/* /* */ */ SELECT g, repeat('x', 60) FROM generate_series(1, 10000000) g", "bounded", PG),
    ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n, printf('%60d', n) FROM c",
     "bounded", SQLITE),
]

# --- rows larger than the caps, or many of them, when few are wanted ---------------------------
# (sql, extra options, outcome, backends). The memory bound (1 GB) is asserted for each: before
# the fetch size followed --max-rows, one wanted row of these fetched 500 (2.6 to 2.8 GB).
SIZED: list[tuple[str, tuple[str, ...], str, tuple[str, ...]]] = [
    ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 300) SELECT randomblob(9000000) AS b FROM c",
     ("--max-rows", "1"), "bounded", SQLITE),
    ("SELECT repeat('x', 9000000) AS b FROM generate_series(1, 300)", ("--max-rows", "1"), "bounded", PG),
    ("SELECT randomblob(9000000) a, randomblob(9000000) b, randomblob(9000000) c", ("--max-row-bytes", "20000000"),
     "refused", SQLITE),
    ("SELECT repeat('x', 9000000) a, repeat('y', 9000000) b, repeat('z', 9000000) c", ("--max-row-bytes", "20000000"),
     "refused", PG),
    ("SELECT repeat('x', 20000000) AS big", ("--max-row-bytes", "1000"), "refused", PG),
    # the server's memory beyond work_mem: bounded by the time limit (README, "Ad-hoc SQL")
    ("WITH RECURSIVE c(n) AS (SELECT 1 UNION SELECT n + 1 FROM c) SELECT count(*) FROM c", (), "bounded", BOTH),
    ("SELECT array_length(array_agg(g), 1) FROM (SELECT generate_series(1, 1000000000) g) s", (), "bounded", PG),
    ("SELECT count(*) FROM (SELECT md5(g::text) m FROM generate_series(1, 100000000) g ORDER BY 1 OFFSET 0) q",
     (), "bounded", PG),
]

# --- `export hub OUT --where PREDICATE` ---------------------------------------------------------
# (predicate, outcome, backends, roles). Outcomes as above, and "empty": exit 0 with no row
# picked (the predicate could not see what it probed). Roles: the PostgreSQL URLs it applies to.
# {secret}: text a second session of the connecting user has just run.
ANY_ROLE = ("owner", "superuser", "ordinary")
WHERE: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("pg_sleep(60) IS NOT NULL", "refused", PG, ANY_ROLE),
    ("(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c) > 0",
     "refused", BOTH, ANY_ROLE),
    ("(WITH RECURSIVE c(n) AS (SELECT 1 UNION SELECT n + 1 FROM c) SELECT count(*) FROM c) > 0",
     "refused", BOTH, ANY_ROLE),
    # other sessions' query text and superuser-only settings, one guess at a time
    ("EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%{secret}%')", "empty", PG, ("superuser",)),
    ("current_setting('data_directory') LIKE '/%'", "refused", PG, ANY_ROLE),
    ("(SELECT count(*) FROM pg_authid) > 0", "refused", PG, ANY_ROLE),
    ("length(randomblob(1000000000)) > 0", "refused", SQLITE, ANY_ROLE),
    ("length(repeat('x', 1000000000)) > 0", "bounded", PG, ANY_ROLE),
    ("pg_terminate_backend({pid})", "refused", PG, ANY_ROLE),
]
