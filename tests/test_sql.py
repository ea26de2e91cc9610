"""`warehouse sql`: read-only by construction on both backends, with a time limit, a row cap,
parameters, stdin, and the output formats. Run through the real CLI in a subprocess."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest
from sqlalchemy import text

import query_fixture
from query_fixture import cli
from warehouse.errors import WarehouseError
from warehouse.readonly import run_readonly
from warehouse.sqlcheck import ONLY_QUERIES

TRIALS = 22  # in tests/query_fixture.py


@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


def trial_count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM trials")).scalar()


def assert_refused(url, engine, sql: str) -> str:
    done = cli(url, "sql", sql)
    assert done.returncode == 1, (sql, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), (sql, done.stderr)
    assert done.stdout == ""
    assert trial_count(engine) == TRIALS
    return lines[0]


WRITES = [
    "DELETE FROM trials",
    "INSERT INTO runs (run_key) VALUES ('sneaky')",
    "UPDATE trials SET reward = 0",
    "DROP TABLE trials",
    "CREATE TABLE scratch (x INTEGER)",
    "SELECT 1; DELETE FROM trials",
    "DELETE FROM trials; SELECT 1",
]


@pytest.mark.parametrize("sql", WRITES)
def test_writes_are_refused(url, engine, backend, sql):
    message = assert_refused(url, engine, sql)
    if ";" in sql:
        # SQLite compiles the first statement before it looks past it: a write is refused first.
        assert "one statement at a time" in message or (backend == "sqlite" and "read-only" in message)
    else:
        assert "read-only" in message


@pytest.mark.parametrize("sql, word", [
    ("VACUUM", "VACUUM"), ("ANALYZE", "ANALYZE"), ("  /* a comment */ create temp table t (x int)", "CREATE"),
    ("DELETE FROM trials", "DELETE"), ("REINDEX", "REINDEX"),
])
def test_a_refusal_names_the_statement_written(url, engine, backend, sql, word):
    """Not what SQLite's authorizer saw it do (VACUUM attaches, ANALYZE and CREATE TEMP insert
    into a schema table): the statement the user wrote, as PostgreSQL's grammar names it."""
    if backend == "postgresql" and word == "REINDEX":
        sql = "REINDEX TABLE trials"
    assert assert_refused(url, engine, sql) == f"Error: read-only: {word} is not allowed; {ONLY_QUERIES}"


@pytest.mark.parametrize("sql", [
    "ATTACH DATABASE '{tmp}/elsewhere.db' AS other",
    "PRAGMA journal_mode=DELETE",
    "PRAGMA user_version=5",
    "PRAGMA query_only=0",
    "VACUUM INTO '{tmp}/copy.db'",
    "BEGIN",
])
@pytest.mark.parametrize("backend", ["sqlite"])  # overrides conftest's both-backends fixture
def test_sqlite_specific_writes_are_refused(url, engine, sql, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert "read-only" in assert_refused(url, engine, sql.format(tmp=scratch))
    assert list(scratch.iterdir()) == []  # no file attached or written
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA user_version").scalar() == 0


@pytest.mark.parametrize("sql", [
    "WITH x AS (DELETE FROM trials RETURNING *) SELECT * FROM x",
    "SELECT nextval('trials_id_seq')",
    "SELECT * FROM trials FOR UPDATE",
])
@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgres_specific_writes_are_refused(url, engine, sql):
    assert "read-only" in assert_refused(url, engine, sql)


def test_time_limit(url):
    """The limit holds for the whole command: a long statement, and a long output."""
    slow = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
            "SELECT count(*) FROM c")
    started = time.monotonic()
    done = cli(url, "sql", "--timeout", "1", slow)
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: the query ran longer than the time limit (1 s; see --timeout)"
    assert time.monotonic() - started < 15
    endless = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c"
    printing = cli(url, "sql", "--timeout", "1", "--max-rows", "100000000", endless)
    assert printing.returncode == 1 and printing.stderr.strip().endswith("(1 s; see --timeout)")


def test_row_cap(url):
    done = cli(url, "sql", "--max-rows", "5", "--format", "csv", "SELECT trial_name FROM trials ORDER BY id")
    assert done.returncode == 0
    assert len(list(csv.reader(io.StringIO(done.stdout)))) == 1 + 5
    assert "stopped at 5 rows" in done.stderr
    exact = cli(url, "sql", "--max-rows", str(TRIALS), "--format", "csv", "SELECT trial_name FROM trials")
    assert len(exact.stdout.splitlines()) == 1 + TRIALS and exact.stderr == ""


def test_parameters_and_stdin(url):
    done = cli(url, "sql", "-p", "run", "run-b", "-p", "t", "0.5", "--format", "json",
               "SELECT count(*) AS n FROM trials tr JOIN runs r ON r.id = tr.run_id "
               "WHERE r.run_key = :run AND tr.reward >= CAST(:t AS REAL)")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"n": 2}]
    piped = cli(url, "sql", "-", "--format", "jsonl",
                stdin="-- a comment; with a semicolon\nSELECT run_key FROM runs ORDER BY run_key;\n")
    assert piped.returncode == 0, piped.stderr
    assert [json.loads(line) for line in piped.stdout.splitlines()] == [
        {"run_key": "run-a"}, {"run_key": "run-b"}, {"run_key": "run-c"}]
    missing = cli(url, "sql", "SELECT :nope")
    assert missing.returncode == 1 and missing.stderr.startswith("Error: no value for :nope")
    escaped = cli(url, "sql", "--format", "csv", "SELECT 'at \\:noon' AS t")
    assert escaped.stdout.splitlines() == ["t", "at :noon"]


def test_output_formats(url):
    sql = "SELECT run_key, count(*) AS trials FROM trial_summary GROUP BY run_key ORDER BY run_key"
    expected = [{"run_key": "run-a", "trials": 11}, {"run_key": "run-b", "trials": 9}, {"run_key": "run-c", "trials": 2}]
    as_json = cli(url, "sql", "--format", "json", sql)
    assert json.loads(as_json.stdout) == expected
    as_jsonl = cli(url, "sql", "--format", "jsonl", sql)
    assert [json.loads(line) for line in as_jsonl.stdout.splitlines()] == expected
    as_csv = cli(url, "sql", "--format", "csv", sql)
    assert list(csv.DictReader(io.StringIO(as_csv.stdout))) == [
        {k: str(v) for k, v in row.items()} for row in expected]
    table = cli(url, "sql", sql)
    assert table.returncode == 0 and "run-b" in table.stdout
    empty = cli(url, "sql", "--format", "json", "SELECT run_key FROM runs WHERE 1 = 0")
    assert json.loads(empty.stdout) == []


def test_table_output_prints_text_not_markup(url):
    table = cli(url, "sql", "SELECT '[bold]x[/bold] arr[i]' AS t")
    assert table.returncode == 0 and "[bold]x[/bold] arr[i]" in table.stdout


def test_usage_and_database_errors(url):
    assert cli(url, "sql", "--format", "xml", "SELECT 1").returncode == 2
    bad = cli(url, "sql", "SELEC 1")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: database error:")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_library_read_path(url, engine):
    result = run_readonly(url, "SELECT trial_name FROM trials ORDER BY trial_name", max_rows=3)
    assert result.columns == ["trial_name"] and len(result.rows) == 3 and result.truncated
    with pytest.raises(WarehouseError, match="read-only"):
        run_readonly(url, "DELETE FROM trials")
    with pytest.raises(WarehouseError, match="no SQL statement"):
        run_readonly(url, "  -- nothing\n ; ")
    assert trial_count(engine) == TRIALS


ESCAPES = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m \x9b2J"


def test_terminal_escapes_are_made_visible(url, engine, tmp_path):
    """Stored text with escape sequences: shown visibly in a table, exact in CSV to a pipe; an
    error message and an ingest error naming such a file hold no raw control character."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE messages SET content = :c WHERE content = 'done'"), {"c": ESCAPES})
    sql = "SELECT DISTINCT content FROM messages WHERE content LIKE '%pwned%'"
    table = cli(url, "sql", sql)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout and "\x9b" not in table.stdout
    assert "␛]0;pwned␇␛[31mred" in table.stdout and "<U+009B>2J" in table.stdout
    exact = cli(url, "sql", "-f", "csv", sql)
    assert exact.stdout.splitlines()[1] == ESCAPES
    as_json = cli(url, "sql", "-f", "json", sql)
    assert json.loads(as_json.stdout) == [{"content": ESCAPES}]

    error = cli(url, "sql", 'SELECT * FROM "\x1b[31mnope"')
    assert error.returncode == 1 and "\x1b" not in error.stderr and "␛[31mnope" in error.stderr

    bad = tmp_path / "bad\x1b]0;pwned\x07.parquet"
    bad.write_bytes(b"not parquet")
    ingest = cli(url, "ingest", str(bad))
    assert ingest.returncode == 1 and "not a readable Parquet file" in ingest.stderr
    assert "\x1b" not in ingest.stderr and "\x07" not in ingest.stderr and "␛]0;pwned␇" in ingest.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e10", "forever"])
def test_time_limit_must_be_a_finite_positive_number(url, value):
    done = cli(url, "sql", "--timeout", value, "SELECT 1")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "--timeout" in done.stderr
    with pytest.raises(WarehouseError, match="time limit"):
        run_readonly(url, "SELECT 1", timeout=float(value) if value != "forever" else -1)


def test_cell_limit(url):
    """A value over --max-cell-bytes: cut with a note in a table, refused (nothing written) in
    CSV and JSON, printed whole when the limit is raised."""
    big = ("SELECT replace(substr(quote(zeroblob(3000)), 3, 6000), '0', 'y') AS big"
           if url.startswith("sqlite") else "SELECT repeat('y', 6000) AS big")
    table = cli(url, "sql", "--max-cell-bytes", "1000", big)
    assert table.returncode == 0, table.stderr
    assert table.stdout.replace("bytes", "").count("y") == 1000 and "… (cut: 6,000 bytes" in table.stdout
    for fmt in ("csv", "json", "jsonl"):
        refused = cli(url, "sql", "-f", fmt, "--max-cell-bytes", "1000", big)
        assert refused.returncode == 1 and refused.stdout == "", refused.stdout[:100]
        # SQLite refuses to build the value at all; PostgreSQL's arrives and is refused.
        assert refused.stderr.strip() in (
            "Error: row 1, column big: a value of 6,000 bytes is over the cell limit (1,000 bytes): "
            "raise --max-cell-bytes, or cut it in SQL (substr)",
            "Error: a value would be larger than 1,000 bytes, more than this command reads: "
            "raise --max-cell-bytes (max_value_bytes in the API), or cut it in SQL (substr, fewer columns)")
    whole = cli(url, "sql", "-f", "csv", "--max-cell-bytes", "7000", big)  # SQLite builds 6,003 on the way
    assert whole.stdout.splitlines() == ["big", "y" * 6000]


@pytest.mark.parametrize("option", ["--max-rows", "--max-cell-bytes", "--max-row-bytes"])
def test_a_limit_is_any_whole_number_up_to_the_largest(url, option):
    """The largest 64-bit integer is a limit like any other (none of the database's own limits,
    a C int on SQLite, is given more than it takes); one more is refused naming the option."""
    largest = str(2**63 - 1)
    for fmt in ("table", "csv"):
        done = cli(url, "sql", "-f", fmt, option, largest, "SELECT 1 AS x")
        assert done.returncode == 0 and done.stdout.split() in (["x", "─", "1"], ["x", "1"]), done.stderr
    over = cli(url, "sql", option, str(2**63), "SELECT 1")
    assert over.returncode == 2 and f"Invalid value for '{option}'" in over.stderr and "Traceback" not in over.stderr
    if option == "--max-rows":
        searched = cli(url, "search", "x", "--limit", str(2**63))
        assert searched.returncode == 2 and "Invalid value for '--limit'" in searched.stderr


def test_table_streams_rows_at_one_width(url):
    """The table prints every row under the row cap, one line each, at the sampled widths."""
    rows = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 300) "
            "SELECT n, substr('abcdefghij', 1, n % 10) AS s FROM c")
    done = cli(url, "sql", "--max-rows", "250", rows)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["n", "s"] and len(lines) == 2 + 250
    assert lines[-1] == "250" and lines[-2] == "249  abcdefghi"
    assert "stopped at 250 rows" in done.stderr
