"""How a bulk's rows reach Spark: a Parquet file pyarrow writes for an in-process session, Arrow over
gRPC for Spark Connect (`bulk_frame`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from mqbridge.landing.rows import SPARK_SCHEMA
from mqbridge.landing.session import is_connect


def bulk_frame(spark: SparkSession, rows: pa.Table, handoff: Path) -> DataFrame:
    """The bulk's rows as a DataFrame. Spark Connect: from the Arrow table itself, which travels to
    the server as Arrow over gRPC. In-process Spark: read from an uncompressed Parquet file that
    pyarrow writes at `handoff` (a directory the caller removes after the write). `createDataFrame`
    would ship the rows inside the task instead ("task of very large size"): the JVM then
    deserialises and copies every row, ~3x its CPU per write on 16,000 rows of 1 KB (see
    docs/performance.md), where the Parquet reader maps the file's pages into column vectors."""
    if is_connect(spark):
        return spark.createDataFrame(rows)
    handoff.mkdir(parents=True, exist_ok=True)
    path = handoff / "rows.parquet"
    pq.write_table(rows, path, compression="none", use_dictionary=False, store_schema=False)
    # With the schema given, Spark plans the read without opening the file's footer first.
    return spark.read.schema(SPARK_SCHEMA).parquet(str(path))
