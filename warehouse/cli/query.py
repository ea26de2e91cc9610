"""`warehouse query list` and `warehouse query NAME`: one command per canned query, generated
from the catalog so each one's --help lists its own parameters."""

from __future__ import annotations

import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from warehouse.cli.app import app
from warehouse.cli.context import state
from warehouse.cli.filtering import filter_parameters, filters_from
from warehouse.cli.output import Format, FormatOption, WideOption, echo_err, write_rows
from warehouse.cli.shared import choice_list
from warehouse.errors import ArgumentValueError, WarehouseError
from warehouse.lake import ENGINES
from warehouse.queries import QUERIES, CannedQuery, IntList, Param
from warehouse.readonly import DEFAULT_TIMEOUT
from warehouse.runs import RUN_NAME_COLUMNS, run_names, with_run_names

Engine = Enum("Engine", {name: name for name in ENGINES}, type=str)

query_app = typer.Typer(no_args_is_help=True, help="""Canned cross-run queries: `warehouse query list` shows them.

    Each takes --run, --task, --model, --agent, --label, --since and --until to narrow it, and
    --lake OUT [--engine duckdb|spark] to answer from a lake instead of the database.

    Examples:

    \b
      warehouse query list
      warehouse query runs
      warehouse query pass-rate --task 'fix-*' --by model
      warehouse export tables lake && warehouse query pass-rate --lake lake
    """)
app.add_typer(query_app, name="query")

# Each canned query's --help ends with these (real commands: tests run them on the sample).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "runs": ("warehouse query runs", "warehouse query runs --threshold 0.5 --wide",
             "warehouse query runs --format csv > runs.csv"),
    "pass-rate": ("warehouse query pass-rate", "warehouse query pass-rate --by model --run 9f8c2915",
                  "warehouse query pass-rate --by label:step --format json",
                  "warehouse query pass-rate --errors exclude"),
    "leaderboard": ("warehouse query leaderboard", "warehouse query leaderboard --by model --adjust bh",
                    "warehouse query leaderboard --baseline 9f8c2915 --format json"),
    "solve-matrix": ("warehouse query solve-matrix", "warehouse query solve-matrix --unsolved",
                     "warehouse query solve-matrix --solved-by-all --format csv"),
    "pass-at-k": ("warehouse query pass-at-k --k 1,3", "warehouse query pass-at-k --k 1,2,3 --per-task",
                  "warehouse query pass-at-k --k 1 --threshold 0.5 --format jsonl",
                  "warehouse query pass-at-k --k 1,5 --by label:step"),
    "compare": ("warehouse query compare 9f8c2915 b421acf4",
                "warehouse query compare 9f8c2915 b421acf4 --flipped --task 'fix-*'"),
    "compare-test": ("warehouse query compare-test 9f8c2915 b421acf4",
                     "warehouse query compare-test 9f8c2915 b421acf4 --tasks",
                     "warehouse query compare-test 9f8c2915 b421acf4 --confidence 0.9 --seed 1",
                     "warehouse query compare-test 9f8c2915 b421acf4 --errors exclude"),
    "failures": ("warehouse query failures", "warehouse query failures --format csv"),
    "lengths": ("warehouse query lengths", "warehouse query lengths --format json"),
    "costs": ("warehouse query costs", "warehouse query costs --by model --format csv",
              "warehouse query costs --by label:step --run 9f8c2915 --format json"),
    "sources": ("warehouse query sources", "warehouse query sources --run 9f8c2915 --format json"),
    "loads": ("warehouse query loads", "warehouse query loads sample --format csv"),
    "power": ("warehouse query power --delta 0.05", "warehouse query power --delta 0.1 --attempts 5 --tasks 89",
              "warehouse query power --by model --power 0.9 --format json"),
}


def examples_help(lines: tuple[str, ...]) -> str:
    """An Examples block for a --help: `\\b` keeps its lines as they are."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


TimeoutOption = Annotated[float, typer.Option("--timeout", help="Stop the query after this many seconds.")]
LakeOption = Annotated[Optional[Path], typer.Option(
    "--lake", metavar="OUT", show_default=False,
    help="Answer from this lake (a folder `export tables` or `lake sync` wrote) instead of the database.")]
EngineOption = Annotated[Engine, typer.Option("--engine", help="What reads the lake: duckdb (in-process) or "
                                              "spark (local mode; needs pyspark and Java 17).")]

@query_app.command("list")
def list_queries(fmt: FormatOption = Format.table, wide: WideOption = False) -> None:
    """List the canned queries and their parameters.

    Examples:

    \b
      warehouse query list
      warehouse query list --format json
    """
    write_rows(["name", "description", "params"],
               [(q.name, q.summary, " ".join(p.name.upper() if p.positional else p.option for p in q.params))
                for q in QUERIES.values()], fmt, wide=wide)


def param_option(param: Param) -> Any:
    """A (non-positional) parameter's Typer option, as an annotation: what every command taking
    the parameter declares (the report takes pass-rate's --by, --errors and --metric)."""
    if param.type is bool:
        return Annotated[bool, typer.Option(param.option, help=param.help)]
    if param.choices and not param.by_label:
        return Annotated[Enum(param.name, {c: c for c in param.choices}, type=str),
                         typer.Option(param.option, help=param.help)]
    # IntList is written as text ("1,5,10") and parsed by Param.convert.
    annotation: Any = str if param.type is IntList else param.type
    if param.default is None:
        annotation = Optional[annotation]
    return Annotated[annotation, typer.Option(param.option, help=param.help,
                                              metavar=choice_list(param.allowed) if param.by_label else None)]


def _option(param: Param) -> inspect.Parameter:
    """The Typer option for one parameter, as a keyword of the generated command."""
    if param.positional:
        # `compare A B`; the option spelling (--a) is _alias's.
        return inspect.Parameter(param.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[Optional[str], typer.Argument(
                                     help=param.help, metavar=param.name.upper(), show_default=False)])
    # A required parameter's default is `...`, so leaving it out is a usage error (exit 2).
    default = ... if param.required else param.default
    return inspect.Parameter(param.name, inspect.Parameter.KEYWORD_ONLY, annotation=param_option(param),
                             default=default)


def _alias(param: Param) -> inspect.Parameter:
    """A positional parameter's option spelling (--a RUN), kept for scripts written before."""
    return inspect.Parameter(f"{param.name}_option", inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[str], typer.Option(param.option, hidden=True)])


# The columns a query exists for, which a table fitting the terminal leaves out last (never).
_KEEP = {"compare-test": ("verdict", "kind"), "compare": ("flip",), "leaderboard": ("pass_rate", "tied_with_best", "verdict")}
# Columns other than run_key that hold run keys, and where a table names those runs.
_RUNS_IN = {"compare-test": {"a": "a_name", "b": "b_name"}}


def _target(ctx: typer.Context, lake: Path | None, engine: Engine) -> Any:
    """What answers: the database (--db), or the lake --lake names, read by --engine."""
    if lake is None:
        return state(ctx).warehouse
    if state(ctx).db_typed:
        raise WarehouseError("--lake and --db name two places to answer from: give one")
    from warehouse.api import open_lake

    return open_lake(lake, engine.value)


def register(query: CannedQuery, group: typer.Typer = query_app, examples: tuple[str, ...] | None = None,
             *, callback: bool = False) -> None:
    """`query`'s command on `group` (`warehouse query NAME`, or a top-level command); with
    `callback`, the command `group` itself runs when no command of it is named."""
    positional = [p for p in query.params if p.positional]

    def command(ctx: typer.Context, format: Format, wide: bool, timeout: float, lake: Path | None, engine: Engine,
                **values: Any) -> None:
        if ctx.invoked_subcommand is not None:
            return
        filters = filters_from(values)
        for param in positional:
            given, option = values[param.name], values.pop(f"{param.name}_option")
            if given is not None and option is not None and given != option:
                raise typer.BadParameter(f"{param.name.upper()} given twice ({given!r}, {param.option} {option!r})")
            values[param.name] = given if given is not None else option
            if values[param.name] is None and param.required:
                raise typer.BadParameter(f"missing {param.name.upper()} (or {param.option})")
        try:
            query.values(values)  # a value the option's type lets through but the query refuses
        except ArgumentValueError:
            raise  # a value outside its range: one line, as --confidence's and --timeout's
        except WarehouseError as exc:
            raise typer.BadParameter(str(exc)) from None
        target = _target(ctx, lake, engine)
        result = target.query(query.name, timeout=timeout, **filters.keywords(), **values)
        where = target if lake is not None else target.url  # what run_names and the footnote read
        columns, rows = result.columns, result.rows
        if format is Format.table:  # runs by name as well as key, for people (CSV and JSON stay as they are)
            columns, rows = with_run_names(columns, rows, lambda: run_names(where, timeout),
                                           {**RUN_NAME_COLUMNS, **_RUNS_IN.get(query.name, {})})
        write_rows(columns, rows, format, wide=wide, keep=_KEEP.get(query.name, ()))
        for line in (result.note or "").splitlines():
            echo_err(f"note: {line}", wrap=True)
        if query.footnote is not None and format is Format.table:
            # On stderr, so that it reaches the reader however stdout is redirected.
            echo_err(query.footnote(where, values, filters, timeout), wrap=True)

    command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        *(_option(p) for p in query.params),
        *(_alias(p) for p in positional),
        *filter_parameters(),
        inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, annotation=FormatOption, default=Format.table),
        inspect.Parameter("wide", inspect.Parameter.KEYWORD_ONLY, annotation=WideOption, default=False),
        inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, annotation=TimeoutOption,
                          default=DEFAULT_TIMEOUT),
        inspect.Parameter("lake", inspect.Parameter.KEYWORD_ONLY, annotation=LakeOption, default=None),
        inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, annotation=EngineOption, default=Engine.duckdb),
    ])
    shown = EXAMPLES.get(query.name, ()) if examples is None else examples
    help_text = inspect.cleandoc(query.description) + "\n\n" + examples_help(shown)
    if callback:
        group.callback(invoke_without_command=True, help=help_text, short_help=query.summary)(command)
    else:
        group.command(query.name, help=help_text, short_help=query.summary)(command)


for _query in QUERIES.values():
    register(_query)
