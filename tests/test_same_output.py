"""One rendering per type: every command that prints what the warehouse holds prints the same
bytes from SQLite and from PostgreSQL, in every format, over the same data.

Both warehouses are filled the same way (query_fixture's runs, a real Harbor job through the
CLI, names and labels), and their load times (provenance, which no two loads share) are set
alike. The only allowed difference is the one the README names: the database's own name
(its path or URL, in a note or a report). The PostgreSQL database's own time zone is set far
from UTC: what is printed must not depend on it."""

from __future__ import annotations

import csv
import io
import json
import re
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import inspect, text

import forked_cli
import query_fixture
from conftest import PG_URL, _fresh_pg, _no_postgres, _pg_admin_conninfo, fresh_warehouse
from warehouse.db.engine import make_engine, resolve_url
from warehouse.queries import QUERIES

JOB = Path(__file__).parent / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
LOADED_AT = datetime(2025, 2, 3, 4, 5, 6, 789012, tzinfo=timezone.utc)
FORMATS = ("table", "csv", "json", "jsonl")


def _fill(url: str) -> None:
    engine = make_engine(resolve_url(url))
    try:
        query_fixture.build(engine)
    finally:
        engine.dispose()
    for args in (["ingest", str(JOB)], ["runs", "rename", "run-a", "ckpt-200"], ["runs", "rename", "run-b", "ckpt-1000"],
                 ["runs", "label", "run-a", "step=200", "lr=3e-4"], ["runs", "label", "run-b", "step=1000"]):
        done = query_fixture.cli(url, *args)
        assert done.returncode == 0, done.stderr
    engine = make_engine(resolve_url(url))
    try:
        with engine.begin() as conn:
            inspector = inspect(conn)
            for table in inspector.get_table_names():
                for column in inspector.get_columns(table):
                    if column["name"] == "created_at" or table == "loads" and column["name"].endswith("ed_at"):
                        conn.execute(text(f"UPDATE {table} SET {column['name']} = :t WHERE {column['name']} IS NOT NULL"),
                                     {"t": LOADED_AT if conn.dialect.name != "sqlite" else
                                      LOADED_AT.replace(tzinfo=None).isoformat(" ")})
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory, request) -> dict[str, str]:
    if not PG_URL:
        _no_postgres("WAREHOUSE_TEST_PG_URL is not set")
    with ExitStack() as stack:
        urls = {"sqlite": stack.enter_context(contextmanager(fresh_warehouse)(
            "sqlite", tmp_path_factory.mktemp("same-sqlite"), request))}
        urls["postgresql"] = stack.enter_context(contextmanager(_fresh_pg)(request.getfixturevalue("pg_template")))
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
            name = urls["postgresql"].rsplit("/", 1)[1]
            admin.execute(f'ALTER DATABASE "{name}" SET timezone TO \'Pacific/Kiritimati\'')
        for url in urls.values():
            _fill(url)
        yield urls


def _commands() -> list[list[str]]:
    out: list[list[str]] = [["runs"], ["runs", "--sort", "name"], ["runs", "--label", "step=200"], ["loads"],
                            ["runs", "--since", "2024-01-01T12:00"]]
    for name, query in QUERIES.items():
        args = ["query", name, *(["ckpt-200", "ckpt-1000"] if any(p.name == "a" for p in query.params) else [])]
        out.append(args)
        if any(p.name == "by" for p in query.params):
            out.append([*args, "--by", "label:step"])
    out += [["query", "pass-rate", "--task", "task*", "--until", "2024-01-01T13:00"],
            ["search", "done"], ["search", "error", "--by", "trial"], ["search", "needle-xyz"],
            ["search", "timed out"], ["search", "--regex", r"timed? out after \d+|^found", "--by", "trial"]]
    return out


def _tables(url: str) -> dict[str, list[str]]:
    """Each table and view (but Alembic's) and its columns, the surrogate ids left out (`id`, and
    the integer `…_id` columns that refer to one)."""
    engine = make_engine(resolve_url(url))
    try:
        inspector = inspect(engine)
        names = inspector.get_table_names() + inspector.get_view_names()
        return {name: [c["name"] for c in inspector.get_columns(name)
                       if not (c["name"] == "id" or c["name"].endswith("_id") and c["type"].python_type is int)]
                for name in sorted(names) if name != "alembic_version"}
    finally:
        engine.dispose()


def _run(url: str, args: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
    done = forked_cli.run(["--db", url, *args], env={"COLUMNS": "200"}, cwd=cwd and str(cwd))
    return done.returncode, _unnamed(url, done.stdout), _unnamed(url, done.stderr)


def _unnamed(url: str, text: str) -> str:
    """The database's name, in its path or URL (a difference the README allows), as <db>."""
    return re.sub(rf"'?\S*{re.escape(url.rsplit('/', 1)[1])}'?", "<db>", text)


def _same(urls: dict[str, str], args: list[str], *, ids: bool = False) -> str:
    """The command's exit code, stdout and stderr, alike from both backends. `ids`: the output
    names a trial's surrogate id (`show`), which the backends number their own way."""
    sqlite, postgres = (_run(urls[b], args) for b in ("sqlite", "postgresql"))
    if ids:
        sqlite, postgres = ((code, re.sub(r"(\(id |\"id\": )\d+", r"\1N", out), err) for code, out, err in (sqlite, postgres))
    if sqlite != postgres:
        lines = [(a, b) for a, b in zip(*("\n".join(map(str, r)).split("\n") for r in (sqlite, postgres))) if a != b]
        first = lines[0] if lines else ("(shorter)", "(longer)")
        pytest.fail(f"`warehouse {' '.join(args)}` differs between the backends:\n"
                    f"  SQLite:     {first[0][:2000]}\n  PostgreSQL: {first[1][:2000]}")
    assert sqlite[0] == 0, sqlite[2]
    return sqlite[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_listing_and_canned_query_prints_the_same_bytes_on_both_backends(warehouses, fmt):
    for args in _commands():
        _same(warehouses, [*args, "--format", fmt])


@pytest.mark.parametrize("fmt", FORMATS)
def test_sql_prints_every_table_and_view_the_same_on_both_backends(warehouses, fmt):
    """Every column but the surrogate ids, which each backend numbers its own way (PostgreSQL
    reserves them in blocks, and a sequence never gives a number back): the README names them
    as a difference. Without the ids no order is common to both, so rows are compared as a set."""
    tables = _tables(warehouses["sqlite"])
    assert tables == _tables(warehouses["postgresql"])
    shown = 0
    for table, columns in tables.items():
        if not columns:  # (conversations: ids alone)
            continue
        sql = f"SELECT {', '.join(columns)} FROM {table}"
        outs = [_run(warehouses[b], ["sql", sql, "--format", fmt, "--max-rows", "100000"]) for b in warehouses]
        assert outs[0][0] == outs[1][0] == 0 and outs[0][2] == outs[1][2], (table, outs[0][2], outs[1][2])
        sqlite, postgres = (_records(out, fmt) for _, out, _ in outs)
        shown += len(sqlite) > 1
        different = sorted(set(sqlite) ^ set(postgres))
        assert sqlite == postgres, f"{table}: {different[:2]}"
    assert shown > 15


def _records(out: str, fmt: str) -> list[str]:
    """The header, then each row's text, sorted."""
    if fmt == "json":
        rows = [json.dumps(row, ensure_ascii=False) for row in json.loads(out)]
        return [""] + sorted(rows)
    if fmt == "csv":
        header, *rows = csv.reader(io.StringIO(out))
        return [",".join(header)] + sorted(map(repr, rows))
    lines = out.splitlines()
    if fmt == "table":  # columns as wide as their widest value: the same set of rows, the same widths
        return lines[:2] + sorted(lines[2:])
    return [""] + sorted(lines)


def test_timestamps_are_iso_8601_in_utc_with_their_zone(warehouses):
    out = _same(warehouses, ["sql", "SELECT started_at, finished_at, created_at FROM trials "
                             "WHERE started_at IS NOT NULL ORDER BY id LIMIT 3", "--format", "json"])
    for row in json.loads(out):
        assert row["created_at"] == "2025-02-03T04:05:06.789012+00:00"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00", row["started_at"])
    table = _same(warehouses, ["sql", "SELECT created_at FROM runs LIMIT 1"])
    assert "2025-02-03 04:05:06" in table  # a table, for reading: to the second, in UTC


def test_json_columns_print_as_their_values(warehouses):
    out = json.loads(_same(warehouses, ["sql", "SELECT rewards, detail FROM trials WHERE rewards IS NOT NULL "
                                        "ORDER BY id LIMIT 3", "--format", "json"]))
    assert out and all(isinstance(row["rewards"], dict) for row in out)
    csv_out = _same(warehouses, ["sql", "SELECT rewards FROM trials WHERE rewards IS NOT NULL ORDER BY id LIMIT 1",
                                 "--format", "csv"])
    assert json.loads(next(csv.DictReader(io.StringIO(csv_out)))["rewards"]) == out[0]["rewards"]


def test_sums_of_integers_are_integers_and_ratios_floats(warehouses):
    out = json.loads(_same(warehouses, ["sql", "SELECT sum(n_input_tokens) AS s, avg(n_input_tokens) AS a, "
                                        "count(*) AS n FROM trials", "--format", "json"]))
    assert isinstance(out[0]["s"], int) and isinstance(out[0]["n"], int) and isinstance(out[0]["a"], float)
    csv = _same(warehouses, ["sql", "SELECT sum(n_input_tokens) AS s FROM trials", "--format", "csv"])
    assert re.fullmatch(r"s\n\d+\n", csv)


def test_show_prints_a_trial_the_same_on_both_backends(warehouses):
    names = _same(warehouses, ["sql", "SELECT r.run_key || '/' || t.trial_name AS name FROM trials t JOIN runs r "
                               "ON r.id = t.run_id ORDER BY t.id", "--format", "csv"]).split("\n")[1:-1]
    assert len(names) > 20
    for name in names:
        for fmt in ("table", "json"):
            _same(warehouses, ["show", name, "--all", "--no-pager", "--format", fmt], ids=True)


def test_the_report_is_the_same_on_both_backends(warehouses, tmp_path):
    pages = []
    for backend, url in warehouses.items():
        out = tmp_path / f"{backend}.html"
        done = forked_cli.run(["--db", url, "report", str(out)])
        assert done.returncode == 0, done.stderr
        # The database's name and the minute the report was made: the README's allowed differences.
        pages.append(re.sub(r"<p class=meta>[^<]*?( · \d+ runs · )generated [^<]*", r"<p class=meta>\1",
                            out.read_text()))
    assert pages[0] == pages[1]


def test_the_schema_commands_say_the_same_on_both_backends(warehouses):
    for args in (["db", "current"], ["db", "check"]):
        _same(warehouses, args)


def test_export_hub_writes_the_same_files_on_both_backends(warehouses, tmp_path):
    written = []
    for backend, url in warehouses.items():
        (tmp_path / backend).mkdir()
        code, _, err = _run(url, ["export", "hub", "out"], cwd=tmp_path / backend)
        assert code == 0, err
        out = tmp_path / backend / "out"
        files = {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}
        files["README.md"] = _unnamed(url, files["README.md"].decode()).encode()
        written.append(files)
    assert len(written[0]) > 1 and written[0].keys() == written[1].keys()
    for name in written[0]:
        assert written[0][name] == written[1][name], name


def test_the_api_gives_a_declared_columns_values_the_same_python_values(warehouses):
    import warehouse

    got = []
    for url in warehouses.values():
        with warehouse.open(url) as wh:
            got.append(wh.sql("SELECT started_at, rewards FROM trials WHERE rewards IS NOT NULL ORDER BY trial_name").rows)
    assert got[0] == got[1] and got[0]
    started, rewards = got[0][0]
    assert started.tzinfo is not None and started.utcoffset().total_seconds() == 0 and isinstance(rewards, dict)
