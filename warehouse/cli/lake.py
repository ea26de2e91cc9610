"""`warehouse lake sync OUT`"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from warehouse.cli.app import app as root
from warehouse.cli.context import state

app = typer.Typer(no_args_is_help=True, help="""Keep a lake of Parquet files current with the warehouse.

    Examples:

    \b
      warehouse lake sync lake
    """)
root.add_typer(app, name="lake")


@app.command()
def sync(
    ctx: typer.Context,
    out: Annotated[str, typer.Argument(
        metavar="OUT", help="The lake: a folder (made if missing; its parent must exist), a file:// URL, or another "
        "URL pyarrow can write (s3://…, gs://…).")],
    full: Annotated[bool, typer.Option(
        "--full", help="Write every table anew, whatever changed (dropping the texts deletes left behind).")] = False,
    iceberg: Annotated[str | None, typer.Option(
        "--iceberg", metavar="CATALOG", help="Publish the lake's tables to this Iceberg SQL catalog too: a SQLite file "
        "or a PostgreSQL URL (as --db takes them). Once given, every later sync of OUT needs it.")] = None,
    iceberg_namespace: Annotated[str | None, typer.Option(
        "--iceberg-namespace", metavar="NAME", help="The catalog's namespace for the lake's tables (with "
        "--iceberg; default: warehouse).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what the sync did as one JSON object.")] = False,
) -> None:
    """Write what changed since the last sync into OUT, as `export tables` lays it out.

    The first sync writes every table; later ones write only the runs that are new or changed
    (their files anew), drop deleted runs' files, append new message texts and ledger units,
    and rewrite the small shared tables. OUT/manifest.json lists the lake's files (table, run,
    rows, bytes, SHA-256, loads) and is replaced atomically once they are all written: a reader
    that takes its files never sees half a sync, and a killed sync leaves the last one whole.

    With --iceberg, each table is also an Iceberg table in that catalog (namespace `warehouse`)
    over the same files, committed after the manifest: Spark, Trino, Athena, BigQuery and DuckDB
    read it as a table, without listing folders.

    Examples:

    \b
      warehouse lake sync lake
      warehouse lake sync lake --json
      warehouse lake sync lake --iceberg lake-catalog.db
    """
    from warehouse.lake.sync import Catalog, sync_lake  # pyarrow: imported by the command that uses it

    catalog = Catalog.named(iceberg, iceberg_namespace, spelled=("--iceberg", "--iceberg-namespace"))
    engine = state(ctx).read_engine()
    info = sync_lake(engine, out, full=full, iceberg=catalog)
    if as_json:
        typer.echo(json.dumps(info.to_dict()))
    typer.echo(info.line(), err=True)
