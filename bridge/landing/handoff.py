"""How a bulk's rows reach Spark: a Parquet file pyarrow writes beside the bulk's staged output,
which the Spark job reads (`bulk_frame`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from mqbridge.landing.rows import SPARK_SCHEMA


def bulk_frame(spark: SparkSession, rows: pa.Table, handoff: Path) -> DataFrame:
    """The bulk's rows as a DataFrame, read from an uncompressed Parquet file that pyarrow writes at
    `handoff` (a directory under the table's `_staging`, which the caller removes after the write).

    In-process Spark: `createDataFrame` would ship the rows inside the task instead ("task of very
    large size"): the JVM then deserialises and copies every row, ~3x its CPU per write on 16,000
    rows of 1 KB (docs/performance.md), where the Parquet reader maps the file's pages into column
    vectors. Spark Connect: `createDataFrame` sends the table as Arrow over gRPC, and the server
    turns it into a local relation row by row: 0.79-1.07 server CPU-s per write of 8,000 rows of
    1 KB against 0.45-0.58 s reading the same rows from the file (docs/performance.md). The server
    sees the file: `handoff` is in the warehouse, which the server writes the bulk's staged files
    to and the bridge publishes them from, so both must see it at the same path already."""
    handoff.mkdir(parents=True, exist_ok=True)
    path = handoff / "rows.parquet"
    pq.write_table(rows, path, compression="none", use_dictionary=False, store_schema=False)
    # With the schema given, Spark plans the read without opening the file's footer first.
    return spark.read.schema(SPARK_SCHEMA).parquet(str(path))
