"""How a bulk's rows reach Spark: a Parquet file pyarrow writes beside the bulk's staged output,
which the Spark job reads (`bulk_frame`); for a raw bulk written by an in-process driver, the whole
job is built from the driver's own Java objects (`raw_frame`, `raw_write`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from mqbridge.landing.rows import SPARK_SCHEMA

#: Spark splits a file scan no finer than this (`spark.sql.files.openCostInBytes`, 4 MB by default):
#: a handoff file is cut into more than one row group only where each gets at least this much.
SPLIT_BYTES = 4 << 20


def row_groups(nbytes: int, cores: int) -> int:
    """How many row groups a handoff file of about `nbytes` is written in, so that a driver running
    `cores` tasks at once reads (and sorts and writes) it in that many tasks: one per core, each of
    at least SPLIT_BYTES. Measured on the 2-core machine (bulks of 10,000 rows of 1 KB, a warm
    `local[2]` driver): the Spark job took 0.33-0.36 s in two tasks against 0.58-0.60 s in one,
    for the same JVM CPU (docs/performance.md)."""
    return max(1, min(cores, nbytes // SPLIT_BYTES))


def scan_cores(spark: SparkSession) -> int:
    """The tasks the in-process driver runs at once (`local[N]`: N; a cluster: its cores); 1 through
    Spark Connect, whose server's cores the bridge does not know. Asked once per session."""
    with _parts_lock:
        known = _cores.get(id(spark))
        if known is not None and known[0] is spark:
            return known[1]
    try:
        cores = max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        cores = 1
    with _parts_lock:
        _cores[id(spark)] = (spark, cores)
    return cores


def handoff_file(rows: pa.Table, handoff: Path, groups: int = 1) -> Path:
    """`rows` as an uncompressed Parquet file under `handoff` (a directory under the table's
    `_staging`, which the caller removes after the write), in `groups` row groups of equal rows
    (a scan gives each its own task where the file is large enough to split: `row_groups`); its path."""
    handoff.mkdir(parents=True, exist_ok=True)
    path = handoff / "rows.parquet"
    size = max(1, -(-rows.num_rows // max(1, groups)))
    pq.write_table(rows, path, compression="none", use_dictionary=False, store_schema=False, row_group_size=size)
    return path


def bulk_frame(spark: SparkSession, rows: pa.Table, handoff: Path | None, groups: int = 1) -> DataFrame:
    """The bulk's rows as a DataFrame, read from the handoff file (`handoff_file`, in `groups` row groups).

    In-process Spark: `createDataFrame` would ship the rows inside the task instead ("task of very
    large size"): the JVM then deserialises and copies every row, ~3x its CPU per write on 16,000
    rows of 1 KB (docs/performance.md), where the Parquet reader maps the file's pages into column
    vectors. Spark Connect: `createDataFrame` sends the table as Arrow over gRPC, and the server
    turns it into a local relation row by row: 0.79-1.07 server CPU-s per write of 8,000 rows of
    1 KB against 0.45-0.58 s reading the same rows from the file (docs/performance.md). The server
    sees the file: `handoff` is in the warehouse, which the server writes the bulk's staged files
    to and the bridge publishes them from, so both must see it at the same path already.

    `handoff` None: Spark's executors do not see this host's disk (a Delta table on an object store
    written by a cluster or a Spark Connect server), so the rows go by `createDataFrame` after all."""
    if handoff is None:
        return spark.createDataFrame(rows, schema=SPARK_SCHEMA)
    path = handoff_file(rows, handoff, groups)
    # With the schema given, Spark plans the read without opening the file's footer first.
    return spark.read.schema(SPARK_SCHEMA).parquet(str(path))


@dataclass(frozen=True)
class _JavaParts:
    """What every raw write passes to the driver, made once per session: the rows' schema, the sort
    columns after the first and the partition column as Java String arrays, the writer's options."""

    session: Any  # the JVM SparkSession these were made for (a restarted JVM makes new ones)
    schema: Any
    sort_rest: Any
    partition: Any
    options: Any


_parts: dict[int, _JavaParts] = {}
_cores: dict[int, tuple[SparkSession, int]] = {}
_parts_lock = threading.Lock()


def _java_parts(spark: SparkSession, sort: Sequence[str], options: Mapping[str, str]) -> _JavaParts:
    jsession = spark._jsparkSession
    with _parts_lock:
        parts = _parts.get(id(spark))
        if parts is not None and parts.session is jsession:
            return parts
        gateway = spark.sparkContext._gateway
        assert gateway is not None

        def strings(*items: str) -> Any:
            array = gateway.new_array(gateway.jvm.java.lang.String, len(items))
            for n, item in enumerate(items):
                array[n] = item
            return array

        joptions = gateway.jvm.java.util.HashMap()
        for key, value in options.items():
            joptions.put(key, value)
        parts = _JavaParts(jsession, jsession.parseDataType(SPARK_SCHEMA.json()), strings(*sort[1:]),
                           strings("put_date"), joptions)
        _parts[id(spark)] = parts
        return parts


def raw_write(spark: SparkSession, rows: pa.Table, handoff: Path, target: str, *, mode: str, tasks: int,
              sort: Sequence[str], options: Mapping[str, str], groups: int = 1) -> Callable[[], object]:
    """The Spark job that writes a raw bulk's `rows` to the Parquet directory `target` (`raw_frame`),
    partitioned by put_date with the writer's `options`; calling it runs the job.

    The same plan as `bulk_frame` and the DataFrame API would build, in 9 py4j calls instead of
    about 80. Each call's answer must wait for the GIL, which the listener threads keep busy: with
    two Python threads busy, a write of 10,000 rows of 1 KB took 1.97 s through the DataFrame API
    and 1.10 s this way (docs/performance.md)."""
    parts, jdf = raw_frame(spark, rows, handoff, tasks=tasks, groups=groups, sort=sort, options=options)
    writer = jdf.write().options(parts.options).partitionBy(parts.partition).mode(mode)
    return lambda: writer.parquet(target)


def raw_frame(spark: SparkSession, rows: pa.Table, handoff: Path, *, tasks: int, groups: int, sort: Sequence[str],
              options: Mapping[str, str], identity: str | None = None) -> tuple[_JavaParts, Any]:
    """A raw bulk's `rows` (with their `_row` column) as a Java Dataset of the in-process driver, read
    from the handoff file, sorted by `sort` within each task, and the session's `_JavaParts` (`options`
    among them, for the writer). `tasks` > 1: spread over that many tasks by a shuffle (a bulk of more
    than FILE_BYTES); else one task per row group of the handoff file (`groups`, see `row_groups`).
    `identity`: the column that keeps each row's identity (a Delta table's), else it is left out."""
    parts = _java_parts(spark, sort, options)
    path = handoff_file(rows, handoff, 1 if tasks > 1 else groups)
    jdf = parts.session.read().schema(parts.schema).format("parquet").load(str(path)).drop("_row")
    jdf = jdf.withColumnRenamed("_identity", identity) if identity else jdf.drop("_identity")
    return parts, partitioned(jdf, tasks, groups).sortWithinPartitions(sort[0], parts.sort_rest)


def partitioned(df: Any, tasks: int, groups: int) -> Any:
    """`df` (a DataFrame, or its Java object) read from a handoff file in `groups` row groups, in
    the partitions its write runs as: `tasks` (> 1) by a shuffle, else one per row group (the
    scan's own splits), or one for a file of one row group (a scan may split even that)."""
    if tasks > 1:
        return df.repartition(tasks)
    return df if groups > 1 else df.coalesce(1)
