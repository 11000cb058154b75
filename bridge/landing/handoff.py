"""How a bulk's rows reach Spark: a Parquet file pyarrow writes beside the bulk's staged output,
which the Spark job reads (`bulk_frame`); for a raw bulk written by an in-process driver, the whole
job is built from the driver's own Java objects (`raw_write`)."""

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


def handoff_file(rows: pa.Table, handoff: Path) -> Path:
    """`rows` as an uncompressed Parquet file under `handoff` (a directory under the table's
    `_staging`, which the caller removes after the write); its path."""
    handoff.mkdir(parents=True, exist_ok=True)
    path = handoff / "rows.parquet"
    pq.write_table(rows, path, compression="none", use_dictionary=False, store_schema=False)
    return path


def bulk_frame(spark: SparkSession, rows: pa.Table, handoff: Path) -> DataFrame:
    """The bulk's rows as a DataFrame, read from the handoff file (`handoff_file`).

    In-process Spark: `createDataFrame` would ship the rows inside the task instead ("task of very
    large size"): the JVM then deserialises and copies every row, ~3x its CPU per write on 16,000
    rows of 1 KB (docs/performance.md), where the Parquet reader maps the file's pages into column
    vectors. Spark Connect: `createDataFrame` sends the table as Arrow over gRPC, and the server
    turns it into a local relation row by row: 0.79-1.07 server CPU-s per write of 8,000 rows of
    1 KB against 0.45-0.58 s reading the same rows from the file (docs/performance.md). The server
    sees the file: `handoff` is in the warehouse, which the server writes the bulk's staged files
    to and the bridge publishes them from, so both must see it at the same path already."""
    path = handoff_file(rows, handoff)
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
              sort: Sequence[str], options: Mapping[str, str]) -> Callable[[], object]:
    """The Spark job that writes a raw bulk's `rows` (with their `_row` column) to `target`,
    partitioned by put_date and sorted by `sort` within each of `tasks` tasks, built from the
    in-process driver's Java objects; calling it runs the job.

    The same plan as `bulk_frame` and the DataFrame API would build, in 9 py4j calls instead of
    about 80. Each call's answer must wait for the GIL, which the listener threads keep busy: with
    two Python threads busy, a write of 10,000 rows of 1 KB took 1.97 s through the DataFrame API
    and 1.10 s this way (docs/performance.md)."""
    parts = _java_parts(spark, sort, options)
    path = handoff_file(rows, handoff)
    jdf = parts.session.read().schema(parts.schema).format("parquet").load(str(path)).drop("_row")
    jdf = jdf.repartition(tasks) if tasks > 1 else jdf.coalesce(1)
    writer = jdf.sortWithinPartitions(sort[0], parts.sort_rest).write().options(parts.options)
    writer = writer.partitionBy(parts.partition).mode(mode)
    return lambda: writer.parquet(target)
