"""Bulks into a Delta Lake table (`mqbridge.landing.delta`), in a local warehouse, an object store or
HDFS: each bulk is one Delta commit, written once straight from the bulk's handoff (no staging
and renames), carrying the bulk's transaction (`txnAppId`/`txnVersion`, `delta.commit_options`) so
that recovery asks the table whether it committed (`Landing.commit`, `delta.settle`), into a table
made empty before its first bulk (`mqbridge.landing.delta_create`), so that every commit can be fenced."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from mqbridge import failpoints
from mqbridge.landing import delta, delta_commit, delta_create
from mqbridge.landing.containers import SORT_COLUMNS
from mqbridge.landing.deadlines import spark_guarded
from mqbridge.landing.ledger import TableTransaction, owner_id
from mqbridge.landing.publication import STAGING, discard, owner_dirname, private_staging, staging_dir
from mqbridge.landing.rows import ARROW_SCHEMA, IDENTITY_COLUMN, arrow_table
from mqbridge.landing.session import is_connect, store_answers, writes_as_this_user
from mqbridge.landing.writes import WriteContext
from mqbridge.landing.writes.frames import (
    FILE_BYTES,
    SPARK_WRITE_FAILPOINTS,
    WRITE_OPTIONS,
    landed_frame,
    leave_out_corrupt,
    spread,
)
from mqbridge.landing.writes.parquet import abandoned_write, probe_staged
from mqbridge.landing.writes.table_turns import table_turns
from mqbridge.message import Bulk, MessageResult

if TYPE_CHECKING:
    from mqbridge.config.warehouse import ObjectStoreUri
    from mqbridge.landing.formats import BodyFormat


class DeltaWrites:
    """Writes the bulks of one message type into Delta tables, one commit per bulk, committed by Spark's
    driver (a raw bulk's files in a local warehouse written by pyarrow when `[spark] writer` lets it)."""

    name = "delta"

    def __init__(self, context: WriteContext) -> None:
        self._context = context
        self.arrow: str | None = None

    def write(self, bulk: Bulk, keep: list[int], table: str, location: Path | ObjectStoreUri,
              ledger_bulk_id: str, results: list[MessageResult | None]) -> list[int]:
        """Land the rows `keep` of `bulk` as one commit of the Delta table at `location`, written once
        straight from the handoff (`mqbridge.landing.delta`): a typed bulk's rows Spark cannot convert are
        found first and left out, so that the ledger prepares exactly the rows the commit holds; the
        table is made if it is not there (`_make_table`); then `Landing.commit` prepares the bulk with
        its transaction and runs the write, which each attempt builds again on the current session (a
        JVM that died meanwhile is started again)."""
        context = self._context
        messages = bulk.messages
        landing = context.landing
        owner = landing.owner if landing is not None else owner_id()
        rows = arrow_table(bulk, keep)
        handoff = self._handoff(location, owner, ledger_bulk_id)
        ready: list[tuple[SparkSession, DataFrame]] = []  # a typed bulk's frame, parsed and kept by Spark
        staged: list[delta_commit.StagedCommit | delta_commit.ArrowFiles] = []  # a raw bulk's files, before its turn
        what = f"Delta commit of bulk {ledger_bulk_id}"
        try:
            if context.body_format is not None:
                leave_out_corrupt(self._context, bulk, keep, rows, handoff, results, ready)
            landed = [i for i in keep if results[i] is None]
            if landed:
                self._make_table(location)
                self._stage(bulk, keep, rows, handoff, location, ledger_bulk_id, staged)
                if staged:
                    bulk.files_written()  # only the commit is left: the type's next bulk may start its job

                def write(transaction: TableTransaction | None) -> None:
                    spark = context.sessions.get()
                    files = staged.pop() if staged else None
                    if files is not None and files.usable(spark):
                        outcome: list[bool | None] = []
                        spark_guarded(spark, context.message_type, what,
                                      lambda: outcome.append(files.commit(transaction, spark)), context.write_timeout)
                        if outcome != [None]:
                            return
                        # None: the table's metadata changed since pyarrow wrote the files: Spark writes the bulk
                    elif files is not None and files.spark is spark:
                        files.discard()  # written on a schema this bulk changes: written again below
                    job = self._job(spark, bulk, keep, rows, handoff, str(location), ledger_bulk_id, transaction, ready)
                    spark_guarded(spark, context.message_type, what, job, context.write_timeout)

                with table_turns(location).lock:  # versions of one table commit in the order given
                    if landing is not None:
                        landing.commit(ledger_bulk_id, table,
                                       [messages[i].identity or messages[i].msg_id for i in landed], write)
                    else:
                        write(None)
        finally:
            for files in staged:  # never committed (the bulk failed before its turn's write)
                with contextlib.suppress(Exception):
                    files.discard()
            for _, frame in ready:
                with contextlib.suppress(Exception):  # a session whose JVM is gone took it along
                    frame.unpersist()
            if handoff is not None:
                discard(handoff)
                for empty in (handoff.parent, handoff.parents[1]):  # no staging left where the bulk's was the last
                    with contextlib.suppress(OSError):
                        empty.rmdir()
        return landed

    def probe(self, owner: str) -> None:
        """`BulkWrites.probe` by Spark, which must have Delta Lake on its class path: in a local
        warehouse, the Parquet probe of the table's staging read back and a one-row Delta commit
        beside it (`delta.write_probe`); on an object store, that Delta commit under the table's
        `_staging/<owner>` alone, nothing to read back here: the store is the one place both this
        process and Spark read. Either is removed after."""
        context = self._context
        path = context.path
        if isinstance(path, Path):
            probe_staged(context, owner, None, beside=lambda spark, what: self._probe_commit(
                spark, what, staging_dir(path, owner, "probe-delta")))
            return
        location = f"{path}/{STAGING}/{owner_dirname(owner)}/probe"
        spark = context.sessions.get()
        spark_guarded(spark, context.message_type, f"probe of {context.table}",
                      lambda: delta.write_probe(spark, location), context.write_timeout)

    def outage(self, exc: BaseException) -> str:
        """Delta Lake missing from Spark's class path is an outage: no write of any bulk can succeed."""
        return delta.MISSING_FROM_SPARK if delta.missing_from_spark(exc) else ""

    def _probe_commit(self, spark: SparkSession, what: str, probe_table: Path) -> None:
        """A one-row Delta table written at `probe_table` by `spark`, then removed."""
        try:
            spark_guarded(spark, self._context.message_type, what,
                          lambda: delta.write_probe(spark, str(probe_table)), self._context.write_timeout)
        finally:
            discard(probe_table)

    def _make_table(self, location: Path | ObjectStoreUri) -> None:
        """Make the Delta table at `location` empty unless it is there (`delta_create.make_table`, asked
        once per table and process), before this bulk is prepared: a bulk is never prepared for a table
        that does not exist, so every commit can be fenced. Its columns are those of this type's bulks
        (`landed_frame` of no rows), its partitioning and properties a bulk's first commit would give it."""
        if delta_create.known(location):  # every bulk but a table's first in this process: no Spark call
            return
        context = self._context
        spark = context.sessions.get()
        def make() -> None:
            store_answers(spark, location)  # one request first: a silent or refusing store named after it
            delta_create.make_table(spark, location, lambda: empty_frame(spark, context.body_format))

        with table_turns(location).lock:  # two writers of this process (types sharing a table) ask one after the other
            spark_guarded(spark, context.message_type, f"making of Delta table {location}", make,
                          context.write_timeout)

    def _handoff(self, location: Path | str, owner: str, bulk_id: str) -> Path | None:
        """Where the bulk's rows are handed to Spark (`mqbridge.landing.handoff`): under the table's
        `_staging` on a local warehouse, as a Parquet table's; for an object store, a private local
        directory when Spark's executors run in this host's driver, else None (the rows go to Spark with
        `createDataFrame`: a cluster's or Spark Connect server's executors do not see this host's disk)."""
        if isinstance(location, Path):
            handoff = staging_dir(location, owner, f"{bulk_id}.rows")
            if writes_as_this_user(self._context.sessions.get()):
                private_staging(handoff)
            return handoff
        spark = self._context.sessions.get()
        if is_connect(spark) or not str(spark.conf.get("spark.master", "")).startswith("local"):
            return None
        return Path(tempfile.mkdtemp(prefix="mqbridge-handoff-")) / bulk_id

    def _by_transaction_api(self, spark: SparkSession, handoff: Path | None) -> bool:
        """Whether a bulk goes through Delta's transaction API (`mqbridge.landing.delta_commit`): a raw
        bulk (no body format) handed off by file to the in-process driver's own objects (not Spark
        Connect), unless a failpoint acts inside Spark's job (the DataFrame writer's path has them)."""
        return (handoff is not None and self._context.body_format is None and not is_connect(spark)
                and not failpoints.armed(*SPARK_WRITE_FAILPOINTS))

    def _stage(self, bulk: Bulk, keep: list[int], rows: pa.Table, handoff: Path | None,
               location: Path | ObjectStoreUri, bulk_id: str,
               staged: list[delta_commit.StagedCommit | delta_commit.ArrowFiles]) -> None:
        """Write a raw bulk's data files into its existing table before its turn, into `staged`, where `_job`
        would commit them through the transaction API: by pyarrow in this process in a local warehouse
        when pyarrow writes the type's raw bulks (`[spark] writer`, `delta_commit.stage_arrow`), else by
        a Spark job (`delta_commit.stage_raw`). The bulk then says so (`Bulk.files_written`), and the
        collector starts the next bulk of the type, whose files are written while this bulk commits (its
        turn only commits). A failed write raises here, before the ledger prepares anything, as a failed
        Parquet staging does."""
        context = self._context
        spark = context.sessions.get()
        if handoff is None or not self._by_transaction_api(spark, handoff):
            return
        codec = context.pyarrow_codec
        if codec is not None and isinstance(location, Path):
            written: list[delta_commit.ArrowFiles | None] = []
            abandoned_write(  # a write blocked in the filesystem cannot be interrupted: its thread is left
                context, f"arrow-write-{context.message_type}", f"write of bulk {bulk_id}", location,
                lambda: written.append(delta_commit.stage_arrow(spark, rows, location, codec=codec,
                                                                file_bytes=FILE_BYTES, bulk_id=bulk_id)),
                left="its files are in no commit")
            if written[0] is not None:
                staged.append(written[0])
                return
        tasks, groups = spread(spark, bulk, keep)

        def job() -> None:
            files = delta_commit.stage_raw(spark, rows, handoff, str(location), tasks=tasks, groups=groups,
                                           sort=SORT_COLUMNS, writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN,
                                           bulk_id=bulk_id)
            if files is not None:
                staged.append(files)

        spark_guarded(spark, context.message_type, f"Delta files of bulk {bulk_id}", job, context.write_timeout)

    def _job(self, spark: SparkSession, bulk: Bulk, keep: list[int], rows: pa.Table, handoff: Path | None,
             location: str, bulk_id: str, transaction: TableTransaction | None,
             ready: list[tuple[SparkSession, DataFrame]]) -> Callable[[], object]:
        """The Spark job that commits the bulk's rows into the Delta table at `location`: from the
        in-process driver's own objects for a raw bulk, committed through Delta's transaction API
        (`mqbridge.landing.delta_commit`: no `txnVersion` lookup on a first attempt), else by the DataFrame API (a
        typed bulk's parsed frame when this session made it)."""
        tasks, groups = spread(spark, bulk, keep)
        parser = self._context.body_format
        if handoff is not None and self._by_transaction_api(spark, handoff):
            return delta_commit.raw_job(spark, rows, handoff, location, tasks=tasks, groups=groups, sort=SORT_COLUMNS,
                                        writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN, bulk_id=bulk_id,
                                        transaction=transaction)
        frames = [frame for session, frame in ready if session is spark]
        frame = frames[0] if frames else landed_frame(spark, rows, handoff, tasks, groups, parser, identity=True)[0]
        return lambda: delta.write_frame(frame, location, bulk_id, transaction)


def empty_frame(spark: SparkSession, parser: BodyFormat | None) -> DataFrame:
    """The frame a bulk of no rows of a type would write (`landed_frame`; `parser`: the type's body
    format, None for a raw type): the columns, types and metadata of every bulk's commit, which the
    table made before the first bulk is given (`DeltaWrites._make_table`)."""
    return landed_frame(spark, ARROW_SCHEMA.empty_table(), None, 1, 1, parser, identity=True, bulk_write=False)[0]
