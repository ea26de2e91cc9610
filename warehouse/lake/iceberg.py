"""The lake as Iceberg tables (`warehouse lake sync OUT --iceberg CATALOG`): each table of the
lake's manifest registered in an Iceberg SQL catalog (a SQLite file or a PostgreSQL database,
through pyiceberg's SqlCatalog) over the very Parquet files the sync wrote, nothing copied, so
that Spark, Trino, Athena, BigQuery, Snowflake and DuckDB read the lake as tables that change
atomically, without listing folders.

How the lake maps:

- One Iceberg table per lake table, `<namespace>.<table>` (namespace `warehouse` unless told),
  format version 2, its metadata under OUT/iceberg/<table>/metadata/. Data file paths are
  absolute URIs (file:///…, s3://…): a lake moved elsewhere is published anew by `--full`.
- The run-scoped tables are partitioned by identity(run_id). Their files do not hold run_id (Hive
  style: the folder says it), and an Iceberg reader takes an identity partition's value from the
  file's partition entry (the spec's rule for a column a data file lacks). The other tables are
  unpartitioned (the per-run summaries hold their run_id).
- The files carry no Iceberg field ids; readers match their columns by name through the table's
  name mapping (`schema.name-mapping.default`), as they do for files added by `add_files`.

Publishing is a diff: each table's current data files against the manifest's, committed as one
Iceberg overwrite (files removed and added) when they differ, with the sync's number in the
snapshot summary and in the table's property `warehouse.lake-sync`. Iceberg commits one table at
a time: a reader that needs every table at one sync checks that property (manifest.json stays the
one thing atomic across tables). It runs after the manifest is put and before the sync removes
the files no manifest names, so the snapshot each table points at always has its files; the
snapshots before it are expired in the same commit, since the sync is about to remove their
files (the lake holds the current state; the warehouse keeps the history). A publish that fails
leaves the Hive lake synced and the catalog behind: the sync keeps the old files and says so, and
the next sync catches the catalog up (the diff) before it removes them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.db.engine import redact, resolve_url
from warehouse.errors import ArgumentValueError, WarehouseError, first_line
from warehouse.export_tables import PARTITION, RUN_SCOPED

if TYPE_CHECKING:
    from warehouse.lake.sync import Destination

NAMESPACE = "warehouse"
CATALOG_NAME = "warehouse"
SYNC_PROPERTY = "warehouse.lake-sync"
FOLDER = "iceberg"  # OUT/iceberg/<table>/metadata/
# A name every engine takes unquoted as a schema or dataset (Spark, Trino, BigQuery).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Catalog:
    """Where the lake's Iceberg tables are registered: a SQLAlchemy URL or a SQLite file path
    (as `--db` takes them), and the namespace."""

    url: str
    namespace: str = NAMESPACE

    def __post_init__(self) -> None:
        resolve_url(self.url)  # a catalog that cannot be named is refused before anything is written
        if not _NAME.fullmatch(self.namespace):
            raise ArgumentValueError(f"Iceberg namespace must be a plain name (letters, digits, _), "
                                     f"not {self.namespace!r}")

    @classmethod
    def named(cls, url: str | None, namespace: str | None, *,
              spelled: tuple[str, str] = ("iceberg", "iceberg_namespace")) -> Catalog | None:
        """The catalog a caller's pair of options names (None for none), the namespace `warehouse`
        unless given. A namespace without a catalog is refused, in the words of `spelled`: the
        two options as the caller's user writes them (the API's arguments, the CLI's flags)."""
        if url is None:
            if namespace is not None:
                raise ArgumentValueError(f"{spelled[1]} names the namespace of {spelled[0]}'s catalog: "
                                         f"give {spelled[0]} too")
            return None
        return cls(url, NAMESPACE if namespace is None else namespace)

    @property
    def shown(self) -> str:
        return redact(resolve_url(self.url))

    def record(self) -> dict[str, str]:
        """What the lake's manifest keeps of it: the catalog without its password."""
        return {"catalog": self.shown, "namespace": self.namespace}


def check_location(shown: str, root: str) -> None:
    """Refuse a lake whose path Iceberg's readers would misread in a file URI: pyiceberg (as Java's
    URI parsing) takes '#' and '?' as the start of a fragment or a query, and reads '%' escapes
    nowhere (a space is fine)."""
    odd = sorted(set(root) & set("#?%"))
    if odd:
        raise WarehouseError(f"{shown}: Iceberg cannot name files under a path holding "
                             f"{' or '.join(repr(c) for c in odd)}: sync into a folder without")


def publish(catalog: Catalog, lake: Destination, manifest: dict[str, Any]) -> int:
    """Make each table in `catalog` hold exactly the manifest's files; returns how many tables
    were committed."""
    url = resolve_url(catalog.url)
    # Unescaped: pyiceberg, like Iceberg's Java FileIO, takes a file:// path as it is written.
    root = f"file://{lake.root}" if lake.local else lake.shown.rstrip("/")
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError:
        raise WarehouseError("`--iceberg` needs pyiceberg: pip install 'trajectory-warehouse[lake]'") from None
    # An empty table's placeholder file has no column statistics, which pyiceberg logs as a
    # warning per column; nothing is wrong.
    logging.getLogger("pyiceberg.io.pyarrow").setLevel(logging.ERROR)
    try:
        iceberg = SqlCatalog(CATALOG_NAME, uri=url.render_as_string(hide_password=False), warehouse=root)
        iceberg.create_namespace_if_not_exists(catalog.namespace)
        by_table: dict[str, list[dict]] = {}
        for entry in manifest["files"]:
            by_table.setdefault(entry["table"], []).append(entry)
        committed = 0
        for name, entries in sorted(by_table.items()):
            committed += _publish_table(iceberg, catalog.namespace, name, entries, lake, root, manifest["sync"])
        return committed
    except WarehouseError:
        raise
    except Exception as exc:  # the catalog's database, pyiceberg, the store: one line, with where
        raise WarehouseError(f"Iceberg catalog {catalog.shown}: {type(exc).__name__}: {first_line(exc)}") from None


def _publish_table(iceberg, namespace: str, name: str, entries: list[dict], lake: Destination, root: str,
                   sync: int) -> int:
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    scoped = name in RUN_SCOPED
    ident = (namespace, name)
    table = iceberg.load_table(ident) if iceberg.table_exists(ident) else None
    have = _files(table) if table is not None else {}
    # An empty placeholder file gives Hive readers a table's columns; Iceberg keeps them in its metadata.
    want = {f"{root}/{entry['path']}": entry for entry in entries if entry["rows"]}
    if table is not None and have.keys() == want.keys() and table.properties.get(SYNC_PROPERTY) == str(sync):
        return 0  # (new columns come in new files only: a sync never writes under an old name)
    wanted = _schema(pq.read_schema(lake.fs.open_input_file(lake.path(entries[0]["path"]))), scoped)
    if table is not None and not _same_columns(table.schema(), wanted):
        iceberg.drop_table(ident)  # the lake was written anew under another schema revision
        table, have = None, {}
    if table is None:
        table = iceberg.create_table(
            ident, schema=wanted, location=f"{root}/{FOLDER}/{name}", partition_spec=_spec(wanted, scoped),
            properties={"format-version": "2",
                        "schema.name-mapping.default": create_mapping_from_schema(wanted).model_dump_json(),
                        # Each commit writes a metadata file; keep the last few, not every sync's.
                        "write.metadata.delete-after-commit.enabled": "true",
                        "write.metadata.previous-versions-max": "5"})
    with table.transaction() as tx:
        tx.set_properties({SYNC_PROPERTY: str(sync)})
        if have.keys() != want.keys():
            with tx.update_snapshot(snapshot_properties={SYNC_PROPERTY: str(sync)}).overwrite() as change:
                for path in have.keys() - want.keys():
                    change.delete_data_file(have[path])
                for path in sorted(want.keys() - have.keys()):
                    change.append_data_file(_data_file(tx, lake, want[path], path, scoped))
            current = tx.table_metadata.current_snapshot_id
            older = [s.snapshot_id for s in tx.table_metadata.snapshots if s.snapshot_id != current]
            if older:
                ExpireSnapshots(tx).by_ids(older).commit()
    return 1


def _files(table) -> dict[str, Any]:
    """The table's current data files by path (its manifests' live entries, empty files too)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    return {entry.data_file.file_path: entry.data_file
            for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}


def _schema(arrow: pa.Schema, scoped: bool):
    """The Iceberg schema of a lake table's files (and, when run-scoped, the run_id its folders
    hold), field ids in file order."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, DoubleType, LongType, NestedField, StringType, TimestamptzType

    types = {pa.int64(): LongType(), pa.float64(): DoubleType(), pa.string(): StringType(),
             pa.binary(): BinaryType(), pa.timestamp("us", tz="UTC"): TimestamptzType()}
    fields = list(arrow)
    if scoped and PARTITION not in arrow.names:
        fields.append(pa.field(PARTITION, pa.int64()))
    columns = []
    for i, f in enumerate(fields, start=1):
        if f.type not in types:
            raise WarehouseError(f"lake column {f.name}: no Iceberg type for {f.type}")
        columns.append(NestedField(field_id=i, name=f.name, field_type=types[f.type], required=False))
    return Schema(*columns)


def _spec(schema, scoped: bool):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    if not scoped:
        return PartitionSpec()
    source = schema.find_field(PARTITION).field_id
    return PartitionSpec(PartitionField(source_id=source, field_id=1000, transform=IdentityTransform(), name=PARTITION))


def _same_columns(have, want) -> bool:
    return [(f.name, f.field_type) for f in have.fields] == [(f.name, f.field_type) for f in want.fields]


def _data_file(tx, lake: Destination, entry: dict, path: str, scoped: bool):
    """An existing Parquet file as an Iceberg data file: its size, row count and column
    statistics from its footer, and (run-scoped) the run_id its folder gives."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    metadata = tx.table_metadata
    schema = metadata.schema()
    footer = pq.read_metadata(lake.fs.open_input_file(lake.path(entry["path"])))
    statistics = data_file_statistics_from_parquet_metadata(
        footer, compute_statistics_plan(schema, metadata.properties), parquet_path_to_id_mapping(schema))
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(entry["run_id"]) if scoped else Record(), file_size_in_bytes=entry["bytes"],
        sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict())
