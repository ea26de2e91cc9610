"""The real CLI's command tree, for tests that must cover every command: each command's path
(`("db", "upgrade")`), its help text as declared, and the example lines in it."""

from __future__ import annotations

import re
from functools import lru_cache

import typer

from warehouse.cli import app as app_module

CommandPath = tuple[str, ...]


@lru_cache(maxsize=1)
def commands() -> dict[CommandPath, object]:
    """Every command and group under the root (the root itself as ()), by path."""
    app_module._register()
    root = typer.main.get_command(app_module.app)
    found: dict[CommandPath, object] = {}

    def walk(command, path: CommandPath) -> None:
        found[path] = command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, (*path, name))

    walk(root, ())
    return found


def leaves() -> list[CommandPath]:
    return [path for path, command in commands().items() if not getattr(command, "commands", None)]


def examples(path: CommandPath) -> list[str]:
    """The example command lines in a command's help: the lines after Examples: that run
    `warehouse` (some through a shell: `a && b`, `echo … | warehouse sql -`), a line ending in
    `\\` joined to the next, as a shell joins them."""
    help_text = commands()[path].help or ""
    _, found, block = help_text.partition("Examples:")
    assert found, f"no Examples in the help of `warehouse {' '.join(path)}`"
    lines: list[str] = []
    for line in block.splitlines():
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + line.strip()
        else:
            lines.append(line.strip())
    return [line for line in lines if re.search(r"(^|[|&] *)warehouse ", line)]
