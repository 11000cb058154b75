"""A bulk's Delta commit through Delta's own transaction API (over py4j), without the `txnVersion`
lookup that makes every idempotent DataFrame write rebuild the table's whole state.

Why: the DataFrame writer with `txnAppId` / `txnVersion` (`mqbridge.landing.delta.write_frame`)
first asks `OptimisticTransaction.txnVersion(appId)`, which reads `Snapshot.transactions`, computed
from the snapshot's *full* state (every file of the table, rebuilt from the log and the last
checkpoint by Spark jobs); every commit makes a new version, so every commit pays it
(docs/performance.md, "Delta Lake"). On a bulk's first attempt the answer is known: the ledger
prepared the bulk with a version of this process's app id that nothing has committed, so the
lookup can only say "not yet".

What this does instead, for the in-process driver (its Java objects): the same `WriteIntoDelta`
command the writer runs (same files, statistics, schema merge, partitioning, `SetTransaction`
action and user metadata), on a transaction started here; on a first attempt the app id is only
*registered* as read (`readTxn`, what `txnVersion` records before its lookup), so that Delta's
conflict check still fails this commit with ConcurrentTransactionException when a commit of the
same app id (a settle's fence) won the race after this transaction started. A commit of that app id
that came before this transaction started cannot exist on a first attempt: the bulk's version was
given just before this write, and the fence of `settle` runs only after the write returned or
raised (`spark_guarded` waits for it; py4j calls are synchronous). Any other attempt
(`first_attempt=False`) does the lookup and skips the write when the version is already in the
log, as Delta's writer does.

A bridge whose ledger bridges on other hosts share (`TableTransaction.check_fence`) cannot take "not
yet" for granted on a first attempt: another host decides this process's bulk once its lease expires,
fencing its version, and this process may only have stalled, so the fence can be in the snapshot
before its transaction starts. It need not rebuild the state to see it, though: the fence came after
this process prepared the bulk, hence after its commit of the version before (versions of a table
commit in order, one at a time), so only the commits since that one are read (`_fenced`, a few JSON
files): a staged bulk's up to the table's newest version before its transaction starts (`_fenced_before`),
then only what landed since, so that the read does not widen the interval in which another writer's
commit makes this one lose the race (docs/scaling.md). The table's first version in this process looks
from the version the table had when this process made or found it (`delta_create.met_at`: before it
prepared any bulk of it); one after a gap (its version before never committed), or in a table the writer
did not make first, is looked up in full.

Spark Connect has no driver objects here: use `delta.write_frame` there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import from_arrow_schema

from mqbridge.landing import arrow_writer, delta_checksums, delta_create, delta_files
from mqbridge.landing.delta import commit_options
from mqbridge.landing.handoff import raw_frame
from mqbridge.landing.ledger import TableTransaction
from mqbridge.landing.rows import IDENTITY_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The column a bridge's Delta table is partitioned by.
PARTITION_COLUMN = delta_create.PARTITION_COLUMN

#: (table location, app id) -> the newest version this process began a commit of: versions of one
#: table are given and committed in order (`mqbridge.landing.delta`), so a version not above it is a
#: later attempt.
_attempted: dict[tuple[str, str], int] = {}
_attempted_lock = threading.Lock()
#: (table location, app id) -> (transaction version, table version) of this process's newest commit
#: there: where a fence of the next version can start (`_fenced`).
_committed: dict[tuple[str, str], tuple[int, int]] = {}


def raw_job(spark: SparkSession, rows: pa.Table, handoff: Path, location: str, *, tasks: int, groups: int,
            sort: Sequence[str], writer_options: Mapping[str, str], identity: str, bulk_id: str,
            transaction: TableTransaction | None) -> Callable[[], object]:
    """The job that commits a raw bulk's `rows` into the Delta table at `location` through Delta's
    transaction API (`write_frame`): the Java Dataset `mqbridge.landing.handoff.raw_frame` builds (read
    from the handoff file, `identity` kept, spread over `tasks` or the file's `groups`, sorted by
    `sort` within each task), calling it commits. The first call for a (table, app id, version) in this
    process is a first attempt (no lookup); any later one for the same asks the log first."""
    _, jdf = raw_frame(spark, rows, handoff, tasks=tasks, groups=groups, sort=sort, options=writer_options,
                       identity=identity)

    def commit() -> bool:
        first = _first_attempt(location, transaction)
        return write_frame(jdf, location, bulk_id, transaction, first_attempt=first, writer_options=writer_options,
                           spark=spark)

    return commit


def _first_attempt(location: str, transaction: TableTransaction | None) -> bool:
    """Whether this is the first commit this process begins of `transaction` in the table at `location`
    (recorded as begun); a bulk without a transaction has only first attempts."""
    if transaction is None:
        return True
    key = (str(location), transaction.app_id)
    with _attempted_lock:
        first = transaction.version > _attempted.get(key, 0)
        _attempted[key] = max(transaction.version, _attempted.get(key, 0))
    return first


def _in_log(jvm: Any, delta_log: Any, txn: Any, location: str, transaction: TableTransaction,
            first_attempt: bool, scanned_to: int | None = None) -> bool:
    """Whether `transaction`'s version of its app id is already in the snapshot of `txn` (a commit to
    skip), asked as cheaply as the attempt allows (see the module docstring); `scanned_to`: the versions
    up to it were scanned for a fence already (`_fenced_before`). The app id is registered as read in
    every case, so that a commit of it after `txn` started fails this one."""
    app, version = transaction.app_id, transaction.version
    if first_attempt and not transaction.check_fence:
        txn.readTxn().addOne(app)
        return False
    start = fence_scan_start(_committed.get((str(location), app)), version, delta_create.met_at(location))
    if first_attempt and start is not None:
        txn.readTxn().addOne(app)
        if scanned_to is not None:
            start = max(start, scanned_to + 1)
        return _fenced(jvm, delta_log, start, int(txn.readVersion()), transaction)
    return bool(txn.txnVersion(app) >= version)


def _fenced_before(jvm: Any, delta_log: Any, location: str, transaction: TableTransaction, newest: int) -> int | None:
    """Before a first attempt's transaction starts: scan the versions up to `newest` (all in the log) for a
    fence of `transaction` (`_fenced`), so that the scan in `_in_log`, between the transaction's start and
    its commit, reads only what landed since; a commit of another writer that lands in that interval makes
    this one lose the race and retry inside Delta (docs/scaling.md). The version scanned to (-1 when there
    is no place to start from: `_in_log` looks the version up in full); None when fenced."""
    start = fence_scan_start(_committed.get((str(location), transaction.app_id)), transaction.version,
                             delta_create.met_at(location))
    if start is None:
        return -1
    if _fenced(jvm, delta_log, start, newest, transaction):
        return None
    return newest


def fence_scan_start(last: tuple[int, int] | None, version: int, met: int | None) -> int | None:
    """The first table version that may hold a fence of this process's `version` of a table, given
    `last`, (transaction version, table version) of its newest commit there, and `met`, the table's
    version when this process made or found it (`delta_create.met_at`); None: look it up in full. A fence
    follows the bulk's prepare, which follows the commit of the version before, and, for the process's
    first version of the table, its meeting of the table (see the module docstring)."""
    if last is None:
        return None if met is None else met + 1
    return last[1] + 1 if last[0] == version - 1 else None


def _fenced(jvm: Any, delta_log: Any, start: int, end: int, transaction: TableTransaction) -> bool:
    """Whether a commit of the table's versions `start`..`end` carries `transaction`'s app id at its
    version or later (a fence: `mqbridge.landing.delta.settle`)."""
    if end < start:
        return False
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    changes = delta_log.getChanges(start, end, jvm.scala.Option.empty(), False)
    while changes.hasNext():
        for action in converters.asJava(changes.next()._2()):
            if (action.getClass().getSimpleName() == "SetTransaction" and action.appId() == transaction.app_id
                    and action.version() >= transaction.version):
                return True
    return False


def _record_commit(location: str, transaction: TableTransaction | None, committed: Any) -> None:
    """Remember the table version this process's commit (of `transaction`, if any) made (`committed`: that
    version, a Scala Option of it, or -1 / empty when nothing was committed)."""
    if not isinstance(committed, int):
        committed = int(committed.get()) if committed.isDefined() else -1
    delta_checksums.committed(str(location), committed)
    if transaction is not None and committed >= 0:
        _committed[(str(location), transaction.app_id)] = (transaction.version, committed)


def _start_transaction(jvm: Any, delta_log: Any, location: str) -> Any:
    """A transaction on the newest snapshot of the table of `delta_log`, loaded with its checksum file when
    another writer's commit is the newest (`delta_checksums`)."""
    delta_checksums.meet_newest(jvm, delta_log, str(location))
    txn = delta_log.startTransaction()
    delta_checksums.started(str(location), int(txn.readVersion()))
    return txn


def stage_raw(spark: SparkSession, rows: pa.Table, handoff: Path, location: str, *, tasks: int, groups: int,
              sort: Sequence[str], writer_options: Mapping[str, str], identity: str,
              bulk_id: str) -> StagedCommit | None:
    """Write a raw bulk's data files into the existing Delta table at `location` by one Spark job (the
    frame `raw_job` commits), without committing them: `StagedCommit.commit` does, in the table's turn,
    so that this job overlaps the commit of the bulk before it (`Bulk.files_written`), the table's
    first bulk's too (the writer makes a table before its first bulk, `mqbridge.landing.delta_create`).
    None, and nothing written, when the table is not there (removed since): the commit, in its turn,
    writes the files then."""
    _, jdf = raw_frame(spark, rows, handoff, tasks=tasks, groups=groups, sort=sort, options=writer_options,
                       identity=identity)
    pending = start(jdf, location, bulk_id, None, writer_options=writer_options, spark=spark)
    assert pending is not None  # no transaction: nothing to look up
    if pending.read_version < 0:
        return None
    return StagedCommit(spark, location, pending)


class StagedCommit:
    """A raw bulk's data files, written into a Delta table by their Spark job outside the table's turn,
    and not yet in its log (`stage_raw`): no reader sees them until `commit` adds them on a transaction
    started then, in the table's turn, with the bulk's SetTransaction. Files that are never committed
    (the process killed before, a retry, a schema change) stay unreferenced, invisible to every reader;
    `discard` removes them, and VACUUM removes what a kill left."""

    def __init__(self, spark: SparkSession, location: str, pending: PendingCommit) -> None:
        self.spark, self.location = spark, location
        jvm, self._pending = pending.jvm, pending
        none = jvm.scala.Option.empty()
        txn = pending.txn
        self._data = pending.command.writeAndReturnCommitData(txn, pending.jspark, none, False)
        #: The write changed the table's metadata (its schema merged with a new column): it was
        #: proposed on the snapshot of the job's start, which a commit in between may have changed,
        #: so the bulk must be written again in its turn (`DeltaWrites`).
        self.changes_metadata = not txn.metadata().equals(txn.snapshot().metadata())
        #: The job's SQL metrics (rows, files, bytes written), which Delta reports in the commit's
        #: operation metrics (DESCRIBE HISTORY): registered again on the committing transaction.
        self._metrics = jvm.java.util.HashMap()
        for name in jvm.scala.jdk.javaapi.CollectionConverters.asJava(
                txn.getMetricsForOperation(pending.operation)).keySet():
            metric = txn.getMetric(name)
            if metric.isDefined():
                self._metrics.put(name, metric.get())

    def usable(self, spark: SparkSession) -> bool:
        """Whether `commit` can commit the files through `spark`: the session whose job wrote them (its
        JVM holds their commit data), on the table's schema as the job found it."""
        return self.spark is spark and not self.changes_metadata

    def commit(self, transaction: TableTransaction | None, spark: SparkSession | None = None) -> bool:
        """Commit the staged files, with `transaction`'s SetTransaction, on a transaction of the table's
        current snapshot, as `write_frame` commits (a first attempt registers the app id as read; a
        later one looks it up): True when committed; False when the version was already in the log
        (the files discarded)."""
        pending = self._pending
        jvm = pending.jvm
        delta = jvm.org.apache.spark.sql.delta
        delta_log = delta.DeltaLog.forTable(pending.jspark, self.location)
        first = _first_attempt(self.location, transaction)
        scanned_to = None
        if transaction is not None and first and transaction.check_fence:
            newest = delta_checksums.meet_newest(jvm, delta_log, self.location)
            scanned_to = _fenced_before(jvm, delta_log, self.location, transaction, newest)
            if scanned_to is None:
                self.discard()
                return False
        txn = _start_transaction(jvm, delta_log, self.location)
        actions = jvm.java.util.ArrayList(jvm.scala.jdk.javaapi.CollectionConverters.asJava(self._data.actions()))
        if transaction is not None:
            if _in_log(jvm, delta_log, txn, self.location, transaction, first, scanned_to):
                self.discard()
                return False
            now = jvm.scala.Option.apply(jvm.java.lang.Long.valueOf(jvm.java.lang.System.currentTimeMillis()))
            actions.add(delta.actions.SetTransaction(transaction.app_id, transaction.version, now))
        utils = jvm.org.apache.spark.api.python.PythonUtils
        txn.registerSQLMetrics(pending.jspark, utils.toScalaMap(self._metrics))
        committed = txn.commitIfNeeded(utils.toSeq(actions), pending.operation, self._data.stringTags())
        _record_commit(self.location, transaction, committed)
        return True

    def discard(self) -> None:
        """Remove the staged data files (best effort: a file left is unreferenced, and VACUUM's)."""
        pending = self._pending
        delta_log = pending.txn.deltaLog()
        conf = pending.jspark.sessionState().newHadoopConf()
        for action in pending.jvm.scala.jdk.javaapi.CollectionConverters.asJava(self._data.actions()):
            if action.getClass().getSimpleName() == "AddFile":
                path = action.absolutePath(delta_log)
                path.getFileSystem(conf).delete(path, False)


def stage_arrow(spark: SparkSession, rows: pa.Table, table_dir: Path, *, codec: str, file_bytes: int,
                bulk_id: str) -> ArrowFiles | None:
    """Write a raw bulk's data files into the existing Delta table at `table_dir` (a local warehouse) with
    pyarrow, in this process, as the Parquet path's raw bulks are written (`arrow_writer.write_files`: the
    landed columns, `rows`' `_identity` as IDENTITY_COLUMN), each described by its `add` action
    (`mqbridge.landing.delta_files`); `ArrowFiles.commit` commits them in the table's turn. None, and
    nothing written, when the table is not there or its shape asks for Spark's writer
    (`delta_files.shape_problem`: said once per table in the log)."""
    jvm = spark._jvm
    assert jvm is not None
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table_dir)) \
        .unsafeVolatileSnapshot()
    if int(snapshot.version()) < 0:
        return None
    metadata = snapshot.metadata()
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    configuration = dict(converters.asJava(metadata.configuration()))
    files = rows.drop_columns(["_row"]).rename_columns(
        [IDENTITY_COLUMN if name == "_identity" else name for name in rows.column_names if name != "_row"])
    columns = delta_files.spark_type_names(files.schema, from_arrow_schema(files.schema).json())
    problem = delta_files.shape_problem(metadata.schemaString(), list(converters.asJava(metadata.partitionColumns())),
                                        configuration, columns)
    if problem:
        if _spark_writes.setdefault(str(table_dir), problem) == problem:
            log.info("Delta table %s: its bulks' files are written by Spark, not pyarrow: %s", table_dir, problem)
        return None
    stats = [name.strip() for name in configuration["delta.dataSkippingStatsColumns"].split(",")]
    vectors = configuration.get("delta.enableDeletionVectors", "false").lower() == "true"
    written = arrow_writer.write_files(files, table_dir, codec=codec, file_bytes=file_bytes)
    adds = [delta_files.add_action(table_dir, path, date, part, stats, vectors) for path, date, part in written]
    staged = ArrowFiles(spark, str(table_dir), bulk_id, metadata, adds, [path for path, _, _ in written],
                        rows=files.num_rows, size=sum(path.stat().st_size for path, _, _ in written))
    staged.prepare(spark)  # outside the table's turn (the class docstring)
    return staged


#: Delta tables whose bulks Spark writes (`stage_arrow`), with why: said once in the log.
_spark_writes: dict[str, str] = {}


class ArrowFiles:
    """A raw bulk's data files, written into a Delta table by pyarrow and not yet in its log (`stage_arrow`):
    as a `StagedCommit`, no reader sees them until `commit` adds them, in the table's turn, with the
    bulk's SetTransaction; files never committed are removed by `discard`, or by VACUUM after a kill.

    The commit's Java objects (the add actions, the operation, the metrics) are made when the files are
    written, outside the turn, as a Spark job's staged files have theirs, so that the turn holds only the
    commit. (The commit still takes longer in the bridge than a staged Spark job's: 0.35-0.54 s against
    0.19-0.28 s in the steady benchmark, 0.31-0.39 s with these objects made before; docs/performance.md.)"""

    changes_metadata = False  # the files hold the table's own columns (`delta_files.shape_problem`)

    def __init__(self, spark: SparkSession, location: str, bulk_id: str, metadata: Any, adds: list[str],
                 paths: list[Path], *, rows: int, size: int) -> None:
        self.spark, self.location, self.bulk_id = spark, location, bulk_id
        self._metadata, self._adds, self._paths = metadata, adds, paths
        self._rows, self._size = rows, size
        self._java: tuple[Any, Any, Any, Any] | None = None
        self._java_of: SparkSession | None = None

    def usable(self, spark: SparkSession) -> bool:
        """Files on disk need no particular session: any driver of this process commits them."""
        return True

    def prepare(self, spark: SparkSession) -> tuple[Any, Any, Any, Any]:
        """The commit's Java objects in `spark`'s JVM (made once per session): the add actions, the
        operation, the metrics of the write (Delta reports them in DESCRIBE HISTORY) and the commit's tags."""
        if self._java is None or self._java_of is not spark:
            jvm = spark._jvm
            assert jvm is not None
            delta = jvm.org.apache.spark.sql.delta
            actions = jvm.java.util.ArrayList()
            for add in self._adds:
                actions.add(delta.actions.Action.fromJson(add))
            metrics = jvm.java.util.HashMap()
            context = spark._jsparkSession.sparkContext()
            for name, value in (("numFiles", len(self._adds)), ("numOutputRows", self._rows),
                                ("numOutputBytes", self._size)):
                metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(context, name)
                metric.set(value)
                metrics.put(name, metric)
            utils = jvm.org.apache.spark.api.python.PythonUtils
            self._java = (actions, _write_operation(jvm, self.bulk_id), utils.toScalaMap(metrics), _scala_map(jvm, {}))
            self._java_of = spark
        return self._java

    def commit(self, transaction: TableTransaction | None, spark: SparkSession | None = None) -> bool | None:
        """Commit the files on a transaction of the table's current snapshot with `transaction`'s
        SetTransaction, as `StagedCommit.commit` does, through `spark` (this process's driver; the one
        they were staged with if None): True when committed; False when the version was already in the
        log; None, committing nothing, when the table's metadata changed since the files were written
        (a schema, a property: write the bulk again by Spark). The files are removed unless committed."""
        spark = spark or self.spark
        jvm = spark._jvm
        assert jvm is not None
        jspark = spark._jsparkSession
        added, operation, metrics, tags = self.prepare(spark)
        delta = jvm.org.apache.spark.sql.delta
        txn = _start_transaction(jvm, delta.DeltaLog.forTable(jspark, self.location), self.location)
        if not txn.metadata().equals(self._metadata):
            self.discard()
            return None
        actions = jvm.java.util.ArrayList(added)
        if transaction is not None:
            if _in_log(jvm, txn.deltaLog(), txn, self.location, transaction,
                       _first_attempt(self.location, transaction)):
                self.discard()
                return False
            now = jvm.scala.Option.apply(jvm.java.lang.Long.valueOf(jvm.java.lang.System.currentTimeMillis()))
            actions.add(delta.actions.SetTransaction(transaction.app_id, transaction.version, now))
        utils = jvm.org.apache.spark.api.python.PythonUtils
        txn.registerSQLMetrics(jspark, metrics)
        committed = txn.commitIfNeeded(utils.toSeq(actions), operation, tags)
        _record_commit(self.location, transaction, committed)
        return True

    def discard(self) -> None:
        """Remove the files (a file left is unreferenced, and VACUUM's)."""
        for path in self._paths:
            path.unlink(missing_ok=True)


def write_frame(frame: DataFrame | Any, table_path: Path | str, bulk_id: str, transaction: TableTransaction | None,
                *, first_attempt: bool = True, writer_options: Mapping[str, str] | None = None,
                spark: SparkSession | None = None) -> bool:
    """Append `frame` (a DataFrame of the in-process driver, or its Java Dataset, of `spark`, as
    `mqbridge.landing.handoff` builds it) to the Delta table at `table_path` as one commit partitioned
    by put_date, with the options of `delta.commit_options` (schema merged, `bulk_id` as the user
    metadata, `transaction` as its SetTransaction; `writer_options` for the Parquet writer, as the
    executor's WRITE_OPTIONS). True when committed; False when skipped because `transaction`'s
    version of its app id is already in the log (only asked when not `first_attempt`, see the module
    docstring). Raises what Delta raises, e.g. ConcurrentTransactionException when a commit of the
    same app id landed after this one's transaction started."""
    pending = start(frame, table_path, bulk_id, transaction, first_attempt=first_attempt,
                    writer_options=writer_options, spark=spark)
    if pending is None:
        return False
    _record_commit(str(table_path), transaction, pending.commit())
    return True


class PendingCommit:
    """A bulk's Delta transaction, started (its snapshot taken, the app id registered or looked up)
    and not yet written: `commit` writes the files and commits them."""

    def __init__(self, jvm: Any, jspark: Any, txn: Any, command: Any, operation: Any) -> None:
        self.jvm, self.jspark, self.txn, self.command, self.operation = jvm, jspark, txn, command, operation

    @property
    def read_version(self) -> int:
        """The version of the snapshot the transaction started on; -1 when the table has no commit yet."""
        return int(self.txn.readVersion())

    def commit(self) -> int:
        """Write the bulk's data files (one Spark job) and commit them with the SetTransaction and the
        user metadata; the table's new version."""
        none = self.jvm.scala.Option.empty()
        data = self.command.writeAndReturnCommitData(self.txn, self.jspark, none, False)
        committed = self.txn.commitIfNeeded(data.actions(), self.operation, data.stringTags())
        return int(committed.get()) if committed.isDefined() else -1


def start(frame: DataFrame | Any, table_path: Path | str, bulk_id: str, transaction: TableTransaction | None,
          *, first_attempt: bool = True, writer_options: Mapping[str, str] | None = None,
          spark: SparkSession | None = None) -> PendingCommit | None:
    """The first half of `write_frame`: the transaction started on the table's current snapshot; None
    when the version is already in the log (a later attempt's lookup)."""
    spark, jdf = _spark_and_java_frame(frame, spark)
    jvm = spark._jvm
    assert jvm is not None
    jspark = spark._jsparkSession
    delta = jvm.org.apache.spark.sql.delta
    scala = jvm.scala
    delta_log = delta.DeltaLog.forTable(jspark, str(table_path))
    txn = _start_transaction(jvm, delta_log, str(table_path))
    if transaction is not None and _in_log(jvm, delta_log, txn, str(table_path), transaction, first_attempt):
        return None
    options = {**(writer_options or {}), **commit_options(bulk_id, transaction)}
    delta_options = delta.DeltaOptions(_scala_map(jvm, options), jspark.sessionState().conf())
    partitions = _scala_seq(jvm, [PARTITION_COLUMN])
    append = jvm.org.apache.spark.sql.SaveMode.Append
    none = scala.Option.empty()
    command = delta.commands.WriteIntoDelta(delta_log, append, delta_options, partitions, _scala_map(jvm, {}), jdf,
                                            none, none, False)
    return PendingCommit(jvm, jspark, txn, command, _write_operation(jvm, bulk_id))


def _write_operation(jvm: Any, bulk_id: str) -> Any:
    """The operation of a bulk's commit, as WriteIntoDelta.run describes its commit (DESCRIBE HISTORY:
    operation WRITE, mode Append, partitionBy, the bulk's id as the user metadata; the schema merged)."""
    scala = jvm.scala
    none = scala.Option.empty()
    partitions = _scala_seq(jvm, [PARTITION_COLUMN])
    return getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")(
        jvm.org.apache.spark.sql.SaveMode.Append, scala.Option.apply(partitions), none, scala.Option.apply(bulk_id),
        none, none, scala.Option.apply(jvm.java.lang.Boolean.TRUE), none, none)


def _spark_and_java_frame(frame: Any, spark: SparkSession | None) -> tuple[SparkSession, Any]:
    """The SparkSession and Java Dataset of `frame` (a pyspark DataFrame, or a Java Dataset of `spark`)."""
    from pyspark.sql import DataFrame

    if isinstance(frame, DataFrame):
        return frame.sparkSession, frame._jdf
    if spark is None:
        raise TypeError("a Delta commit of a Java Dataset needs its SparkSession (spark=)")
    return spark, frame


def _scala_map(jvm: Any, items: dict[str, str]) -> Any:
    """`items` as an immutable Scala Map[String, String]."""
    java = jvm.java.util.HashMap()
    for key, value in items.items():
        java.put(key, value)
    return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(java)


def _scala_seq(jvm: Any, items: list[str]) -> Any:
    """`items` as an immutable Scala Seq[String]."""
    java = jvm.java.util.ArrayList()
    for item in items:
        java.add(item)
    return jvm.org.apache.spark.api.python.PythonUtils.toSeq(java)
