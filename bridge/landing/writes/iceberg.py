"""Bulks into an Apache Iceberg table (`mqbridge.landing.iceberg`) of the `[spark.iceberg]` catalog, in a
local warehouse or on S3 (`s3a://`): each bulk ONE append by Spark, read from the bulk's handoff file, whose snapshot
carries the bulk's id and transaction, staged and published under the bulk's WAP id, so that recovery asks the
table's lineage whether it landed and fences it if not (`Landing.commit`, `iceberg.settle`)."""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession

from mqbridge.config.iceberg import IcebergCatalog, bound
from mqbridge.landing import iceberg
from mqbridge.landing.deadlines import spark_guarded
from mqbridge.landing.ledger import TableTransaction, owner_id
from mqbridge.landing.publication import discard, private_staging, staging_dir
from mqbridge.landing.rows import arrow_table
from mqbridge.landing.session import writes_as_this_user
from mqbridge.landing.writes import WriteContext
from mqbridge.landing.writes.frames import landed_frame, leave_out_corrupt, spread
from mqbridge.landing.writes.table_turns import table_turns
from mqbridge.message import Bulk, MessageResult

if TYPE_CHECKING:
    from mqbridge.config.warehouse import ObjectStoreUri

log = logging.getLogger(__name__)


class IcebergWrites:
    """Writes the bulks of one message type into Iceberg tables, one append per bulk, by Spark only, each
    writing thread on a session of its own (`_own_session`)."""

    name = "iceberg"

    def __init__(self, context: WriteContext) -> None:
        self._context = context
        self.arrow: str | None = None
        self._recorded: object | None = None  # the session whose driver JVM is recorded (`iceberg.record_driver`)
        self._tables: set[tuple[SparkSession, str]] = set()  # made by this writer (`_ensure_table`)
        self._sessions = threading.local()  # each writing thread's own session (`_own_session`)

    def write(self, bulk: Bulk, keep: list[int], table: str, location: Path | ObjectStoreUri,
              ledger_bulk_id: str, results: list[MessageResult | None]) -> list[int]:
        """Land the rows `keep` of `bulk` as one append to the Iceberg table `table`: a typed bulk's rows
        Spark cannot convert are found first and left out (the ledger prepares exactly the rows the
        append holds); the append is staged under the bulk's id, carrying the transaction it will be
        prepared with (`iceberg.stage`), before the table's turn; in the turn `Landing.commit` prepares
        the bulk and publishes it (`iceberg.publish_staged`). A staged append nobody publishes (the
        process died before the turn, the bulk was refused) stays unseen until snapshots expire."""
        context = self._context
        messages = bulk.messages
        landing = context.landing
        owner = landing.owner if landing is not None else owner_id()
        rows = arrow_table(bulk, keep)
        ready: list[tuple[SparkSession, DataFrame]] = []
        what = f"Iceberg append of bulk {ledger_bulk_id}"
        handoff: Path | None = None
        try:
            spark = self._own_session(context.sessions.get())
            handoff = self._handoff(spark, location, owner, ledger_bulk_id)
            if context.body_format is not None:
                leave_out_corrupt(self._context, bulk, keep, rows, handoff, results, ready, spark)
            landed = [i for i in keep if results[i] is None]
            if landed:
                def frame_of(spark: SparkSession) -> DataFrame:
                    frames = [frame for session, frame in ready if session is spark]
                    if frames:
                        return frames[0]
                    tasks, groups = spread(spark, bulk, keep)
                    frame = landed_frame(spark, rows, handoff, tasks, groups, context.body_format, identity=True)[0]
                    ready.append((spark, frame))
                    return frame

                # The table made before the bulk is prepared: a prepared bulk's table is always there, so
                # recovery finds it an Iceberg table (`format_of`) whatever the step the process died at.
                self._ensure_table(spark, table, frame_of(spark))
                # Staged before the table's turn (readers see nothing of it until it is published), so that the
                # type's next bulk runs its Spark job while this one waits for its turn and publishes.
                transaction = landing.transaction(table) if landing is not None else None
                staged: list[int | None] = []
                if transaction is not None:
                    frame = frame_of(spark)
                    spark_guarded(spark, context.message_type, what, lambda: staged.append(
                        iceberg.stage(frame, self._catalog, table, ledger_bulk_id, transaction)), context.write_timeout)
                    bulk.files_written()  # only the publish is left: the type's next bulk may start its job

                def write(transaction: TableTransaction | None) -> None:
                    spark = self._own_session(context.sessions.get())
                    self._record_driver(spark, owner)
                    if staged:
                        snapshot = staged.pop()
                        spark_guarded(spark, context.message_type, what,
                                      lambda: iceberg.publish_staged(spark, self._catalog, table, snapshot,
                                                                     ledger_bulk_id), context.write_timeout)
                    else:
                        frame = frame_of(spark)
                        spark_guarded(spark, context.message_type, what,
                                      lambda: iceberg.append(frame, self._catalog, table, ledger_bulk_id,
                                                             transaction), context.write_timeout)
                    self._forget_cached(context.sessions.get(), table)

                with table_turns(location).lock:  # one publish of a table at a time from this process
                    if landing is not None:
                        landing.commit(ledger_bulk_id, table,
                                       [messages[i].identity or messages[i].msg_id for i in landed], write,
                                       transaction)
                    else:
                        write(None)
        finally:
            for _, frame in ready:
                with contextlib.suppress(Exception):
                    frame.unpersist()
            if handoff is not None:
                discard(handoff)
                for empty in (handoff.parent, handoff.parents[1]):  # no staging left where the bulk's was the last
                    with contextlib.suppress(OSError):
                        empty.rmdir()
        return landed

    def _own_session(self, spark: SparkSession) -> SparkSession:
        """This thread's own session of `spark`'s driver (`SparkSession.newSession`: the same JVM and
        context, a configuration of its own), made once per thread and driver: an append is staged
        under a WAP id set on its frame's session (`iceberg.stage`), which no other write may use
        meanwhile, or it would be staged too (another type's, another table's of a template, a purge)."""
        local = self._sessions
        if getattr(local, "base", None) is not spark:
            local.base, local.session = spark, spark.newSession()
        own: SparkSession = local.session
        return own

    def _forget_cached(self, spark: SparkSession, table: str) -> None:
        """Drop the table from the catalog cache of the process's session `spark` (`REFRESH TABLE`): the
        append went through this thread's own session (`_own_session`), whose catalog is another instance,
        and Iceberg's catalog cache would show `spark`'s readers (a purge, a compaction, recovery) the table
        as it was for up to 30 s. Best effort: the append is done either way."""
        try:
            spark.sql(f"REFRESH TABLE {self._catalog.identifier(table)}")
        except Exception as exc:
            log.debug("REFRESH TABLE %s after an append failed: %s", table, exc)

    @staticmethod
    def _handoff(spark: SparkSession, location: Path | ObjectStoreUri, owner: str, bulk_id: str) -> Path | None:
        """Where the bulk's rows are handed to Spark (`mqbridge.landing.handoff`): under the table's
        `_staging` in a local warehouse; for an object store (the table's files are on the store, read by
        Spark through S3A), a private local directory when Spark's executors run in this host's driver,
        else None (the rows go to Spark with `createDataFrame`), as for Delta."""
        if isinstance(location, Path):
            handoff = staging_dir(location, owner, f"{bulk_id}.rows")
            if writes_as_this_user(spark):
                private_staging(handoff)
            return handoff
        if not str(spark.conf.get("spark.master", "")).startswith("local"):
            return None
        return Path(tempfile.mkdtemp(prefix="mqbridge-handoff-")) / bulk_id

    def probe(self, owner: str) -> None:
        """`BulkWrites.probe` by Spark: the catalog answers (`iceberg.write_probe`), and the session's
        driver JVM is recorded as this process's (`iceberg.record_driver`)."""
        context = self._context
        spark = context.sessions.get()
        self._record_driver(spark, owner)
        spark_guarded(spark, context.message_type, f"probe of {context.table}",
                      lambda: iceberg.write_probe(spark, self._catalog), context.write_timeout)

    def outage(self, exc: BaseException) -> str:
        """Iceberg missing from Spark (its jars, its catalog) is an outage: no bulk can be written."""
        return iceberg.MISSING_FROM_SPARK if iceberg.missing_from_spark(exc) else ""

    @property
    def _catalog(self) -> IcebergCatalog:
        """The loaded configuration's catalog (`config.iceberg.bound`), asked at each use."""
        return bound()

    def _ensure_table(self, spark: SparkSession, table: str, frame: DataFrame) -> None:
        """`iceberg.ensure_table` once per session and table, partitioned by the type's `partition_by`
        (a typed type's new column is added by the append itself, `merge-schema`)."""
        if (spark, table) in self._tables:
            return
        context = self._context
        spark_guarded(spark, context.message_type, f"creation of Iceberg table {table}",
                      lambda: iceberg.ensure_table(spark, self._catalog, table, frame, context.partition_by,
                                                   f"[types.{context.message_type}] partition_by"),
                      context.write_timeout)
        self._tables.add((spark, table))

    def _record_driver(self, spark: SparkSession, owner: str) -> None:
        if self._recorded is not spark:
            iceberg.record_driver(spark, self._catalog, owner)
            self._recorded = spark

