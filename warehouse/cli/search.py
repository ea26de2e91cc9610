"""`warehouse search TEXT` and `warehouse index build|drop` (the optional trigram index)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from warehouse import search as search_lib
from warehouse.arguments import MAX_INT
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.filtering import narrowed
from warehouse.cli.output import Format, FormatOption, WideOption, echo_err, write_rows
from warehouse.db.engine import redact
from warehouse.filters import Filters
from warehouse.readonly import DEFAULT_TIMEOUT
from warehouse.runs import run_names, with_run_names


class SearchBy(str, Enum):
    turn = "turn"
    trial = "trial"


@app.command("search")
@narrowed
def search(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(
        help="The text to find (a substring, or with --regex a regular expression; ASCII letters match "
        "either case).")],
    filters: Filters = Filters(),
    role: Annotated[Optional[str], typer.Option(
        "--role", help="Only turns with this role (user, assistant, …); `verifier` for verifier output only, "
        "`exception` for exception messages only.")] = None,
    by: Annotated[SearchBy, typer.Option(
        "--by", help="A row per hit (turn), or per trial with its hits counted and its first hit (trial).")] = SearchBy.turn,
    regex: Annotated[bool, typer.Option(
        "--regex", help="TEXT is a regular expression: PostgreSQL's own (POSIX), or on SQLite Python's re "
        "dialect.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_INT,
                                       help="Print at most this many hits (with --by trial: trials).")] = 50,
    fmt: FormatOption = Format.table,
    wide: WideOption = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Stop the search after this many seconds.")] = DEFAULT_TIMEOUT,
) -> None:
    """Find TEXT in turn texts, verifier output and exception messages, with a snippet.

    One row per turn: a turn that later episodes of the same trial repeat is listed once, at the
    first episode holding it; a trial's verifier output and exception message after its turns.
    --by trial gives one row per trial, its hits counted. `warehouse index build` makes
    searches of 3+ characters faster; the hits are the same with or without it. --regex takes
    a regular expression, held to --timeout as a query is.

    Examples:

    \b
      warehouse search "Traceback" --limit 5
      warehouse search error --role verifier --task install-regex
      warehouse search "timed out" --role exception --by trial
      warehouse search "rate limit" --since 7d --model 'claude-*'
      warehouse search "def main" --format jsonl
      warehouse search --regex "timed? ?out after [0-9]+" --by trial
    """
    if not text:
        raise typer.BadParameter("must not be empty", param_hint="TEXT")
    wh = state(ctx).warehouse
    result = wh.search(text, **filters.keywords(), role=role, limit=limit, by=by.value, regex=regex,
                       timeout=timeout)
    if result.note:
        echo_err(f"note: {result.note}", wrap=True)
    columns, rows = result.columns, result.rows
    if fmt is Format.table:  # runs by name as well as key, for people (CSV and JSON stay as they are)
        columns, rows = with_run_names(columns, rows, lambda: run_names(wh.url, timeout))
    # The snippet is what a search is for: a narrow table keeps it, cut around the hit.
    write_rows(columns, rows, fmt, wide=wide, keep=("snippet",),
               shorten={"snippet": lambda snippet, width: search_lib.snippet_within(snippet, width, text, regex=regex)})
    if result.truncated:
        what = "trials" if by is SearchBy.trial else "hits"
        echo_err(f"(stopped at {limit} {what}: there are more; raise --limit or narrow the search)", wrap=True)


index_app = typer.Typer(no_args_is_help=True, help="""The optional trigram index that speeds up `warehouse search`.

    Examples:

    \b
      warehouse index build
      warehouse index drop
    """)
app.add_typer(index_app, name="index")


@index_app.command("build")
def build(ctx: typer.Context) -> None:
    """Create the search index, or bring it up to date; safe to run again.

    SQLite: an FTS5 trigram table over the messages. Ingests do not update it (that would make
    them several times slower): searches scan the messages that arrived since, and running this
    again indexes them.

    PostgreSQL: the pg_trgm extension and a GIN trigram index on messages.content, which
    PostgreSQL keeps current itself (ingests get slower).

    Examples:

    \b
      warehouse index build
      warehouse ingest examples/sample && warehouse index build
    """
    st = state(ctx)
    engine = st.write_engine()
    search_lib.build_index(engine)
    typer.echo(f"{redact(st.url)}: search index ready", err=True)


@index_app.command("drop")
def drop(ctx: typer.Context) -> None:
    """Remove the search index (searches then scan the messages).

    Examples:

    \b
      warehouse index drop
    """
    st = state(ctx)
    engine = st.write_engine()
    search_lib.drop_index(engine)
    typer.echo(f"{redact(st.url)}: search index dropped", err=True)
