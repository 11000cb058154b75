"""Bulks into a Parquet table: a directory of Parquet files partitioned by `put_date`, in a local
warehouse.

Exactly-once (a ledger): a bulk is staged under `<table>/_staging/<owner>/<bulk>` (no reader lists
it) by Spark or pyarrow, and `Landing.land` verifies its files' footers, records it prepared, moves
its files in by renames and records it published (`mqbridge.landing.publication`). At-least-once:
Spark appends straight into the table, pyarrow stages too (its files are not written atomically)
and its files are moved in right after. A raw bulk may be written by pyarrow instead of Spark
(`mqbridge.landing.writer_choice`, `mqbridge.landing.arrow_writer`); Spark reads a bulk's rows from
a file under the staging directory (`mqbridge.landing.handoff`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import Observation, SparkSession

from mqbridge import failpoints
from mqbridge.errors import ConfigError
from mqbridge.landing import arrow_writer
from mqbridge.landing.containers import SORT_COLUMNS
from mqbridge.landing.deadlines import abandoned_after, spark_guarded
from mqbridge.landing.handoff import raw_write
from mqbridge.landing.ledger import owner_id
from mqbridge.landing.publication import (
    STAGING,
    discard,
    private_staging,
    publish,
    staged_moves,
    staging_dir,
    verify_staged,
)
from mqbridge.landing.rows import arrow_table
from mqbridge.landing.session import is_connect, write_probe, writes_as_this_user
from mqbridge.landing.tables import add_types
from mqbridge.landing.writes import WriteContext, frames
from mqbridge.landing.writes.frames import SPARK_WRITE_FAILPOINTS, WRITE_OPTIONS, landed_frame, spread
from mqbridge.landing.writes.table_turns import table_turns
from mqbridge.message import Bulk, MessageResult

if TYPE_CHECKING:
    from mqbridge.config.warehouse import ObjectStoreUri

log = logging.getLogger(__name__)

#: What Spark's committer leaves in a directory it appended no rows to (and its checksum).
_EMPTY_APPEND = frozenset({"_SUCCESS", "._SUCCESS.crc"})


def _leave_as_it_was(path: Path) -> None:
    """After a write that landed no rows into a table that did not exist when the write started: take
    away what the write left there, but only where nothing else is. Spark cannot read back a table
    directory without a Parquet file, so an empty one must not stay; yet other writers may have
    started on the table meanwhile (a thread of this process, another type, another bridge with its
    own ledger): their rows and staging must stay. So only empty directories go (`rmdir` refuses
    any other), and Spark's `_SUCCESS` of an append of no rows when it is all the table holds.
    Nothing is ever removed recursively here. A writer creating its staging in the table at that
    moment tries again (`private_staging`)."""
    with contextlib.suppress(OSError):
        (path / STAGING).rmdir()
    with contextlib.suppress(OSError):
        names = {p.name for p in path.iterdir()}
        if names and names <= _EMPTY_APPEND:
            for name in names:
                (path / name).unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def probe_staged(context: WriteContext, owner: str, arrow: str | None,
                 beside: Callable[[SparkSession, str], None] | None = None) -> None:
    """A probe row written into `<table>/_staging/<owner>/probe` (where this process stages its bulks,
    so recovery removes it if the process dies meanwhile) and read back, then removed: by pyarrow
    with the codec `arrow`, with no Spark at all, else by Spark (started again first if its JVM is
    gone), and then `beside(spark, what)`, another probe of the same session. Read back here: a Spark
    that writes where this process does not look is down for the bridge, whatever it says."""
    path = context.path
    if not isinstance(path, Path):
        raise ConfigError(f"table {context.table}: Parquet tables land in a local warehouse, not {path}")
    target = staging_dir(path, owner, "probe")
    existed = path.exists()
    what = f"probe of {context.table}"
    try:
        if arrow is not None:
            private_staging(target)
            abandoned_write(context, f"arrow-probe-{context.message_type}", what, target,
                             lambda: arrow_writer.write_probe(target))
        else:
            spark = context.sessions.get()
            if writes_as_this_user(spark):  # a probe may be the first to make `_staging`: private too
                private_staging(target)
            spark_guarded(spark, context.message_type, what, lambda: write_probe(spark, target), context.write_timeout)
            if beside is not None:
                beside(spark, what)
        verify_staged(staged_moves(path, target, "probe"), 1, target, what=what)
    finally:
        discard(target)
        if not existed:  # leave no empty table directory behind (readers could not infer a schema)
            for empty in (target.parents[1], path):
                with contextlib.suppress(OSError):
                    empty.rmdir()


def abandoned_write(context: WriteContext, thread: str, what: str, target: Path, write: Callable[[], object],
                    left: str = "its staging directory is discarded") -> None:
    """A pyarrow `write` to `target`, abandoned past `write_timeout` (`deadlines.abandoned_after`); the log
    says what becomes of what it `left`."""
    timeout = context.write_timeout
    abandoned_after(timeout, thread, write,
                    logged=f"type {context.message_type}: pyarrow {what} to {target} running for more than "
                    f"write_timeout {timeout:.0f}s: abandoned ({left})",
                    error=f"pyarrow {what} exceeded write_timeout ({timeout:.0f}s); the filesystem of "
                    f"{target.parent} does not answer")


class ParquetWrites:
    """Writes the bulks of one message type into Parquet tables partitioned by put_date (see the
    module's docstring), by pyarrow where the type's raw bulks are pyarrow's, else by Spark."""

    name = "parquet"

    def __init__(self, context: WriteContext) -> None:
        self._context = context
        self.arrow = context.pyarrow_codec

    def write(self, bulk: Bulk, keep: list[int], table: str, location: Path | ObjectStoreUri,
              ledger_bulk_id: str, results: list[MessageResult | None]) -> list[int]:
        """`BulkWrites.write` into the Parquet directory `location`: staged, then published."""
        if not isinstance(location, Path):  # refused at load already (`mqbridge.config.warehouse`)
            raise ConfigError(f"table {table}: Parquet tables land in a local warehouse, not {location}: set "
                              "table_format = \"delta\"")
        path = location
        messages = bulk.messages
        existed = path.exists()
        landing = self._context.landing
        # Exactly-once: the bulk goes to its own staging directory, which no reader lists, and is
        # published below; at-least-once: Spark appends straight into the table, pyarrow stages
        # too (its files are not written atomically) and the files are moved in right after.
        staged = landing is not None or self.arrow is not None
        owner = landing.owner if landing is not None else owner_id()
        target = staging_dir(path, owner, ledger_bulk_id) if staged else path
        shared = table_turns(path)
        with contextlib.nullcontext() if staged else shared.lock:
            observation = self._stage(bulk, keep, target, staged, staging_dir(path, owner, f"{ledger_bulk_id}.rows"))
            failpoints.wait("after_write_staged")  # tests only: other writers land meanwhile
            # Without a ledger the rows are in the table from here on: nothing below may fail in a way
            # that would report them RETRYABLE (Observation.get only reads metrics the finished job delivered).
            parser = self._context.body_format
            if observation is not None and parser is not None:
                for i, reason in parser.corrupt_rows(observation).items():
                    results[i] = MessageResult.permanent(messages[i].msg_id, reason, bulk.bulk_id)
            landed = [i for i in keep if results[i] is None]
            with shared.lock:  # publications into one table one after another (see `TableTurns`)
                self._publish(bulk, landed, table, path, target, ledger_bulk_id, staged=staged)
        if not landed and not existed:
            _leave_as_it_was(path)
        return landed

    def probe(self, owner: str) -> None:
        """`BulkWrites.probe`: `probe_staged` by this type's writer, pyarrow or Spark."""
        probe_staged(self._context, owner, self.arrow)

    def outage(self, exc: BaseException) -> str:
        """Nothing a Parquet write raises is an outage but what the executor knows already."""
        return ""

    def _stage(self, bulk: Bulk, keep: list[int], target: Path, staged: bool, handoff: Path) -> Observation | None:
        """Write the rows `keep` of `bulk` to `target` (pyarrow or Spark, which reads them from a file
        under `handoff`, removed after); a staged part that failed is discarded. The Observation of a
        typed type's corrupt rows, when Spark wrote them."""
        try:
            if self.arrow is not None or writes_as_this_user(self._context.sessions.get()):
                private_staging(handoff)  # and so `target`, beside it: no other user reads or swaps a staged file
            if self.arrow is not None:
                self._stage_arrow(bulk, keep, target, self.arrow)
                return None
            return self._stage_spark(bulk, keep, target, "overwrite" if staged else "append", handoff)
        except BaseException:
            if staged:
                discard(target)  # the staged part, if any; nothing reads or publishes it
            raise
        finally:
            discard(handoff)
            if not staged:  # an append straight into the table leaves no `_staging` behind
                with contextlib.suppress(OSError):
                    handoff.parents[1].rmdir()

    def _publish(self, bulk: Bulk, landed: list[int], table: str, path: Path, target: Path, ledger_bulk_id: str,
                 *, staged: bool) -> None:
        """Make the rows `landed`, written to `target`, part of the table at `path`: through the
        ledger (exactly-once); by moving the staged files in (at-least-once, pyarrow); or, where
        Spark appended straight into the table, by recording the type in its marker."""
        messages = bulk.messages
        landing = self._context.landing
        if landing is not None:
            if landed:
                landing.land(ledger_bulk_id, table, path, target,
                             [messages[i].identity or messages[i].msg_id for i in landed])
            else:
                discard(target)
        elif not staged and landed:
            # Spark appended straight into the table: record the type for the purge (a marker that
            # cannot be written only keeps this type's rows longer, it must not fail the landing).
            try:
                add_types(path, {bulk.message_type})
            except OSError as exc:
                log.warning("table %s: cannot record message type %s in its marker: %s", path, bulk.message_type, exc)
        elif staged:
            moves = staged_moves(path, target, ledger_bulk_id)
            verify_staged(moves, len(landed), target, what=f"bulk {ledger_bulk_id} of table {table}")
            publish(moves)
            discard(target)
            for empty in (target.parent, target.parents[1]):  # no ledger, no recovery: leave no trace
                with contextlib.suppress(OSError):
                    empty.rmdir()

    def _stage_spark(self, bulk: Bulk, keep: list[int], target: Path, mode: str, handoff: Path) -> Observation | None:
        """Write the rows `keep` of `bulk` to `target` by a Spark job; the Observation of the corrupt
        rows of a typed type."""
        context = self._context
        spark = context.sessions.get()
        rows = arrow_table(bulk, keep)
        tasks, groups = spread(spark, bulk, keep)
        what = f"write of bulk {bulk.bulk_id}"
        parser = context.body_format
        if parser is None and not is_connect(spark) and not failpoints.armed(*SPARK_WRITE_FAILPOINTS):
            job = raw_write(spark, rows, handoff, str(target), mode=mode, tasks=tasks, sort=SORT_COLUMNS,
                            options=WRITE_OPTIONS, groups=groups)
            spark_guarded(spark, context.message_type, what, job, context.write_timeout)
            return None
        df, observation = landed_frame(spark, rows, handoff, tasks, groups, parser, identity=False)
        writer = df.write.options(**WRITE_OPTIONS).partitionBy("put_date").mode(mode)
        spark_guarded(spark, context.message_type, what, lambda: writer.parquet(str(target)), context.write_timeout)
        return observation

    def _stage_arrow(self, bulk: Bulk, keep: list[int], target: Path, codec: str) -> None:
        """Write the rows `keep` of `bulk` to `target` with pyarrow (`mqbridge.landing.arrow_writer`), on a
        thread of its own that is abandoned past `write_timeout` (a write blocked in the filesystem
        cannot be interrupted): SparkWriteTimeoutError, an outage, and the caller discards `target`."""
        poison = failpoints.value("spark_poison_body")
        if poison is not None and any(poison.encode() in bulk.messages[i].body for i in keep):
            raise RuntimeError(f"failpoint spark_poison_body: {poison}")  # test only, as in _stage_spark
        table = arrow_table(bulk, keep)
        hang = failpoints.active("spark_write_hang")  # test only: a write that never ends

        def write() -> None:
            if hang:
                threading.Event().wait()
            arrow_writer.write_bulk(table, target, codec=codec, file_bytes=frames.FILE_BYTES)

        abandoned_write(self._context, f"arrow-write-{self._context.message_type}", f"write of bulk {bulk.bulk_id}",
                         target, write)
