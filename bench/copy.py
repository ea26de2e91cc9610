"""What moving a warehouse costs (`--only copy`): `warehouse db copy` of math×5, whole process,
beside ingesting the same export into the same kind of database, the two taking turns
(bench.run.time_commands). The copy reads every table of the SQLite warehouse in one snapshot,
writes it (PostgreSQL: one COPY per table) and reads the target back to compare checksums; the
ingest reads the Parquet export and writes it. The issue's bar: comparable times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def results(data: dict[str, Path], work: Path, args) -> list[tuple[str, str, str, str]]:
    from bench.run import _drop_postgres, _fresh_postgres, _remove_sqlite, median, time_commands, warehouse_command

    dataset = data["math-x5"]
    source = work / "copy-source.db"
    _remove_sqlite(source)
    print("  copy: ingest math×5 → SQLite (the source)", file=sys.stderr)
    subprocess.run(warehouse_command("--db", str(source), "ingest", str(dataset)), check=True, capture_output=True)
    target = work / "copy-target.db"
    rows = []

    def sqlite_copy():
        _remove_sqlite(target)
        return warehouse_command("db", "copy", str(source), str(target))

    def sqlite_ingest():  # into a new file, as the copy writes one
        _remove_sqlite(target)
        return warehouse_command("--db", str(target), "ingest", str(dataset))

    times = time_commands({"copy": sqlite_copy, "ingest": sqlite_ingest}, args.repeat)
    copy_s, ingest_s = median(times["copy"]), median(times["ingest"])
    rows.append(("db copy math×5, SQLite → new SQLite file (whole process)", f"{copy_s:.2f} s",
                 f"ingest into SQLite {ingest_s:.2f} s", f"{copy_s / ingest_s:.2f}×"))
    _remove_sqlite(target)
    if args.pg:
        made: list[tuple[str, str]] = []

        def fresh() -> str:
            """An empty database: the copy and the ingest each make the schema, as a user's first would."""
            import psycopg

            engine, name, admin = _fresh_postgres(args.pg)
            url = engine.url.render_as_string(hide_password=False)
            engine.dispose()
            made.append((admin, name))
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
            return url

        try:
            times = time_commands({
                "copy": lambda: warehouse_command("db", "copy", str(source), fresh()),
                "ingest": lambda: warehouse_command("--db", fresh(), "ingest", str(dataset)),
            }, args.repeat)
        finally:
            for admin, name in made:
                _drop_postgres(admin, name)
        copy_s, ingest_s = median(times["copy"]), median(times["ingest"])
        rows.append(("db copy math×5, SQLite → PostgreSQL (whole process)", f"{copy_s:.2f} s",
                     f"ingest into PostgreSQL {ingest_s:.2f} s", f"{copy_s / ingest_s:.2f}×"))
    return rows
