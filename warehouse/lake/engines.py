"""A session on a lake: its tables as views of an engine (DuckDB in this process, or Spark in local
mode), where the canned queries run as they run on a database (warehouse.queries.registry).

Each table is a view over the files warehouse.lake.layout.table_files names (never a glob of
ours: a manifest's lake is its manifest's files). A run-scoped table's files lie under
`run_id=<id>/` folders, which give it its `run_id` column (Hive partitioning). None of the
canned queries' definitions reads the warehouse's views (turns, turn_text, trial_summary), so
only the tables are registered.

A session offers what the registry asks of a database's read session: `fetch` (a statement, its
rows) and `connection`, enough of a SQLAlchemy connection (`execute(text(...), binds)`, its
`dialect.name`) for the code that resolves runs and filters. Every statement is rendered for the
engine (warehouse.lake.render) with its binds written in.

Spark starts offline: local[2], no UI, no package downloads (no spark.jars.packages, nothing
fetched), an in-memory catalog, the session's time zone UTC. It is started once per process and
kept (a JVM takes seconds to start); a lake's views are registered again only when another lake
(or other files) is asked for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from warehouse.errors import WarehouseError, first_line
from warehouse.lake import Lake
from warehouse.lake.layout import table_files
from warehouse.readonly import ReadResult, check_timeout, too_long

PARTITION = "run_id"
# What every lake holds, whatever else it lacks (a folder of other Parquet files is not a lake).
REQUIRED = ("runs", "trials")

INSTALL_LAKE = "pip install 'trajectory-warehouse[lake]'"


@contextmanager
def lake_session(lake: Lake, *, timeout: float) -> Iterator["LakeSession"]:
    """A session on `lake` for one answer (of several statements), within `timeout` seconds."""
    check_timeout(timeout)
    try:
        import sqlglot  # noqa: F401  (warehouse.lake.render's)
    except ImportError:
        raise WarehouseError("--lake needs sqlglot: pip install 'sqlglot>=30,<31'") from None
    files = table_files(lake.path)
    missing = [table for table in REQUIRED if table not in files]
    if missing:
        raise WarehouseError(f"{lake.path}: not a warehouse's lake (no {' or '.join(missing)} table): "
                             "`warehouse export tables OUT` writes one")
    session = DuckDBSession(files, timeout) if lake.engine == "duckdb" else SparkLakeSession(files, timeout)
    try:
        yield session
    finally:
        session.close()


def _run_scoped(files: Sequence[Path]) -> bool:
    """Whether a table's files lie in `run_id=` folders (export_tables' run-scoped tables)."""
    return any(path.parent.name.startswith(f"{PARTITION}=") for path in files)


class LakeSession:
    """What the two engines share: rendering, the deadline, and the connection for the filters."""

    engine = ""

    def __init__(self, timeout: float):
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self.connection = LakeConnection(self)

    def fetch(self, sql: str, params: Mapping[str, Any] | None = None, *, max_rows: int | None = None,
              last: bool = False) -> ReadResult:
        """One statement of the warehouse's SQL (`:name` binds), answered by the engine."""
        from warehouse.lake.render import render

        rendered = render(sql, params or {}, self.engine)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise WarehouseError(too_long(self._timeout))
        columns, rows = self._run(rendered, left)
        if time.monotonic() > self._deadline:  # the engine finished what it was told to stop
            raise WarehouseError(too_long(self._timeout))
        truncated = max_rows is not None and len(rows) > max_rows
        return ReadResult(columns, rows[:max_rows] if truncated else rows, truncated)

    def _run(self, sql: str, seconds: float) -> tuple[list[str], list[tuple]]:
        raise NotImplementedError

    def _stopped(self, error: BaseException, timer: threading.Timer) -> WarehouseError:
        if not timer.is_alive() and time.monotonic() >= self._deadline:
            return WarehouseError(too_long(self._timeout))
        return WarehouseError(f"{self.engine} error: {engine_message(error)}")

    def close(self) -> None:
        pass


class DuckDBSession(LakeSession):
    engine = "duckdb"

    def __init__(self, files: Mapping[str, list[Path]], timeout: float):
        super().__init__(timeout)
        try:
            import duckdb  # only on the lake's path: `warehouse --help` and the database's queries never load it
        except ImportError:
            raise WarehouseError(f"--lake needs duckdb: {INSTALL_LAKE}") from None

        self._duckdb = duckdb
        self._con = duckdb.connect(":memory:")
        self._con.execute("SET TimeZone = 'UTC'")
        for table, paths in files.items():
            listed = ", ".join(_quoted(str(p)) for p in paths)
            hive = f", hive_partitioning = true, hive_types = {{'{PARTITION}': BIGINT}}" if _run_scoped(paths) else \
                ", hive_partitioning = false"
            try:
                self._con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM read_parquet([{listed}]{hive})')
            except duckdb.Error as e:  # a file that is not Parquet
                raise WarehouseError(f"duckdb error: {first_line(e)}") from None

    def _run(self, sql: str, seconds: float) -> tuple[list[str], list[tuple]]:
        timer = threading.Timer(seconds, self._con.interrupt)
        timer.start()
        try:
            cursor = self._con.execute(sql)
            rows = cursor.fetchall()
        except self._duckdb.Error as e:
            raise self._stopped(e, timer) from None
        finally:
            timer.cancel()
        return [d[0] for d in cursor.description], rows

    def close(self) -> None:
        self._con.close()


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class SparkLakeSession(LakeSession):
    engine = "spark"
    _lock = threading.Lock()
    _registered: tuple | None = None  # the files the process's Spark session has views of

    def __init__(self, files: Mapping[str, list[Path]], timeout: float):
        self._spark = spark_session()
        # The files as they are now: a folder exported again (`export tables --force`) has new
        # files under the same names, and Spark's views hold the files' sizes.
        key = tuple((table, tuple((str(p), *_stat(p)) for p in paths)) for table, paths in files.items())
        # The views are the process's (one lake at a time): registered again for another lake.
        with SparkLakeSession._lock:
            if SparkLakeSession._registered != key:
                SparkLakeSession._registered = None
                with _spark_errors():
                    for table, paths in files.items():
                        reader = self._spark.read
                        if _run_scoped(paths):  # the partition folders give run_id
                            reader = reader.option("basePath", str(paths[0].parent.parent))
                        reader.parquet(*map(str, paths)).createOrReplaceTempView(table)
                SparkLakeSession._registered = key
        # The clock starts now: the JVM's start and the views' schemas read are not the query's time.
        super().__init__(timeout)

    def _run(self, sql: str, seconds: float) -> tuple[list[str], list[tuple]]:
        from pyspark.errors import PySparkException  # noqa: PLC0415
        from py4j.protocol import Py4JJavaError  # noqa: PLC0415

        context = self._spark.sparkContext
        group = f"warehouse-{threading.get_ident()}-{time.monotonic_ns()}"
        context.setJobGroup(group, "a canned query", interruptOnCancel=True)
        timer = threading.Timer(seconds, context.cancelJobGroup, (group,))
        timer.start()
        try:
            frame = self._spark.sql(sql)
            rows = frame.collect()
        except (PySparkException, Py4JJavaError) as e:
            raise self._stopped(e, timer) from None
        finally:
            timer.cancel()
        return list(frame.columns), [tuple(_python(v) for v in row) for row in rows]


@contextmanager
def _spark_errors() -> Iterator[None]:
    """Spark's errors (a file that is not Parquet) in one line."""
    from py4j.protocol import Py4JJavaError  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415

    try:
        yield
    except (PySparkException, Py4JJavaError) as e:
        raise WarehouseError(f"spark error: {engine_message(e)}") from None


def engine_message(error: BaseException) -> str:
    """An engine's error in one line: a Java exception's own message (py4j's first line says only
    which call failed)."""
    java = getattr(error, "java_exception", None)
    if java is not None:
        try:
            return first_line(str(java.getMessage()))
        except Exception:  # noqa: BLE001 (the JVM gone: py4j's text is all there is)
            pass
    return first_line(error)


def _stat(path: Path) -> tuple[int, int]:
    try:
        found = path.stat()
    except OSError as e:  # a manifest naming a file that is not there
        raise WarehouseError(f"{path}: cannot read: {e.strerror or e}") from None
    return found.st_size, found.st_mtime_ns


def _python(value: Any) -> Any:
    """A Spark value as the warehouse's drivers give it: bytes for binary, and aware UTC datetimes
    (Spark hands back naive local times)."""
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(timezone.utc)
    return value


_spark = None

# Spark's settings: local, offline and quiet.
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.app.name": "warehouse",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.catalogImplementation": "in-memory",  # no Hive metastore (nor its metastore_db folder)
    # A lake's tables are small next to a query's fixed costs: few partitions, no adaptive
    # re-planning and no code generation (measured: a third less time over the canned queries).
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
}


def spark_session():
    """The process's Spark session (SPARK_CONF), started on first use. Nothing is downloaded: no
    spark.jars.packages, only the jars pyspark ships. The JVM's own output (log4j's start-up
    lines, Java's warnings) goes nowhere: what goes wrong reaches the caller as an exception."""
    global _spark
    if _spark is not None:
        return _spark
    try:
        with warnings.catch_warnings():  # pyspark warns of the pandas it finds at import
            warnings.simplefilter("ignore")
            from pyspark import SparkConf, SparkContext  # noqa: PLC0415
            from pyspark.java_gateway import launch_gateway  # noqa: PLC0415
            from pyspark.sql import SparkSession  # noqa: PLC0415
    except ImportError:
        raise WarehouseError(f"--engine spark needs pyspark: {INSTALL_LAKE}") from None
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise WarehouseError("--engine spark needs Java 17 or later: apt-get install openjdk-17-jre-headless "
                             "(or set JAVA_HOME)")
    scratch = tempfile.mkdtemp(prefix="warehouse-spark-")
    conf = SparkConf().setAll([*SPARK_CONF.items(), ("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse")),
                               ("spark.local.dir", scratch)])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gateway = launch_gateway(conf, popen_kwargs={"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL})
            _spark = SparkSession(SparkContext(conf=conf, gateway=gateway))
    except Exception as e:  # the JVM did not start: Java too old, say
        raise WarehouseError(f"--engine spark: Spark did not start ({first_line(e)}); it needs Java 17 or later") \
            from None
    _spark.sparkContext.setLogLevel("OFF")
    return _spark


class LakeConnection:
    """Enough of a SQLAlchemy connection for the code a canned query shares with the database
    (warehouse.runs, warehouse.filters, warehouse.queries.outcome): `execute(text(sql), binds)`
    through the session's engine, and the engine's name as `dialect.name`."""

    def __init__(self, session: LakeSession):
        self._session = session
        self.dialect = _Dialect(session.engine)

    def execute(self, statement: Any, parameters: Mapping[str, Any] | None = None) -> "LakeRows":
        return LakeRows(self._session.fetch(getattr(statement, "text", statement), parameters or {}).rows)


class _Dialect:
    def __init__(self, name: str):
        self.name = name


class LakeRows:
    """A statement's rows, read as a SQLAlchemy Result is."""

    def __init__(self, rows: list[tuple]):
        self._rows = rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._rows)

    def all(self) -> list[tuple]:
        return list(self._rows)

    def first(self) -> tuple | None:
        return self._rows[0] if self._rows else None

    def one(self) -> tuple:
        if len(self._rows) != 1:
            raise WarehouseError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> "LakeRows":
        return LakeRows([row[0] for row in self._rows])
