"""What a SOURCE argument names: a rows file (Parquet, a JSON list, JSON Lines, gzip-compressed
JSON), a Hub-snapshot-shaped folder, a Hub id, a Harbor trace directory, or a lone ATIF
`trajectory.json`, resolved to local files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.errors import WarehouseError, first_line
from warehouse.hub_columns import GZIP_SUFFIX, JSON_LINES_SUFFIXES, JSON_LIST_SUFFIXES, PARQUET_SUFFIX, \
    json_rows_kind, rows_stem

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
    labels: dict[str, str] = field(default_factory=dict)  # the run labels its card declares


def resolve(spec: str) -> Source:
    """The source a spec names, its card read: a card that cannot be (nested too deeply) fails
    the source here, before any unit of it is written."""
    source = _resolve(spec)
    source.labels = card_labels(source.card, source.root / "README.md")
    return source


def _resolve(spec: str) -> Source:
    path = Path(spec).expanduser()
    if path.exists():
        return _local(path.resolve())
    match = HUB_ID.match(spec)
    if match and not spec.startswith((".", "/")):
        return _hub(match.group("repo"), match.group("rev"))
    raise WarehouseError(f"{spec}: no such file or directory (and not a Hub dataset id org/name[@revision])")


# An ATIF trajectory given on its own (not in a trial folder's agent/): a trial of its own
# (ingest.read.traces reads it).
TRAJECTORY = "trajectory.json"


def _local(path: Path) -> Source:
    if path.is_file():
        if path.name == TRAJECTORY:
            return _trajectory(path)
        if not is_rows_file(path):
            raise WarehouseError(f"{path}: not a rows file (.parquet, .json, .jsonl, .ndjson, .jsonl.gz), "
                                 f"an ATIF {TRAJECTORY} or a directory")
        root = path.parent.parent if path.parent.name == "data" else path.parent
        name = _dataset_name(root) if path.parent.name == "data" else rows_stem(path.name)
        return Source(kind="parquet", uri=str(path), name=name, root=path.parent, shards=[path])
    shards = parquet_shards(path)
    if shards:
        cache = HF_CACHE_SNAPSHOT.search(str(path))
        _inside_dataset(path, shards)
        return Source(kind="parquet", uri=str(path), name=_dataset_name(path), root=path, shards=shards,
                      revision=cache.group("rev") if cache else None, card=_card(path))
    return Source(kind="traces", uri=str(path), name=path.name, root=path)


def _trajectory(path: Path) -> Source:
    """A trial folder's agent/trajectory.json stands for its trial (as a step folder does);
    any other trajectory.json is a trial of its own, its siblings (`trajectory.cont-1.json`,
    `trajectory.summarization-*.json`) read as a trial's agent/ folder's are. Its run, and its
    trial's name, are its folder's (Harbor names a trial without a job's run after the trial)."""
    from ingest.read import traces

    trial = path.parent.parent
    if path.parent.name == "agent" and traces.is_trial_dir(trial):
        return _local(trial)
    return Source(kind="traces", uri=str(path), name=path.parent.name, root=path)


def is_rows_file(path: Path) -> bool:
    return path.name.lower().endswith(PARQUET_SUFFIX) or json_rows_kind(path.name) is not None


_ROW_SUFFIXES = (PARQUET_SUFFIX, *JSON_LINES_SUFFIXES, *JSON_LIST_SUFFIXES)


def parquet_shards(folder: Path) -> list[Path]:
    """The dataset's rows files: `data/*` (the Hub layout), else those directly in the folder,
    in name order. Parquet, JSON Lines and JSON lists (also gzip-compressed), beside or instead
    of each other, as the Hub's loaders take them. Directly in a folder a `.json` file is rows
    only when it holds a list: a Harbor job or trial folder keeps its own `.json` objects there."""
    for candidate in (folder / "data", folder):
        if candidate.is_dir():
            found = sorted(p for p in candidate.iterdir() if _is_shard(p, top=candidate == folder))
            if found:
                return found
    return []


def _is_shard(path: Path, top: bool) -> bool:
    name = path.name.lower()
    if not name.removesuffix(GZIP_SUFFIX).endswith(_ROW_SUFFIXES) or (name.endswith(PARQUET_SUFFIX + GZIP_SUFFIX)):
        return False
    if not path.is_file():
        return False
    if top and json_rows_kind(name) == "list":
        return name != TRAJECTORY and _starts_a_list(path)
    return True


def _starts_a_list(path: Path) -> bool:
    """Whether a (possibly gzip-compressed) JSON file's first character, past whitespace and a
    byte-order mark, opens a list."""
    import gzip

    try:
        with (gzip.open(path, "rb") if path.name.lower().endswith(GZIP_SUFFIX) else path.open("rb")) as fh:
            head = fh.read(4096)
    except (OSError, EOFError):
        return True  # a list file that cannot be read is reported when it is read
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"[")


def _inside_dataset(folder: Path, shards: list[Path]) -> None:
    """A dataset folder's shards and card are read where they lie inside it, so that a link
    cannot make an ingest store (and `export hub` publish) a file from elsewhere on the machine.
    A snapshot in huggingface_hub's cache is the exception the cache's own layout makes: its
    files are links into the dataset's `blobs/`, so there the dataset's whole cache folder
    (`datasets--org--name/`) is the tree."""
    cache = HF_CACHE_SNAPSHOT.search(str(folder))
    tree = Path(str(folder)[:cache.start()]) / f"datasets--{cache.group('org')}--{cache.group('name')}" \
        if cache else folder
    for path in [*shards, folder / "README.md"]:
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(tree):
                raise WarehouseError(f"{path}: symbolic link to {target}, outside the dataset folder ({tree}): "
                                     f"not read")


def _dataset_name(folder: Path) -> str:
    cache = HF_CACHE_SNAPSHOT.search(str(folder))
    if cache:
        return f"{cache.group('org')}/{cache.group('name')}"
    return folder.name


CARD_CHARS = 65536  # of a dataset card kept, and read (at most 4 bytes of UTF-8 each)


def _card(folder: Path) -> dict | None:
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    try:
        with readme.open("rb") as fh:
            head = fh.read(4 * CARD_CHARS)
    except OSError as exc:
        raise WarehouseError(f"{readme}: cannot read: {exc.strerror or exc}") from None
    return {"readme": head.decode("utf-8", errors="replace")[:CARD_CHARS]}


# The dataset card's YAML front matter: `---` lines around it, at the very top.
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)
CARD_LABEL_KEYS = ("warehouse_labels", "labels")
# YAML front matter nested deeper than this fails its source: PyYAML builds nodes recursively (a
# few frames a level), and would end the whole ingest in a RecursionError near 300 levels.
MAX_CARD_DEPTH = 100


def card_labels(card: dict | None, where: Path | str = "README.md") -> dict[str, str]:
    """Run labels a dataset card declares: a `warehouse_labels:` (or `labels:`) mapping in its
    YAML front matter, scalar values as text (`step: 13` is "13"). Hub cards carry no
    standard field for a checkpoint or sweep, so nothing else is guessed at; a card whose front
    matter does not parse declares none (it is documentation, not data). Front matter nested
    more than MAX_CARD_DEPTH deep is a WarehouseError naming the card (`where`)."""
    match = _FRONT_MATTER.match((card or {}).get("readme") or "")
    if not match:
        return {}
    import yaml  # only needed for a card

    try:
        meta = yaml.load(match.group(1), Loader=_card_loader())
    except _TooDeep:
        raise WarehouseError(f"{where}: YAML front matter nested more than {MAX_CARD_DEPTH} levels deep") from None
    except yaml.YAMLError:
        return {}
    for key in CARD_LABEL_KEYS:
        found = meta.get(key) if isinstance(meta, dict) else None
        if isinstance(found, dict):
            return {str(k): _label_text(v) for k, v in found.items()
                    if isinstance(v, (str, int, float, bool)) and str(k).strip()}
    return {}


class _TooDeep(Exception):
    pass


def _card_loader() -> type:
    """yaml.SafeLoader that counts how deep the node it composes is, and stops past MAX_CARD_DEPTH
    (its other stages, the parser's and the constructor's, keep stacks of their own)."""
    import yaml

    class CardLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_CARD_DEPTH:
                    raise _TooDeep
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return CardLoader


def _label_text(value: str | int | float | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


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
            allow_patterns=["README.md", *(f"{folder}*{suffix}" for folder in ("data/", "")
                                             for suffix in (*_ROW_SUFFIXES, *(s + GZIP_SUFFIX for s in _ROW_SUFFIXES[1:])))],
            token=os.environ.get("HF_TOKEN") or None,
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, OSError, ValueError) as exc:
        raise WarehouseError(f"{repo}: cannot fetch the dataset from the Hub ({first_line(exc)})") from None
    root = Path(local)
    shards = parquet_shards(root)
    if not shards:
        raise WarehouseError(f"{repo}: the dataset has no Parquet or JSON rows files under data/")
    cache = HF_CACHE_SNAPSHOT.search(str(root))
    _inside_dataset(root, shards)
    return Source(kind="hub", uri=repo, name=repo, root=root, shards=shards,
                  revision=cache.group("rev") if cache else revision, card=_card(root))
