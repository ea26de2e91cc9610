"""A command imports only what it needs (issue 17.7): `warehouse --help`, `query runs` and `sql`
run the real CLI in a child process, which then lists every module it imported. How fast that
is belongs to the benchmark (bench/run.py, the start-up rows); what is imported is checked here,
so that a top-level import of the ingest pipeline, pyarrow or the schema's tables in a module a read
command loads fails a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from procs import run_cli
from warehouse.cli import app as app_module

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample"

# Runs the CLI's own main() with the given arguments, in this child process, then writes the
# names of every module imported meanwhile (the interpreter's own start-up included) to a file.
CHILD = """
import json, sys
out, args = sys.argv[1], json.loads(sys.argv[2])
sys.argv = ["warehouse", *args]
from warehouse.cli.app import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code or 0
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""

# Never needed by a read: the ingest pipeline and what only it uses, the schema's tables
# (warehouse.db.models: the ingest, migrations and tests use them), Alembic (the schema check reads alembic_version itself);
# pydantic, which Typer 0.29 and later import and build validators with for every command
# (about 70 ms; pyproject keeps Typer below it); the web viewer and its stack, which only `serve`
# imports; the lake's engines and SQL renderer, which only `query --lake` imports.
NOT_FOR_READS = ("pyarrow", "ingest", "warehouse.db.models", "rich", "alembic", "pandas", "pydantic",
                 "flask", "werkzeug", "jinja2", "warehouse.serve", "warehouse.cli.serve",
                 "duckdb", "pyspark", "py4j", "sqlglot", "warehouse.lake.engines", "warehouse.lake.render")
NOT_FOR_SQLITE = ("psycopg", "pglast", "sqlalchemy.dialects.postgresql")
NOT_FOR_POSTGRES = ("sqlalchemy.dialects.sqlite",)


def imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The child's result, and the modules it had imported when main() returned."""
    out = tmp_path / "modules.json"
    out.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out), json.dumps(args)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    assert report["code"] == 0, proc.stderr
    return proc, report["modules"]


def offending(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


@pytest.fixture
def sample_db(db_url) -> str:
    proc = run_cli(db_url, "ingest", str(SAMPLE))
    assert proc.returncode == 0, proc.stderr
    return db_url


def test_root_help_imports_no_command_and_no_database_library(tmp_path):
    proc, modules = imported(tmp_path, "--help")
    for name in app_module.COMMANDS:
        assert name in proc.stdout
    assert not offending(modules, (*NOT_FOR_READS, *NOT_FOR_SQLITE, "sqlalchemy", "warehouse.cli.query",
                                   "warehouse.cli.ingest", "warehouse.cli.sql", "warehouse.db.engine"))


@pytest.mark.parametrize("args", [("query", "runs"), ("sql", "select 1 AS one")], ids=["query-runs", "sql"])
def test_a_read_imports_only_what_it_needs(sample_db, backend, tmp_path, args):
    proc, modules = imported(tmp_path, "--db", sample_db, *args)
    # The command did its work (a child that failed early would import little).
    if args[0] == "query":
        assert "b421acf4" in proc.stdout  # a run of the sample
    else:
        assert "one" in proc.stdout and "1" in proc.stdout
    assert "sqlalchemy" in modules  # the check itself sees imports
    unwanted = NOT_FOR_READS + (NOT_FOR_SQLITE if backend == "sqlite" else NOT_FOR_POSTGRES)
    if backend == "postgresql" and args[0] == "sql":
        assert "pglast" in modules  # PostgreSQL's parser checks ad-hoc SQL there
    elif backend == "postgresql":
        unwanted += ("pglast",)  # but not the library's own text (a canned query's)
    assert not offending(modules, unwanted)


def test_an_ingest_leaves_arrow_and_the_orm_to_its_reader(empty_db_url, backend, tmp_path):
    """The writer process of a Parquet ingest never imports pyarrow (its reader process, forked
    before the writer imports the rest of itself, reads the shards and says what each is) nor
    SQLAlchemy's ORM (the schema is Core tables): its start-up is the ingest's lead."""
    proc, modules = imported(tmp_path, "--db", empty_db_url, "ingest", str(SAMPLE))
    assert "units: 1 loaded" in proc.stderr and "episodes: 36 new" in proc.stderr
    assert "ingest.write.writer" in modules and "warehouse.db.models" in modules  # it wrote
    assert not offending(modules, ("pyarrow", "numpy", "sqlalchemy.orm", "ingest.read.hub"))


def test_root_help_lists_every_command_with_its_own_short_help():
    """COMMANDS keeps each command's short help as data, so that `--help` imports no command
    module; here every module is imported and the real commands are held to the table."""
    for module, _ in app_module.COMMANDS.values():
        __import__(module)
    commands = typer.main.get_group(app_module.app).commands
    assert set(commands) == set(app_module.COMMANDS)
    for name, (_, short_help) in app_module.COMMANDS.items():
        assert commands[name].get_short_help_str(limit=10_000) == short_help, name


def test_a_mistyped_command_suggests_from_every_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "warehouse", "--db", str(tmp_path / "x.db"), "qurey"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert "No such command 'qurey'" in proc.stderr and "'query'" in proc.stderr


def test_import_warehouse_is_cheap():
    proc = subprocess.run([sys.executable, "-c", "import json, sys, warehouse; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert not offending(json.loads(proc.stdout), (*NOT_FOR_READS, *NOT_FOR_SQLITE, "sqlalchemy", "typer"))
