"""`warehouse search TEXT` and `warehouse index build|drop` (the optional trigram index)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from warehouse import search as search_lib
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import Format, FormatOption, write_rows
from warehouse.db.engine import redact
from warehouse.readonly import DEFAULT_TIMEOUT


@app.command("search")
def search(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The text to find (a substring; ASCII letters match either case).")],
    run: Annotated[Optional[str], typer.Option("--run", help="Only this run: its key, a unique prefix of it, or its name.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="Only this task.")] = None,
    role: Annotated[Optional[str], typer.Option(
        "--role", help="Only turns with this role (user, assistant, …); `verifier` for verifier output only.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Print at most this many hits.")] = 50,
    fmt: FormatOption = Format.table,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop the search after this many seconds.")] = DEFAULT_TIMEOUT,
) -> None:
    """Find TEXT in turn texts and verifier output: one row per turn, with a snippet.

    A turn that later episodes of the same trial repeat is listed once, at the first episode holding it. `warehouse index build` makes searches of 3+ characters faster; the hits are the same with or without it."""
    if not text:
        raise typer.BadParameter("must not be empty", param_hint="TEXT")
    engine = state(ctx).read_engine()
    result = search_lib.search(engine.url, text, run=run, task=task, role=role, limit=limit, timeout=timeout)
    if result.note:
        typer.echo(f"note: {result.note}", err=True)
    write_rows(result.columns, result.rows, fmt)
    if result.truncated:
        typer.echo(f"(stopped at {limit} hits: there are more; raise --limit or narrow the search)", err=True)


index_app = typer.Typer(no_args_is_help=True, help="The optional trigram index that speeds up `warehouse search`.")
app.add_typer(index_app, name="index")


@index_app.command("build")
def build(ctx: typer.Context) -> None:
    """Create the search index, or bring it up to date; safe to run again.

    SQLite: an FTS5 trigram table over the messages. Ingests do not update it (that would make them several times slower): searches scan the messages that arrived since, and running this again indexes them.

    PostgreSQL: the pg_trgm extension and a GIN trigram index on messages.content, which PostgreSQL keeps current itself (ingests get slower)."""
    st = state(ctx)
    engine = st.write_engine()
    search_lib.build_index(engine)
    typer.echo(f"{redact(st.url)}: search index ready", err=True)


@index_app.command("drop")
def drop(ctx: typer.Context) -> None:
    """Remove the search index (searches then scan the messages)."""
    st = state(ctx)
    engine = st.write_engine()
    search_lib.drop_index(engine)
    typer.echo(f"{redact(st.url)}: search index dropped", err=True)
