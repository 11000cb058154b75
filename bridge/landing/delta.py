"""Delta Lake tables: each bulk one commit of the table's own transaction log, exactly once by
Delta's idempotent writes instead of the bridge's rename protocol.

A bulk is written once, straight into the Delta table at `<warehouse>/<table>` (a local path or an
object store's URI) by one Spark job that reads the bulk's rows from the handoff file: one Delta
commit. The commit carries Delta's idempotent-write options, `txnAppId` (this bridge process,
`mqbridge.landing.ledger.app_id`) and `txnVersion` (a number per table that only grows, recorded in the ledger by
`Ledger.prepare` before the write). Delta keeps the newest version of every app id in the table's
log and *skips* a write whose version is not newer, so a commit retried after an error whose
outcome was unknown (a lost Spark Connect session, a JVM that died after the commit) lands once.

The protocol (`Landing.commit`): the rows ready (a typed bulk's unconvertible rows found and left
out first); `prepare` the bulk with its transaction; the commit; `mark_published`; only then the
source commits. After a crash the bulk is
prepared, and whether it landed is the table's answer, not a file's existence (`settle`): the
dead process's version is in the log (published if a commit carries the bulk's id; not if what put it
there is a fence of that version, another bridge that decided the bulk and died or has not forgotten it
yet, or a later version of the same process, committed after this bulk's write failed undecided) or it
is not. When it is not, the bridge first
*fences* it: an empty commit with that same app id and version. From then on a commit of that
version by the dead process's writer that was still under way (a Spark Connect server or cluster
finishing the job of a bridge that is gone) is skipped by Delta; which of the two came first is
told by the commit's user metadata (the bulk id or the fence's mark). A bulk whose rows are not in
the table is rolled back: its messages were never committed at the source and come again.

Every bulk is prepared for a table that exists: the writer makes a table empty before the first bulk it
lands there (`mqbridge.landing.delta_create`), so that a bulk's version can always be fenced, the
table's first bulk's too, whichever host its owner is on. A table that is not there when a bulk of it
is decided was removed since (by an operator), or the bulk was prepared by an earlier build of the
bridge, which made a table by its first bulk's commit: the bulk is forgotten unfenced only when its
owner is known dead by its pid (this host); an owner on another host, taken for dead because its lease
expired, may only be stalled and make the table later with the bulk in it, so its bulk waits
(LedgerUnavailableError: its messages go back) until the table exists or that bridge starts again.

Versions of one table are given and committed one after the other within a process (the caller
holds the table's lock across both): a smaller version committed after a larger one would be
skipped. A bulk whose write failed while its table could not be asked releases the lock undecided, and
the table's next bulks commit larger versions: its own version can then never commit, and `settle`
forgets it (tested: 10 of 400 messages were lost when the version alone counted as landed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import LedgerUnavailableError
from mqbridge.landing import jar_sets, log_store
from mqbridge.landing.ledger import Ledger, PreparedBulk, TableTransaction
from mqbridge.landing.ledger.owners import judged_by_pid
from mqbridge.landing.verdicts import holds_rows_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from mqbridge.landing.containers import Container

log = logging.getLogger(__name__)

#: The jar set (`mqbridge.landing.jar_sets`, under `[spark] jars_dir`) and the command that fetches it.
JAR_SET = "delta"
FETCH_COMMAND = "mqbridge jars --config <your configuration file>"
#: The jars the set must hold (prefixes of their file names).
REQUIRED_JARS = ("delta-spark_", "delta-storage-")
#: What a SparkSession needs to read and write Delta tables (besides the jars).
SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: The columns whose per-file statistics a Delta table the bridge creates keeps: put_timestamp, which the
#: bridge reads (`containers`: the purge's designation, `mqbridge tables`), and those a reader's filter can
#: skip whole files by, since each file holds one bulk of one type. Not msg_id, correlation_id or the
#: identity: their values spread over every file, so min/max skip nothing (a lookup by identity, `where`,
#: reads that column of the bulk's partitions).
STATS_COLUMNS = ("put_timestamp", "received_timestamp", "bulk_id", "message_type", "source", "destination")
#: Settings a session writing Delta tables starts with unless `[spark] conf` sets them: Delta rebuilds a
#: table's state from its log in this many tasks (50 by default: most of a small commit's time here);
#: VACUUM (the purge's and the compaction's) lists a table's files in
#: `parallelPartitionDiscovery.parallelism` tasks, 10,000 by default, one Spark job of 10,000 mostly
#: empty tasks per listing (75 s of every purge round on a 2-core machine, 5 s with 2): as many as the
#: driver host has cores. A table the bridge creates writes a checkpoint every 100 commits, not 10:
#: every bulk is a commit, and a checkpoint commit took 10-13 s against about 1.3 s for one without
#: (bench/delta_txn_commit.py; 45% of the mean commit time at 10), while a reader replays at most 100
#: small JSON commits. It keeps per-file statistics (min/max) of `STATS_COLUMNS` only, not of Delta's
#: default first 32 columns: a commit of 8,000 rows took 541 ms against 605 ms (median of 30,
#: bench/delta_txn_commit.py variants g and c). Tables that exist keep their own properties. The
#: checksum file of each version does not hold the table's list of files (`allFilesInCrc`): a commit
#: whose snapshot is another writer's version (another bridge on the same table) could not carry that
#: list forward, and rebuilt the table's whole state by Spark jobs to write it, in every commit: two
#: bridges on one table made 542-710 msg/s together against 4,641 for one alone, 3,193 without the list
#: (bench/scaling.py, docs/scaling.md).
DEFAULT_CONF = {"spark.databricks.delta.snapshotPartitions": "2",
                "spark.databricks.delta.allFilesInCrc.enabled": "false",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, os.cpu_count() or 2)),
                "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
                "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": ",".join(STATS_COLUMNS)}
#: What a driver writing Delta tables on a local file system gets besides (`session_conf`; `[spark] conf` wins).
#: Delta writes each version's checksum file (`<v>.crc`) through Spark's checkpoint file manager, whose
#: default for `file:` renames through Hadoop's FileContext, which forks a `readlink` per path it looks at
#: without Hadoop's native library (`java/LocalLinkLogStore.java`: 8 per commit, measured with strace); the
#: FileSystem-based one writes the file the same way, a temporary file renamed into place after a check that
#: the target is absent, without them. Only Delta's checksum file uses this manager here (the bridge runs no
#: Structured Streaming query), and only one writer commits a version, so only it writes that version's file.
LOCAL_WAREHOUSE_CONF = {"spark.sql.streaming.checkpointFileManagerClass":
                        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"}
#: The user metadata of a fence's empty commit (`settle`), followed by the app id and version.
FENCE_MARK = "mqbridge-fence"


def jar_files(jars_dir: Path) -> list[Path]:
    """The Delta Lake jars under `<jars_dir>/delta`. Raises ConfigError naming the command that
    fetches them when the folder or one of the jars is missing (a start-up error, before any
    listener connects)."""
    return jar_sets.present(jars_dir, JAR_SET, REQUIRED_JARS,
                            "[spark] table_format = \"delta\" needs the Delta Lake jars", FETCH_COMMAND)


def session_conf(jars_dir: Path, conf: Mapping[str, str], warehouse: Location | None = None) -> dict[str, str]:
    """The Spark settings a session that writes Delta tables gets besides `conf` (`[spark] conf`,
    which wins): the jars (added to any `spark.jars` of `conf`) and Delta's SQL extension and catalog;
    for a `warehouse` on `s3a://`, the log store that makes each commit by a conditional PUT, and for a
    local one (or none given) the one that makes it by a hard link when its jar is there
    (`mqbridge.landing.log_store`, its jar among the Delta jars) and LOCAL_WAREHOUSE_CONF."""
    jars = [str(j) for j in jar_files(jars_dir)]
    given = [j for j in conf.get("spark.jars", "").split(",") if j]
    result = {**SESSION_CONF, **DEFAULT_CONF, **conf, "spark.jars": ",".join([*given, *jars])}
    if isinstance(warehouse, ObjectStoreUri) and warehouse.scheme == "s3a":
        result = log_store.session_conf(Path(jars_dir) / JAR_SET, result, FETCH_COMMAND)
    elif not isinstance(warehouse, ObjectStoreUri):
        result = log_store.local_session_conf(Path(jars_dir) / JAR_SET, {**LOCAL_WAREHOUSE_CONF, **result})
    return result


#: Why a Spark without Delta Lake on its class path cannot write a Delta type: an outage of its sink.
MISSING_FROM_SPARK = (f"Spark cannot write Delta tables: Delta Lake is not on its class path (the bridge's own driver "
                      f"gets the jars of `{FETCH_COMMAND}`; a Spark Connect server or cluster must be started with "
                      "them, e.g. --jars and the spark.sql.extensions / spark.sql.catalog.spark_catalog settings "
                      "of docs/spark-and-tables.md)")


def missing_from_spark(exc: BaseException) -> bool:
    """Whether `exc` says Spark has no Delta Lake data source (the jars or its extension missing)."""
    text = str(exc)
    return ("DATA_SOURCE_NOT_FOUND" in text and "delta" in text.lower()) or "DeltaSparkSessionExtension" in text \
        or "io.delta" in text and "ClassNotFoundException" in text


def commit_options(bulk_id: str, transaction: TableTransaction | None) -> dict[str, str]:
    """The options of a bulk's Delta write: its schema merged (a new column is added; a narrowing
    change was refused before, `mqbridge.landing.schema_check`), the bulk id as the commit's user
    metadata (`settle`, `mqbridge.landing.delta_read`) and, with `transaction`, the idempotent-write
    id, so that Delta skips the write if that version of that app id already committed."""
    options = {"mergeSchema": "true", "userMetadata": bulk_id}
    if transaction is not None:
        options |= {"txnAppId": transaction.app_id, "txnVersion": str(transaction.version)}
    return options


def write_frame(frame: DataFrame, table_path: Path | str, bulk_id: str, transaction: TableTransaction | None) -> None:
    """Append `frame` (the landed columns, put_date among them) to the Delta table at `table_path` as
    one commit partitioned by put_date (`commit_options`)."""
    (frame.write.format("delta").mode("append").partitionBy("put_date")
     .options(**commit_options(bulk_id, transaction)).save(str(table_path)))


def write_probe(spark: SparkSession, location: str) -> None:
    """One row written as a Delta table at `location` (replacing what is there), then removed through
    the driver's Hadoop file system where the bridge's own driver runs; a Spark Connect server's
    probe table stays (one small table per bridge process under the table's `_staging`)."""
    spark.range(1).selectExpr("id", "current_timestamp() AS probed_at").write.format("delta") \
        .mode("overwrite").save(location)
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no driver objects here
        return
    path = jvm.org.apache.hadoop.fs.Path(location)
    path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(path, True)


def current_version(spark: SparkSession, table_path: Path | str) -> int:
    """The current version of the Delta table at `table_path` as Spark reads its log (DESCRIBE HISTORY);
    -1 when there is no Delta table there."""
    try:
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path}` LIMIT 1").collect()
    except Exception as exc:
        if "DELTA_MISSING_DELTA_TABLE" in str(exc) or "is not a Delta table" in str(exc) \
                or "PATH_NOT_FOUND" in str(exc):
            return -1
        raise
    return int(history[0]["version"]) if history else -1


def committed_version(spark: SparkSession, table_path: Path | str, app: str) -> tuple[int, int | None]:
    """(the table's current version, the newest `txnVersion` of `app` in its log or None); (-1, None)
    when there is no Delta table at `table_path` yet. Read with Spark from the log's JSON commits and
    checkpoint, which hold every app id's `txn` action."""
    from pyspark.sql import functions as F

    log_dir = f"{table_path}/_delta_log"
    current = current_version(spark, table_path)
    if current < 0:
        return -1, None
    found: int | None = None
    for reader, pattern in (("json", "*.json"), ("parquet", "*.checkpoint*.parquet")):
        try:  # (through Spark Connect a missing path fails at the action, not at `load`)
            frame = spark.read.format(reader).load(f"{log_dir}/{pattern}")
            if "txn" not in frame.columns:
                continue
            row = frame.where(F.col("txn.appId") == app).agg(F.max("txn.version").alias("v")).collect()
        except Exception as exc:  # no checkpoint yet
            if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
                continue
            raise
        if row and row[0]["v"] is not None:
            found = max(found or 0, int(row[0]["v"]))
    return current, found


def settle(ledger: Ledger, bulk: PreparedBulk, spark: SparkSession, table_path: Path | str) -> bool:
    """Decide a prepared bulk of a dead process that its table commits by transaction (see the
    module docstring): True when its rows are in the table (the bulk is then recorded published),
    False when they are not (fenced, then forgotten: its messages land again when they come back)."""
    transaction = bulk.transaction
    if transaction is None:
        raise ValueError(f"bulk {bulk.bulk_id} has no table transaction")
    before, version = committed_version(spark, table_path, transaction.app_id)
    if version is not None and version >= transaction.version:
        # The app id reached the bulk's version: by the bulk's commit; by a fence of it that another
        # bridge wrote before it died, or before it forgot the bulk (a fence commits only when the
        # version did not: Delta skips the fence's txnVersion otherwise); or by a later version of the
        # same process, committed after this bulk's write failed while the table could not be asked
        # (its store unreachable: the bulk was left undecided and the table's next bulks went on).
        # Only a commit carrying the bulk's id (or, once that commit left the log, the bulk's rows)
        # means its rows went in: recording it published on the version alone would commit its
        # messages at their source without landing them. Otherwise
        # Delta skips any write of that version from now on, so the bulk is forgotten unfenced.
        if not _landed(spark, table_path, bulk.bulk_id, after=-1):
            ledger.forget(bulk.bulk_id)
            return False
        ledger.mark_published(bulk.bulk_id)
        return True
    if before < 0 and not judged_by_pid(bulk.owner):
        raise LedgerUnavailableError(
            f"bulk {bulk.bulk_id} of {bulk.owner}, a bridge on another host whose lease expired, is prepared for "
            f"table {bulk.table}, which is not there (removed since, or the bulk is of an earlier build, which "
            "made a table by its first commit): with no table to fence it in, the bulk is decided once the table "
            "exists or once that bridge starts again on its host")
    if before >= 0:
        _fence(spark, table_path, transaction)
        if _landed(spark, table_path, bulk.bulk_id, after=before):
            ledger.mark_published(bulk.bulk_id)
            return True
    ledger.forget(bulk.bulk_id)
    return False


def _fence(spark: SparkSession, table_path: Path | str, transaction: TableTransaction) -> None:
    """An empty commit with `transaction`'s app id and version: a later commit of that version by
    the dead process's writer is skipped by Delta."""
    schema = spark.read.format("delta").load(str(table_path)).schema
    (spark.createDataFrame([], schema).write.format("delta").mode("append").partitionBy("put_date")
     .option("txnAppId", transaction.app_id).option("txnVersion", str(transaction.version))
     .option("userMetadata", f"{FENCE_MARK} {transaction.app_id} {transaction.version}")
     .save(str(table_path)))


def _landed(spark: SparkSession, table_path: Path | str, bulk_id: str, *, after: int) -> bool:
    """Whether the bulk's rows went into the table: a commit newer than version `after` carries its id,
    or the table holds a row of it. The rows are asked when no commit does, since commits leave the
    log's history (`delta.logRetentionDuration`, 30 days by default, at a checkpoint) while the app id's
    version stays in the checkpoint: a bulk committed that long before it is settled (its bridge down all
    that time, its messages still on their queue) would otherwise be taken for fenced and land again. A
    fence, or a later version that passed the bulk's, leaves no row of it (`verdicts.holds_rows_of`)."""
    return _committed_by(spark, table_path, bulk_id, after=after) \
        or holds_rows_of(spark.read.format("delta").load(str(table_path)), bulk_id)


def _committed_by(spark: SparkSession, table_path: Path | str, bulk_id: str, *, after: int) -> bool:
    """Whether a commit newer than version `after` carries `bulk_id` as its user metadata."""
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{table_path}`").where(f"version > {int(after)}") \
        .select("userMetadata").collect()
    return any(row["userMetadata"] == bulk_id for row in rows)


def prepared_of(bulks: Iterable[PreparedBulk]) -> list[PreparedBulk]:
    """The bulks among `bulks` that their table commits by transaction."""
    return [b for b in bulks if b.transaction is not None]


def is_delta_table(path: Location) -> bool:
    """Whether a Delta table (its log) is at `path`, a local directory or a store's URI."""
    from mqbridge.landing.delta_read import is_delta

    return is_delta(path)


def containers(table: Location) -> list[Container]:
    """Every put_date partition of the Delta table at `table` as its log describes it (the files of its
    current version, their row counts and put_timestamp statistics), oldest first: files a commit
    removed (a purge, OPTIMIZE) are not counted, although they stay in the storage until VACUUM. Read
    by delta-rs (the `delta` extra); [] when no table is there yet (on a store, where nothing else can be)."""
    import pyarrow as pa

    from mqbridge.landing.containers import Container

    if not is_delta_table(table):
        return []
    actions = pa.table(_delta_table(table).get_add_actions(flatten=True))
    by_date: dict[str, list[dict[str, Any]]] = {}
    for row in actions.select([c for c in ("path", "size_bytes", "num_records", "min.put_timestamp",
                                           "max.put_timestamp", "partition.put_date") if c in actions.column_names]
                              ).to_pylist():
        by_date.setdefault(str(row.get("partition.put_date")), []).append(row)
    root = table if isinstance(table, ObjectStoreUri) else Path(table)
    found = []
    for date, files in sorted(by_date.items()):
        oldest = [f["min.put_timestamp"] for f in files if f.get("min.put_timestamp") is not None]
        newest = [f["max.put_timestamp"] for f in files if f.get("max.put_timestamp") is not None]
        found.append(Container(cast(Path, root), date, tuple(cast(Path, root / f["path"]) for f in files),
                               sum(int(f["num_records"] or 0) for f in files), sum(int(f["size_bytes"]) for f in files),
                               min(oldest) if oldest else None, max(newest) if newest else None))
    return found


def table_version(table: Location) -> int:
    """The current version of the Delta table at `table` (delta-rs); -1 when there is none yet."""
    return int(_delta_table(table).version()) if is_delta_table(table) else -1


def _delta_table(table: Location) -> Any:
    from mqbridge.landing.delta_read import delta_table

    return delta_table(table)
