"""A bulk's rows as the DataFrame Spark writes, whatever the table format: its tasks and files
(`spread`), its columns (a typed type's parsed ones), its order within each file, and the test
failpoints of a Spark write (`landed_frame`). Delta's data files are Parquet files too, but Delta's
writer keeps only a few writer options (maxRecordsPerFile, compression; Delta 4.4's
`TransactionalWrite.writeFiles`): `WRITE_OPTIONS` reach a Parquet table's files, not a Delta table's
(setting them as session Hadoop settings instead measured no gain there: bench/delta_txn_commit.py
variants q and r)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from mqbridge import failpoints
from mqbridge.landing.containers import SORT_COLUMNS
from mqbridge.landing.deadlines import spark_guarded
from mqbridge.landing.formats import BodyFormat
from mqbridge.landing.handoff import bulk_frame, partitioned, row_groups, scan_cores
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS
from mqbridge.message import Bulk, MessageResult

if TYPE_CHECKING:
    from mqbridge.landing.session import SparkSessions

#: Parquet writer options. Message ids and bodies are (nearly) all distinct: a dictionary for them
#: is built and then thrown away page after page, ~10% of the JVM's CPU per write (bench/spark_write.py).
WRITE_OPTIONS: dict[str, str] = {
    "parquet.enable.dictionary#msg_id": "false",
    "parquet.enable.dictionary#body": "false",
}
#: Bytes of message bodies per written Parquet file (and Spark task) of one bulk, at most.
FILE_BYTES = 128 << 20
#: Failpoints of a Spark write (tests only), reached through the DataFrame API's plan (`landed_frame`).
SPARK_WRITE_FAILPOINTS = ("spark_poison_body", "spark_write_hang")


def spread(spark: SparkSession, bulk: Bulk, keep: list[int]) -> tuple[int, int]:
    """(tasks, row groups) of the write of the rows `keep` of `bulk`. A bulk of more than FILE_BYTES
    is spread over a task (and file per put_date) per FILE_BYTES by a (local) shuffle. A smaller one
    is read in one task per core where each gets at least SPLIT_BYTES (the handoff file's row groups,
    `row_groups`): the job's wall time nearly halves on two cores, for the same JVM CPU; a small bulk
    stays one task and one file per put_date."""
    nbytes = sum(len(bulk.messages[i].body) for i in keep)
    return math.ceil(nbytes / FILE_BYTES), row_groups(nbytes, scan_cores(spark))


def landed_frame(spark: SparkSession, rows: pa.Table, handoff: Path | None, tasks: int, groups: int,
                 parser: BodyFormat | None, *, identity: bool,
                 bulk_write: bool = True) -> tuple[DataFrame, Observation | None]:
    """The landed rows of a bulk (`rows`, from `arrow_table`) as the DataFrame its write writes, in
    its tasks (`spread`) and sorted within each; the Observation of a typed type's corrupt rows
    (`parser`: the type's body format, None for a raw type). `identity`: the rows keep their
    identity column (`IDENTITY_COLUMN`, a Delta table's), else it is dropped. `bulk_write`: the frame
    is a bulk's write, which the test failpoints of `SPARK_WRITE_FAILPOINTS` act on (not a table's
    empty creation)."""
    df = bulk_frame(spark, rows, handoff, 1 if tasks > 1 else groups)
    observation: Observation | None = None
    if parser is None:
        # The Arrow table's columns are already in order: dropping `_row` costs 6 py4j calls
        # where a select of 13 columns costs 57. Each call waits for the GIL, which the
        # listener threads keep busy, and the write is the bridge's serial bottleneck.
        df = df.drop("_row")
        df = df.withColumnRenamed("_identity", IDENTITY_COLUMN) if identity else df.drop("_identity")
    else:
        df, observation = parser.parse(df)
        kept = [F.col("_identity").alias(IDENTITY_COLUMN)] if identity else []
        df = df.select(*LANDED_COLUMNS[:-1], *kept, *parser.columns(), "put_date")
    df = partitioned(df, tasks, groups)
    # Rows ordered by their key within each file: time-range reads skip files by Parquet statistics.
    df = df.sortWithinPartitions(*SORT_COLUMNS)
    if not bulk_write:
        return df, observation
    poison = failpoints.value("spark_poison_body")
    if poison is not None:  # test only: Spark fails the write of a bulk holding this body
        df = df.where(F.assert_true(~F.col("body").cast("string").contains(poison),
                                    F.lit(f"failpoint spark_poison_body: {poison}")).isNull())
    if failpoints.active("spark_write_hang"):
        df = df.where(failpoints.HANG_FILTER)  # test only: a write that never ends, until cancelled
    return df, observation


class ParseContext(Protocol):
    """What `leave_out_corrupt` reads of a writer's context (a `mqbridge.landing.writes.WriteContext`)."""

    @property
    def sessions(self) -> SparkSessions: ...

    @property
    def message_type(self) -> str: ...

    @property
    def write_timeout(self) -> float: ...

    @property
    def body_format(self) -> BodyFormat | None: ...


def leave_out_corrupt(context: ParseContext, bulk: Bulk, keep: list[int], rows: pa.Table, handoff: Path | None,
                      results: list[MessageResult | None], ready: list[tuple[SparkSession, DataFrame]],
                      spark: SparkSession | None = None) -> None:
    """Parse a typed bulk's bodies by one Spark job and mark the rows Spark cannot convert PERMANENT in
    `results`; the parsed frame of the other rows is kept by Spark (`ready`) for the table format's
    write, which then writes only what parsed (Delta's commit, Iceberg's append). On `spark`, the
    session the write will use, when it is not the context's (Iceberg's writer has its own)."""
    spark = spark if spark is not None else context.sessions.get()
    tasks, groups = spread(spark, bulk, keep)
    parser = context.body_format
    frame, observation = landed_frame(spark, rows, handoff, tasks, groups, parser, identity=True)
    frame = frame.persist()
    ready.append((spark, frame))
    spark_guarded(spark, context.message_type, f"parse of bulk {bulk.bulk_id}", frame.count, context.write_timeout)
    if observation is not None and parser is not None:
        for i, reason in parser.corrupt_rows(observation).items():
            results[i] = MessageResult.permanent(bulk.messages[i].msg_id, reason, bulk.bulk_id)
