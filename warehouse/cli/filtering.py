"""The options that narrow what a command reads (warehouse.filters), declared once: every command
that selects trials takes them through `narrowed`, so --run, --task, --model, --agent, --label,
--since and --until mean the same, read the same and show the same help everywhere."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from warehouse.errors import ArgumentValueError, WarehouseError
from warehouse.filters import WHEN_FORMS, Filters

_Many = Optional[list[str]]
_One = Optional[str]

# (keyword of Filters.of, option, the value's type, help), in the order help shows them.
FILTER_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("run", "--run", _Many, "Only this run: its key, a unique prefix of it, or its name. Repeatable."),
    ("task", "--task", _Many, "Only tasks matching this glob (* and ?). Repeatable."),
    ("model", "--model", _Many, "Only this model (with or without its provider; glob). Repeatable."),
    ("agent", "--agent", _Many, "Only this agent (glob). Repeatable."),
    ("label", "--label", _Many, "Only runs with this label. Repeatable: all must hold."),
    ("since", "--since", _One, f"Only trials started at or after WHEN: {WHEN_FORMS}."),
    ("until", "--until", _One, "Only trials started before WHEN (a date alone: through that day)."),
)
KEYWORDS = tuple(keyword for keyword, *_ in FILTER_OPTIONS)

def filter_parameters() -> list[inspect.Parameter]:
    """The filter options as keyword parameters of a command, named `filter_<keyword>` so as not
    to meet the command's own."""
    return [inspect.Parameter(f"filter_{keyword}", inspect.Parameter.KEYWORD_ONLY, default=None,
                              annotation=Annotated[kind, typer.Option(option, help=help)])
            for keyword, option, kind, help in FILTER_OPTIONS]


def filters_from(values: dict[str, Any]) -> Filters:
    """The Filters the filter options were given, taking them out of a command's `values`. A
    value they refuse (a label without `=`, a date that is none) is a usage error."""
    given = {keyword: values.pop(f"filter_{keyword}") for keyword in KEYWORDS}
    try:
        return Filters.of(**given)
    except ArgumentValueError:
        raise
    except WarehouseError as exc:
        raise typer.BadParameter(str(exc)) from None


def narrowed(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with the filter options, which it receives as one `filters: Filters` keyword:
    they stand where that parameter is declared (so its --help lists them there)."""
    # Its annotations evaluated (they are text under `from __future__ import annotations`): Typer
    # reads a given signature as it is.
    signature = inspect.signature(command, eval_str=True)
    own = list(signature.parameters.values())
    at = [p.name for p in own].index("filters")
    # Keyword-only from the filters on, so that the command's later parameters may follow them.
    later = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at + 1:]]

    @functools.wraps(command)
    def run(*args: Any, **values: Any) -> Any:
        return command(*args, filters=filters_from(values), **values)

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own[:at], *filter_parameters(), *later])
    return run
