"""Spark: the one SparkSession of the process, and the executor that appends bulks to Parquet tables.

A bulk becomes a pyarrow.Table with an explicit schema (the landed row schema: `LANDED_COLUMNS`,
documented in the README's "What lands"), then a DataFrame (`spark.createDataFrame(arrow_table)`), then one append to
`<warehouse>/<table>` partitioned by `put_date`.

JSON types are checked twice, because neither check alone is strict enough:
- in Python, cheaply: UTF-8, strict JSON (Spark's parser accepts single quotes, trailing garbage
  and an empty body), a top-level object;
- in Spark: `from_json` in PERMISSIVE mode with a corrupt-record column. Spark 4.3 flags a value
  that does not convert to its column's type (`"amount": "abc"` for DECIMAL(12,2), `"qty": 1.5`
  for INT, a string for BOOLEAN, a bad date...) as a corrupt record instead of yielding null.
  It is lenient where the JSON spec allows a reading: any value lands in a STRING column as its
  JSON text, numeric strings convert to DECIMAL, extra decimal places are rounded, a missing or
  differently cased key is null.
The bulk is parsed once: the write job itself reports the corrupt rows through an Observation.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from mqbridge.config import SparkSection, TypeConfig, shown_remote
from mqbridge.containers import SORT_COLUMNS, tables_of
from mqbridge.errors import ConfigError, SparkUnavailableError
from mqbridge.landing import Landing
from mqbridge.message import Bulk, Message, MessageResult
from mqbridge.publication import discard, staging_dir

log = logging.getLogger(__name__)

#: Session defaults for a bridge on a small machine; the configuration's [spark.conf] wins.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark's default (INT96) writes no min/max statistics: readers could not skip files by put_timestamp.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
#: Only for an in-process driver: a Spark Connect server's static settings cannot be changed.
LOCAL_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",  # applies from JVM start, before setLogLevel can run
}

LANDED_COLUMNS = ("msg_id", "correlation_id", "message_type", "source", "destination", "put_timestamp",
                  "received_timestamp", "redelivered", "delivery_count", "bulk_id", "headers", "body",
                  "put_date")
_UTC_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("correlation_id", pa.string()),
    pa.field("message_type", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("destination", pa.string(), nullable=False),
    pa.field("put_timestamp", _UTC_TS, nullable=False),
    pa.field("received_timestamp", _UTC_TS, nullable=False),
    pa.field("redelivered", pa.bool_(), nullable=False),
    pa.field("delivery_count", pa.int32(), nullable=False),
    pa.field("bulk_id", pa.string(), nullable=False),
    pa.field("headers", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("put_date", pa.date32(), nullable=False),
    pa.field("_row", pa.int32(), nullable=False),  # position in the bulk; never written
])
#: Parquet writer options. Message ids and bodies are (nearly) all distinct: a dictionary for them
#: is built and then thrown away page after page, ~10% of the JVM's CPU per write (bench/spark_write.py).
WRITE_OPTIONS: dict[str, str] = {
    "parquet.enable.dictionary#msg_id": "false",
    "parquet.enable.dictionary#body": "false",
}
#: Bytes of message bodies per written Parquet file (and Spark task) of one bulk, at most.
FILE_BYTES = 128 << 20
_CORRUPT = "_mqbridge_corrupt_record"
_INVALID = "body is not valid JSON for schema"

# Appends to one directory must not overlap (they share `_temporary`); shared by every executor
# of the process because two types may land in the same table.
_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _path_lock(path: Path) -> threading.Lock:
    with _path_locks_guard:
        return _path_locks.setdefault(path, threading.Lock())


def _one_line(exc: BaseException) -> str:
    """`ExceptionClass: first line of its message`, short enough for a header or a log line.

    For a Java exception that py4j did not translate, the root cause's (py4j's own text is only
    "An error occurred while calling o63.parquet").
    """
    name, text = type(exc).__name__, str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            while java.getCause() is not None:
                java = java.getCause()
            qualified, _, text = str(java.toString()).partition(": ")
            name = qualified.rpartition(".")[2]
        except Exception:  # the JVM may be gone; py4j's text will do
            name, text = type(exc).__name__, str(exc)
    lines = text.strip().splitlines()
    first = lines[0].strip() if lines else ""
    text = f"{name}: {first}" if first else name
    return text if len(text) <= 300 else text[:297] + "..."


def create_spark_session(master: str = "local[*]", remote: str | None = None, app_name: str = "mqbridge",
                         conf: Mapping[str, str] | None = None) -> SparkSession:
    """The process's SparkSession (created on first call, reused after), in-process on `master`,
    or through Spark Connect when `remote` ("sc://host:15002") is given.

    Raises SparkUnavailableError when Spark cannot be started or reached.
    """
    settings = {**DEFAULT_CONF, **({} if remote else LOCAL_DEFAULT_CONF), **dict(conf or {})}
    try:
        builder = SparkSession.builder.appName(app_name)
        builder = builder.remote(remote) if remote else builder.master(master)
        for key, value in settings.items():
            builder = builder.config(key, str(value))
        spark = builder.getOrCreate()
        if not remote:
            spark.sparkContext.setLogLevel("WARN")
    except Exception as exc:
        where = f"Spark Connect server {shown_remote(remote)}" if remote else f"Spark (master {master})"
        raise SparkUnavailableError(f"cannot start {where}: {_one_line(exc)}{_java_hint(remote)}") from exc
    return spark


class SparkSessions:
    """The process's SparkSession for one `[spark]` section: started on first `get()` (when the
    bridge starts its executors), never by a health probe (`current` is None until then)."""

    def __init__(self, section: SparkSection, session: SparkSession | None = None) -> None:
        self.section = section
        self._session = session
        self._lock = threading.Lock()

    @property
    def current(self) -> SparkSession | None:
        """The session if one was given or started, else None."""
        return self._session

    def get(self) -> SparkSession:
        """The session, started now if needed (SparkUnavailableError if it cannot be)."""
        with self._lock:
            if self._session is None:
                s = self.section
                self._session = create_spark_session(master=s.master, remote=s.remote, app_name=s.app_name,
                                                     conf=s.conf)
            return self._session


def executors_for(spark: SparkSession, warehouse: Path, types: Mapping[str, TypeConfig], *,
                  landing: Landing | None = None) -> dict[str, SparkExecutor]:
    """One executor per configured message type (exactly-once through `landing` when given)."""
    return {name: SparkExecutor(spark, warehouse, name, type_cfg, landing=landing)
            for name, type_cfg in types.items()}


def _java_hint(remote: str | None) -> str:
    """Why a local Spark could not start, when the cause is the usual one: no Java."""
    if remote:
        return ""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not (Path(java_home) / "bin" / "java").exists():
        return f" (JAVA_HOME={java_home} has no bin/java: point it at a Java 17+ runtime)"
    if not java_home and shutil.which("java") is None:
        return " (no `java` on PATH: install a Java 17+ runtime or set JAVA_HOME)"
    return ""


def parse_schema(message_type: str, schema_ddl: str) -> StructType:
    """The StructType of a type's `schema` (Spark DDL), or ConfigError naming the type.

    Uses Spark's own parser, so a SparkSession must exist.
    """
    where = f"types.{message_type}.schema"
    try:
        schema = DataType.fromDDL(schema_ddl)
    except Exception as exc:
        raise ConfigError(f"{where}: not a valid Spark DDL schema {schema_ddl!r}: {_one_line(exc)}") from exc
    if not isinstance(schema, StructType) or not schema.fields:
        raise ConfigError(f"{where}: expected a list of columns such as 'id STRING, amount DECIMAL(12,2)', "
                          f"got the single type {schema.simpleString()!r}")
    taken = {c.lower() for c in LANDED_COLUMNS} | {"_row", _CORRUPT}
    for field in schema.fields:
        if field.name.lower() in taken:
            raise ConfigError(f"{where}: column {field.name!r} clashes with a landed column or another "
                              "schema column (names are case-insensitive)")
        taken.add(field.name.lower())
    return schema


def _headers(messages: list[Message]) -> pa.Array:
    """The headers column, built from flat key and value arrays (pyarrow converts a list of
    lists of pairs about four times slower)."""
    offsets = [0]
    keys: list[object] = []
    values: list[object] = []
    for message in messages:
        keys.extend(message.headers)
        values.extend(message.headers.values())
        offsets.append(len(keys))
    try:
        key_array, value_array = pa.array(keys, pa.string()), pa.array(values, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # an adapter left a non-string: land its text
        key_array, value_array = pa.array([str(k) for k in keys]), pa.array([str(v) for v in values])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), key_array, value_array)


def _json_precheck(body: bytes) -> str | None:
    """Why `body` cannot be a JSON object, or None if it is one."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{_INVALID}: not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"{_INVALID}: {exc}"
    except RecursionError:
        return f"{_INVALID}: nested too deeply"
    if not isinstance(value, dict):
        return f"{_INVALID}: top level is a JSON {type(value).__name__}, not an object"
    return None


class SparkExecutor:
    """Appends bulks of one message type to <warehouse>/<table> as Parquet partitioned by put_date.

    `execute` never raises: a failed write makes every message RETRYABLE (except those already
    known to be PERMANENT); a JSON body that does not fit the schema is PERMANENT for that message
    alone and the rest of the bulk lands.

    Counters (read without a lock; each is updated by one assignment): `last_write_seconds` is the
    wall time of the last successful execute's Spark work (DataFrame, JSON check, append);
    `rows_written`, `bytes_written` (bytes of landed bodies) and `writes` are totals.
    """

    def __init__(self, spark: SparkSession, warehouse: Path, message_type: str, config: TypeConfig, *,
                 landing: Landing | None = None) -> None:
        # `config` was validated at load (format and schema agree, the table is a valid name);
        # only the DDL itself needs Spark's own parser, hence a session, to be checked.
        self.spark = spark
        self.message_type = message_type
        self.table = config.table or message_type  # a template such as "{destination}" (containers.py)
        self.format = config.format
        self.schema: StructType | None = (parse_schema(message_type, config.schema_ddl)
                                          if config.schema_ddl else None)
        self.warehouse = Path(warehouse)
        self._path = self.warehouse / self.table
        self.landing = landing  # None: at-least-once, a plain append into the table
        self.last_write_seconds = 0.0
        self.rows_written = 0
        self.bytes_written = 0
        self.writes = 0

    @property
    def path(self) -> Path:
        """The table's directory (of a template: with its placeholders, see `tables_of`)."""
        return self._path

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        """Land `bulk`; one result per message, in the bulk's order."""
        results: list[MessageResult | None] = [None] * len(bulk.messages)
        try:
            self._execute(bulk, results)
        except Exception as exc:
            reason = f"Spark write failed: {_one_line(exc)}"
            log.warning("type %s: bulk %s (%d messages) not written to %s: %s", self.message_type,
                        bulk.bulk_id, len(bulk.messages), self._path, reason)
            log.debug("type %s: bulk %s write failure", self.message_type, bulk.bulk_id, exc_info=True)
            for i, message in enumerate(bulk.messages):
                if results[i] is None:  # messages known to be PERMANENT stay so
                    results[i] = MessageResult.retryable(message.msg_id, reason, bulk.bulk_id)
        return [r for r in results if r is not None]

    # -- internals -------------------------------------------------------------------------
    def _execute(self, bulk: Bulk, results: list[MessageResult | None]) -> None:
        messages = bulk.messages
        if self.schema is not None:
            for i, message in enumerate(messages):
                reason = _json_precheck(message.body)
                if reason is not None:
                    results[i] = MessageResult.permanent(message.msg_id, reason, bulk.bulk_id)
        keep = [i for i, r in enumerate(results) if r is None]
        groups = tables_of(self.table, bulk, keep)
        for n, (table, rows) in enumerate(groups.items()):
            # One ledger bulk per table: a bulk spread over several destinations lands per table.
            ledger_bulk_id = bulk.bulk_id if len(groups) == 1 else f"{bulk.bulk_id}.{n}"
            path = self.warehouse / table
            with _path_lock(path.absolute()):
                self._write(bulk, rows, table, path, ledger_bulk_id, results)

    def _write(self, bulk: Bulk, keep: list[int], table: str, path: Path, ledger_bulk_id: str,
               results: list[MessageResult | None]) -> None:
        messages = bulk.messages
        start = time.perf_counter()
        df = self.spark.createDataFrame(self._arrow_table(bulk, keep))
        observation: Observation | None = None
        if self.schema is None:
            # The Arrow table's columns are already in order: dropping `_row` costs 6 py4j calls
            # where a select of 13 columns costs 57. Each call waits for the GIL, which the
            # listener threads keep busy, and the write is the bridge's serial bottleneck.
            df = df.drop("_row")
        else:
            df, observation = self._parse(df, self.schema)
            parsed = [F.col("_parsed").getField(f.name).alias(f.name) for f in self.schema.fields]
            df = df.select(*LANDED_COLUMNS[:-1], *parsed, "put_date")
        # One task, and so one file per put_date, for every FILE_BYTES of the bulk: fewer small files,
        # and about 15% less JVM CPU per write than a task per core (bench/throughput.py).
        df = df.coalesce(max(1, math.ceil(sum(len(messages[i].body) for i in keep) / FILE_BYTES)))
        # Rows ordered by their key within each file: time-range reads skip files by Parquet statistics.
        df = df.sortWithinPartitions(*SORT_COLUMNS)
        existed = path.exists()
        landing = self.landing
        # Exactly-once: the bulk goes to its own staging directory, which no reader lists, and is
        # published below; at-least-once: appended straight into the table.
        target = staging_dir(path, landing.owner, ledger_bulk_id) if landing is not None else path
        mode = "overwrite" if landing is not None else "append"
        df.write.options(**WRITE_OPTIONS).partitionBy("put_date").mode(mode).parquet(str(target))
        # Without a ledger the rows are in the table from here on: nothing below may fail in a way
        # that would report them RETRYABLE (Observation.get only reads metrics the finished job delivered).
        if observation is not None:
            for i, reason in self._corrupt_rows(observation).items():
                results[i] = MessageResult.permanent(messages[i].msg_id, reason, bulk.bulk_id)
        landed = [i for i in keep if results[i] is None]
        if landing is not None:
            if landed:
                landing.land(ledger_bulk_id, table, path, target,
                             [messages[i].identity or messages[i].msg_id for i in landed])
            else:
                discard(target)
        for i in landed:
            results[i] = MessageResult.success(messages[i].msg_id, bulk.bulk_id)
        if not landed:
            if not existed:  # an append of no rows leaves a directory Spark cannot read back
                shutil.rmtree(path, ignore_errors=True)
            return
        self.last_write_seconds = time.perf_counter() - start
        self.rows_written += len(landed)
        self.bytes_written += sum(len(messages[i].body) for i in landed)
        self.writes += 1
        log.debug("type %s: bulk %s, %d rows appended to %s in %.3f s", self.message_type, bulk.bulk_id,
                  len(landed), path, self.last_write_seconds)

    def _arrow_table(self, bulk: Bulk, rows: list[int]) -> pa.Table:
        picked: list[Message] = [bulk.messages[i] for i in rows]
        # pyarrow converts aware datetimes to UTC and takes naive ones as UTC; put_date is the
        # UTC date of put_timestamp.
        put = pa.array([m.put_timestamp or m.received_timestamp for m in picked], _UTC_TS)
        data = {
            "msg_id": [m.msg_id for m in picked],
            "correlation_id": [m.correlation_id for m in picked],
            "message_type": [m.message_type or bulk.message_type for m in picked],
            "source": [m.source for m in picked],
            "destination": [m.destination for m in picked],
            "put_timestamp": put,
            "received_timestamp": pa.array([m.received_timestamp for m in picked], _UTC_TS),
            "redelivered": [bool(m.redelivered) for m in picked],
            "delivery_count": [int(m.delivery_count) for m in picked],
            "bulk_id": [bulk.bulk_id] * len(picked),
            "headers": _headers(picked),
            "body": [bytes(m.body) for m in picked],
            "put_date": put.cast(pa.date32()),
            "_row": rows,
        }
        return pa.table(data, schema=ARROW_SCHEMA)

    @staticmethod
    def _from_json(schema: StructType) -> Column:
        with_corrupt = StructType([*schema.fields, StructField(_CORRUPT, StringType())])
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
        return F.from_json(F.col("body").cast("string"), with_corrupt, options)

    def _parse(self, df: DataFrame, schema: StructType) -> tuple[DataFrame, Observation]:
        """`df` with the parsed body in `_parsed`, without the rows Spark could not convert.

        The corrupt rows are reported through an Observation filled by the write job itself, so
        the bulk is parsed once (a separate collect first cost ~0.5 s more on 50,000 rows). For
        corrupt rows only (CASE WHEN is lazy), each field is re-parsed alone to name the culprits.
        """
        df = df.withColumn("_parsed", self._from_json(schema))
        corrupt = F.col("_parsed").getField(_CORRUPT).isNotNull()
        suspects = F.array(*[
            F.when(self._from_json(StructType([f])).getField(_CORRUPT).isNotNull(),
                   F.lit(f"{f.name!r} ({f.dataType.simpleString()})"))
            for f in schema.fields
        ])
        bad = F.when(corrupt, F.struct(F.col("_row").alias("row"),
                                       F.filter(suspects, lambda c: c.isNotNull()).alias("fields")))
        observation = Observation()
        df = df.observe(observation, F.collect_list(bad).alias("corrupt"))
        return df.where(~corrupt), observation

    @staticmethod
    def _corrupt_rows(observation: Observation) -> dict[int, str]:
        """Bulk positions of the rows Spark could not convert, with a reason naming the fields."""
        found: dict[int, str] = {}
        for bad in observation.get["corrupt"]:
            detail = (f"value of {', '.join(bad['fields'])} does not convert to the column type"
                      if bad["fields"] else "Spark's from_json rejected the record")
            found[bad["row"]] = f"{_INVALID}: {detail}"
        return found
