"""Which files make a lake.

A lake is laid out as `export tables` writes it (warehouse.export_tables):
`OUT/<table>/run_id=<runs.id>/*.parquet` for the run-scoped tables, `OUT/<table>/*.parquet` for
the shared ones. A lake written by `lake sync` also has OUT/manifest.json, and then its files are
the manifest's alone: a sync writes its new files before the manifest that names them, and
removes the files the last manifest named only after it, so a reader that globbed could see half
a sync.
"""

from __future__ import annotations

import json
from pathlib import Path

from warehouse.errors import WarehouseError

MANIFEST = "manifest.json"
FORMAT = "trajectory-warehouse-lake"


def read_manifest(out: Path) -> dict | None:
    """The lake's manifest, or None for a folder `export tables` wrote."""
    path = Path(out) / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise WarehouseError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_manifest(text, str(path))


def parse_manifest(text: str, where: str) -> dict:
    """A manifest's JSON text, checked to be a lake's (`where` names it in the error)."""
    try:
        manifest = json.loads(text)
    except ValueError as e:
        raise WarehouseError(f"{where}: not a lake manifest: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise WarehouseError(f"{where}: not a lake manifest (no \"format\": \"{FORMAT}\")")
    return manifest


def table_files(out: str | Path) -> dict[str, list[Path]]:
    """Each table's Parquet files, sorted: the manifest's, else those in the table's folder."""
    out = Path(out)
    if not out.is_dir():
        raise WarehouseError(f"{out}: no such lake folder")
    manifest = read_manifest(out)
    files: dict[str, list[Path]] = {}
    if manifest is not None:
        for entry in manifest.get("files", []):
            files.setdefault(entry["table"], []).append(out / entry["path"])
    else:
        for folder in sorted(p for p in out.iterdir() if p.is_dir()):
            found = sorted(folder.glob("*.parquet")) + sorted(folder.glob("*/*.parquet"))
            if found:
                files[folder.name] = found
    if not files:
        raise WarehouseError(f"{out}: not a lake (no manifest.json and no table folders of Parquet files)")
    return {table: sorted(paths) for table, paths in sorted(files.items())}
