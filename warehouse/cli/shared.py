"""What every command shares, attached once to the whole command tree (by the root group, see
cli/app.py) rather than declared command by command:

- `--db` wherever it is given: before the subcommand, after it, or between a group and its
  command (`warehouse db --db x.db current`). The innermost one given wins (so an alias holding
  `warehouse --db team.db` can still be pointed elsewhere); WAREHOUSE_DB applies when none is.
- Help rendered the same on every Typer the pyproject allows: Click's plain layout, which rewraps
  a docstring's paragraphs and keeps a paragraph starting with `\\b` verbatim (the Examples
  blocks); flags as flags (`-k, --keep-going`), values as a metavar (`--run NAME`), arguments as
  `SOURCES...`. Typer's own renderers differ by version (`<bool>` and `{sources}...` markers on
  0.29, escaped `\\[required]` on 0.15), so each parameter's help line is built here from the
  attributes every version has. A value's metavar says what the value is, the same for an option
  wherever it appears (METAVARS); a group lists each command with its whole summary.
"""

from __future__ import annotations

import copy
from enum import Enum
from types import MethodType
from typing import Any

# Set on a command once it is prepared, so the tree is walked once whatever resolves it.
_PREPARED = "_warehouse_prepared"


def prepare(command: Any, db_option: Any, *, root: bool = False) -> None:
    """Give `command` and every command under it the shared --db option (unless it is the root,
    which declares the original) and the shared help rendering. Idempotent."""
    if getattr(command, _PREPARED, False):
        return
    setattr(command, _PREPARED, True)
    command.rich_markup_mode = None  # Click's layout, not Typer's rich panels
    if not root and command.short_help is None and command.help:
        # Click would cut the summary to what fits beside the name ("Bring the schema up to
        # REVISION (default: the newest),..."): given as short help, it is shown whole, wrapped.
        command.short_help = summary(command.help)
    if not root and not any(p.name == "db" for p in command.params):
        command.params.append(_inner_db(db_option))
    for param in command.params:
        param.get_help_record = MethodType(_help_record, param)
        if param.param_type_name == "argument":
            param.get_usage_pieces = MethodType(lambda self, ctx: [_metavar(self)], param)
    for sub in getattr(command, "commands", {}).values():
        prepare(sub, db_option)


def _inner_db(root_option: Any) -> Any:
    """The root's --db option, copied (so it is the right class for this Typer), storing what it
    is given into the root's State instead of passing it to the command."""
    option = copy.copy(root_option)
    option.envvar = None  # the variable is read once, by the root: an inner --db is only typed
    option.show_envvar = False
    option.expose_value = False
    option.is_eager = False
    option.callback = _store_db
    option.help = "The database, as for `warehouse --db` (given here, this one wins)."
    return option


def _store_db(ctx: Any, param: Any, value: str | None) -> str | None:
    from warehouse.cli.context import State

    state = ctx.find_root().obj
    if value is not None and isinstance(state, State):
        state.db, state.db_typed = value, True
    return value


def summary(help_text: str) -> str:
    """A command's summary: the first paragraph of its help, on one line."""
    return " ".join(help_text.strip().split("\n\n")[0].split())


# --- help lines -------------------------------------------------------------------------------

# What stands for each option's value, wherever the option appears (so --timeout is SECONDS in
# every command's help): what the value is, never the parameter's name in the code (filter_run)
# nor its type. An option of choices shows them instead (choice_list); one whose value is a
# choice or a pattern (--by run|model|…|label:KEY) declares that list as its own metavar.
# tests/test_help.py checks every command's options against these rules.
METAVARS = {
    "--db": "URL",
    "--against": "OTHER",
    # what to read: the filters, and the names a command takes
    "--run": "RUN",
    "--task": "TASK",
    "--model": "MODEL",
    "--agent": "AGENT",
    "--label": "KEY=VALUE",
    "--since": "WHEN",
    "--until": "WHEN",
    "--remove": "KEY",
    "--source": "SOURCE",
    "--trace": "SOURCE",
    "--role": "ROLE",
    "--episode": "N",
    "--turns": "A:B",
    "--where": "PREDICATE",
    "--param": "NAME VALUE",
    # how a query counts and tests
    "--threshold": "REWARD",
    "--metric": "KEY",
    "--baseline": "GROUP",
    "--k": "K,…",
    "--confidence": "LEVEL",
    "--resamples": "N",
    "--seed": "N",
    "--delta": "DIFF",
    "--attempts": "N",
    "--tasks": "N",
    "--power": "CHANCE",
    "--rho": "CORRELATION",
    # limits
    "--timeout": "SECONDS",
    "--limit": "N",
    "--max-rows": "N",
    "--max-cell-bytes": "BYTES",
    "--max-row-bytes": "BYTES",
    # where to write, where to listen
    "--card-root": "DIR",
    "--host": "ADDRESS",
    "--port": "PORT",
}


def choice_list(choices) -> str:
    """The metavar of a value that is one of `choices`: `[table|csv|json]`."""
    return "[" + "|".join(choices) + "]"


def _choices(param: Any) -> list[str]:
    choices = getattr(getattr(param, "type", None), "choices", None)  # Click's Choice type
    if choices is None:  # Typer 0.29 keeps them on its own type descriptor
        choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    return [str(getattr(c, "value", c)) for c in choices or ()]


def _metavar(param: Any) -> str:
    """What stands for the value: the declared metavar, else the choices, else the option's in
    METAVARS, else (an argument's) the name in capitals; an argument's shows whether it is
    optional and repeatable."""
    known = [METAVARS[o] for o in getattr(param, "opts", ()) if o in METAVARS]
    if param.metavar:
        text = param.metavar
    elif choices := _choices(param):
        text = choice_list(choices)
    elif known:
        text = known[0]
    else:
        text = param.name.upper()
    if param.param_type_name == "argument":
        if param.nargs != 1 and not text.endswith("..."):
            text += "..."
        if not param.required:
            text = f"[{text}]"
    return text


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def _default(param: Any) -> str | None:
    show = getattr(param, "show_default", None)
    value = param.default
    if not show or value is None or callable(value) or _is_flag(param) or value == ():
        return None
    if isinstance(show, str):
        return show
    if isinstance(value, (list, tuple)):
        return ", ".join(str(getattr(v, "value", v)) for v in value)
    return str(value.value if isinstance(value, Enum) else value)


def _range(param: Any) -> str | None:
    low = getattr(param, "min", None)
    high = getattr(param, "max", None)
    if low is None and high is None:  # Click keeps a range on the type
        kind = getattr(param, "type", None)
        low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    if low is None and high is None:
        return None
    if high is None:
        return f"x>={low}"
    return f"x<={high}" if low is None else f"{low}<=x<={high}"


def _help_record(param: Any, ctx: Any) -> tuple[str, str] | None:
    if getattr(param, "hidden", False):
        return None
    if param.param_type_name == "argument":
        names = _metavar(param)
    else:
        names = ", ".join(sorted(param.opts, key=lambda o: o.startswith("--")))
        if param.secondary_opts:
            names += " / " + ", ".join(param.secondary_opts)
        if not _is_flag(param):
            names += " " + _metavar(param)
    extra = []
    if getattr(param, "show_envvar", False) and param.envvar:
        extra.append(f"env var: {param.envvar}")
    if (default := _default(param)) is not None:
        extra.append(f"default: {default}")
    if (limits := _range(param)) is not None:
        extra.append(limits)
    if param.required and param.param_type_name == "argument":
        extra.append("required")
    help_text = " ".join((param.help or "").split())
    if extra:
        help_text = f"{help_text}  [{'; '.join(extra)}]".strip()
    return names, help_text
