"""What a SOURCE argument names: a Parquet file, a Hub-snapshot-shaped folder, a Hub id, or
a Harbor trace directory, resolved to local files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.errors import WarehouseError, first_line

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
# huggingface_hub's cache lays snapshots out as datasets--org--name/snapshots/<commit>/.
HF_CACHE_SNAPSHOT = re.compile(r"datasets--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[^/]+)/?$")


@dataclass
class Source:
    kind: str  # "parquet" | "hub" | "traces"
    uri: str
    name: str  # the dataset (or trace folder) name: the run of rows that name none
    root: Path
    revision: str | None = None
    shards: list[Path] = field(default_factory=list)
    card: dict | None = None


def resolve(spec: str) -> Source:
    path = Path(spec).expanduser()
    if path.exists():
        return _local(path.resolve())
    match = HUB_ID.match(spec)
    if match and not spec.startswith((".", "/")):
        return _hub(match.group("repo"), match.group("rev"))
    raise WarehouseError(f"{spec}: no such file or directory (and not a Hub dataset id org/name[@revision])")


def _local(path: Path) -> Source:
    if path.is_file():
        if path.suffix != ".parquet":
            raise WarehouseError(f"{path}: not a .parquet file or a directory")
        root = path.parent.parent if path.parent.name == "data" else path.parent
        name = _dataset_name(root) if path.parent.name == "data" else path.stem
        return Source(kind="parquet", uri=str(path), name=name, root=path.parent, shards=[path])
    shards = parquet_shards(path)
    if shards:
        cache = HF_CACHE_SNAPSHOT.search(str(path))
        return Source(kind="parquet", uri=str(path), name=_dataset_name(path), root=path, shards=shards,
                      revision=cache.group("rev") if cache else None, card=_card(path))
    return Source(kind="traces", uri=str(path), name=path.name, root=path)


def parquet_shards(folder: Path) -> list[Path]:
    """`data/*.parquet` (the Hub layout), else `*.parquet` directly in the folder, in name order."""
    for candidate in (folder / "data", folder):
        if candidate.is_dir():
            found = sorted(p for p in candidate.glob("*.parquet") if p.is_file())
            if found:
                return found
    return []


def _dataset_name(folder: Path) -> str:
    cache = HF_CACHE_SNAPSHOT.search(str(folder))
    if cache:
        return f"{cache.group('org')}/{cache.group('name')}"
    return folder.name


def _card(folder: Path) -> dict | None:
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    return {"readme": readme.read_text(encoding="utf-8", errors="replace")[:65536]}


def _hub(repo: str, revision: str | None) -> Source:
    """Download (or reuse from the cache) a dataset snapshot; ingestion reads local files.
    Honours HF_TOKEN and HF_HUB_OFFLINE through huggingface_hub itself."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise WarehouseError(f"huggingface_hub is needed to fetch {repo}: {exc}") from None
    try:
        local = snapshot_download(
            repo_id=repo, repo_type="dataset", revision=revision,
            allow_patterns=["README.md", "data/*.parquet", "*.parquet"],
            token=os.environ.get("HF_TOKEN") or None,
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, OSError, ValueError) as exc:
        raise WarehouseError(f"{repo}: cannot fetch the dataset from the Hub ({first_line(exc)})") from None
    root = Path(local)
    shards = parquet_shards(root)
    if not shards:
        raise WarehouseError(f"{repo}: the dataset has no Parquet files under data/")
    cache = HF_CACHE_SNAPSHOT.search(str(root))
    return Source(kind="hub", uri=repo, name=repo, root=root, shards=shards,
                  revision=cache.group("rev") if cache else revision, card=_card(root))
