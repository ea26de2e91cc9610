"""`warehouse serve`: the read-only web viewer (warehouse.serve)."""

from __future__ import annotations

from typing import Annotated

import typer

from warehouse.arguments import MAX_INT
from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import echo_err

PAGE_TIMEOUT = 10.0  # seconds a page's reads may take: a viewer waits less than a script
PAGE_ROWS = 10_000  # rows a canned query's page shows


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(
        "--host",
        help="The address to listen on. Another than 127.0.0.1 lets others reach the viewer: said when it starts.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="The port (0: any free one, printed).")] = 8765,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the viewer in a web browser.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Stop a page's reads after this many seconds.")] = PAGE_TIMEOUT,
    max_rows: Annotated[int, typer.Option(
        "--max-rows", min=1, max=MAX_INT, help="Show at most this many rows of a canned query.")] = PAGE_ROWS,
) -> None:
    """Browse the warehouse in a web browser: runs, trials, trajectories, diffs, queries, search.

    Read-only, as every read command: nothing in the database is written, on any storage. Every
    page has a stable URL to share; a trial's turn N is its #turn-N. Ctrl-C stops it.

    Examples:

    \b
      warehouse serve --open
      warehouse serve --db team.db --port 9000
      warehouse serve --host 0.0.0.0
    """
    from warehouse.readonly import check_timeout
    from warehouse.serve.pages import Viewer
    from warehouse.serve.server import serve as run_server  # Flask: only for this command

    check_timeout(timeout)
    warehouse = state(ctx).warehouse
    warehouse.read_engine()  # the schema checked (a missing warehouse said) before listening
    viewer = Viewer(warehouse.url, timeout=timeout, max_rows=max_rows)
    run_server(viewer, host=host, port=port, title=warehouse.name, open_browser=open_browser,
               warn=lambda line: echo_err(line, wrap=True))
