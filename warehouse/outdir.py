"""Writing an export folder: refuse to clobber, replace only what the export writes, and never
leave a half-written export behind.

OUT itself is created, its parent never: a parent that does not exist is refused (as mkdir
without -p, cp or a shell redirection refuse it), so a mistyped path builds no tree, and a
failed export leaves nothing behind, no folder made for it included. `warehouse report` holds
its OUT.html to the same rule (check_parent)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from warehouse.errors import WarehouseError, first_line

STAGING_PREFIX = ".export-"


def check_parent(out: Path) -> None:
    """OUT's parent must be an existing folder (see the module docstring)."""
    parent = out.absolute().parent
    if parent.is_dir():
        return
    if parent.exists():
        raise WarehouseError(f"{out}: {out.parent} is not a directory")
    raise WarehouseError(f"{out}: {out.parent} does not exist (create it first: only OUT itself is created)")


def write_error(out: Path, exc: OSError) -> WarehouseError:
    """An OSError met while writing OUT (a read-only folder, a full disk, a file-size limit) as
    one line naming OUT (the file it happened to is a temporary one: not worth naming)."""
    return WarehouseError(f"{out}: cannot write: {exc.strerror or first_line(exc)}")


def check_out_dir(out: Path, force: bool) -> None:
    """OUT must be missing or an empty folder, unless `force`; its parent must exist."""
    check_parent(out)
    if out.exists() and not out.is_dir():
        raise WarehouseError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise WarehouseError(f"{out}: exists and is not empty (pass --force to replace what the export writes)")


@contextmanager
def staged_output(out: Path, force: bool, replaced: list[str] | None = None) -> Iterator[Path]:
    """An empty staging folder inside OUT to write the export into.

    When the block completes, each top-level entry of the staging folder replaces the entry of
    the same name in OUT (a folder as a whole, so no stale shard of an earlier export survives);
    anything else in OUT is left alone. When the block raises, OUT keeps what it held before, and an OUT it made is gone.
    The staging folder lives inside OUT so that the final moves are renames on one file system.
    `replaced` receives what was in OUT and got replaced, one entry each ("data/ (12 files)")."""
    check_out_dir(out, force)
    created = not out.exists()
    try:
        out.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    except OSError as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise write_error(out, exc) from None
    try:
        yield staging
        for entry in sorted(staging.iterdir()):
            target = out / entry.name
            if replaced is not None and (target.exists() or target.is_symlink()):
                replaced.append(_describe(target))
            _remove(target)
            entry.rename(target)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        if isinstance(exc, OSError):
            raise write_error(out, exc) from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _describe(path: Path) -> str:
    if path.is_dir() and not path.is_symlink():
        n = sum(1 for p in path.rglob("*") if not p.is_dir())
        return f"{path.name}/ ({n} file{'' if n == 1 else 's'})"
    return path.name


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
