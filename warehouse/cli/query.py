"""`warehouse query list` and `warehouse query NAME`: one command per canned query, generated
from the catalog so each one's --help lists its own parameters."""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.output import Format, FormatOption, write_rows
from warehouse.errors import WarehouseError
from warehouse.queries import QUERIES, CannedQuery, IntList, Param
from warehouse.readonly import DEFAULT_TIMEOUT

query_app = typer.Typer(no_args_is_help=True, help="Canned cross-run queries: `warehouse query list` shows them.")
app.add_typer(query_app, name="query")

TimeoutOption = Annotated[float, typer.Option("--timeout", help="Stop the query after this many seconds.")]


@query_app.command("list")
def list_queries(fmt: FormatOption = Format.table) -> None:
    """List the canned queries and their parameters."""
    write_rows(["name", "description", "params"],
               [(q.name, q.summary, " ".join(p.option for p in q.params)) for q in QUERIES.values()], fmt)


def _option(param: Param) -> inspect.Parameter:
    """The Typer option for one parameter, as a keyword of the generated command."""
    if param.type is bool:
        annotation: Any = bool
        option = typer.Option(param.option, help=param.help)
    elif param.choices:
        choices = Enum(param.name, {c: c for c in param.choices}, type=str)
        annotation = choices
        option = typer.Option(param.option, help=param.help)
    else:
        # IntList is written as text ("1,5,10") and parsed by Param.convert.
        annotation = str if param.type is IntList else param.type
        if param.default is None:
            annotation = Optional[annotation]
        option = typer.Option(param.option, help=param.help)
    # A required parameter's default is `...`, so leaving it out is a usage error (exit 2).
    default = ... if param.required else param.default
    return inspect.Parameter(param.name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[annotation, option], default=default)


def _register(query: CannedQuery) -> None:
    def command(ctx: typer.Context, format: Format, timeout: float, **values: Any) -> None:
        try:
            query.values(values)  # a value the option's type lets through but the query refuses
        except WarehouseError as exc:
            raise typer.BadParameter(str(exc)) from None
        result = state(ctx).warehouse.query(query.name, timeout=timeout, **values)
        write_rows(result.columns, result.rows, format)

    command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        *(_option(p) for p in query.params),
        inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, annotation=FormatOption, default=Format.table),
        inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, annotation=TimeoutOption,
                          default=DEFAULT_TIMEOUT),
    ])
    query_app.command(query.name, help=inspect.cleandoc(query.description),
                      short_help=query.summary)(command)


for _query in QUERIES.values():
    _register(_query)
