"""The Spark executor: appends bulks of one message type to Parquet tables.

A bulk becomes a pyarrow.Table with an explicit schema (the landed row, `mqbridge.landing.rows`),
then a DataFrame (`spark.createDataFrame(arrow_table)`), then one append to `<warehouse>/<table>`
partitioned by `put_date`; a raw bulk may be written by pyarrow instead (`mqbridge.landing.writer_choice`,
`mqbridge.landing.arrow_writer`). Typed bodies (json, xml, csv, fixed) are parsed with the type's schema
(`mqbridge.landing.formats`), so that one bad body fails only its own message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from mqbridge import failpoints
from mqbridge.config import TypeConfig
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError, SinkOutageError, SparkUnavailableError
from mqbridge.landing import arrow_writer, delta
from mqbridge.landing.catalog import CatalogRegistrar
from mqbridge.landing.containers import SORT_COLUMNS, tables_of
from mqbridge.landing.deadlines import abandoned_after, spark_guarded
from mqbridge.landing.formats import BodyFormat, body_format
from mqbridge.landing.handoff import bulk_frame, partitioned, raw_write, row_groups, scan_cores
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import TableTransaction, owner_id
from mqbridge.landing.object_stores import object_store_outage
from mqbridge.landing.publication import (
    STAGING,
    discard,
    owner_dirname,
    private_staging,
    publish,
    staged_moves,
    staging_dir,
    verify_staged,
)
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS, arrow_table
from mqbridge.landing.session import (
    DEFAULT_CONF,
    SparkSessions,
    connect_session_lost,
    connect_unavailable,
    connection_lost,
    is_connect,
    jvm_gone,
    one_line,
    write_probe,
    writes_as_this_user,
)
from mqbridge.landing.tables import add_types
from mqbridge.landing.writer_choice import arrow_codec
from mqbridge.message import Bulk, MessageResult, put_date_of

log = logging.getLogger(__name__)

#: Parquet writer options. Message ids and bodies are (nearly) all distinct: a dictionary for them
#: is built and then thrown away page after page, ~10% of the JVM's CPU per write (bench/spark_write.py).
WRITE_OPTIONS: dict[str, str] = {
    "parquet.enable.dictionary#msg_id": "false",
    "parquet.enable.dictionary#body": "false",
}
#: Bytes of message bodies per written Parquet file (and Spark task) of one bulk, at most.
FILE_BYTES = 128 << 20
#: Failpoints of a Spark write (tests only), reached through the DataFrame API's plan (`_stage_spark`).
SPARK_WRITE_FAILPOINTS = ("spark_poison_body", "spark_write_hang")
#: `[spark] write_timeout` when an executor is built without one (tests, benchmarks).
DEFAULT_WRITE_TIMEOUT = 600.0


class _TablePath:
    """The writes of this process into one table directory, shared by every executor because two
    types may land in the same table (`[collector] writes_per_type` writes of one type overlap too).

    `lock` makes them take turns where they must: a publication into the table, and the whole of
    an append straight into it (appends share its `_temporary`). Staging, each bulk in a private
    directory of its own, overlaps."""

    def __init__(self) -> None:
        self.lock = threading.RLock()


_tables: dict[Path | str, _TablePath] = {}
_guard = threading.Lock()


def _table_path(location: Path | str) -> _TablePath:
    """The `_TablePath` of the table at `location` (a local path or an object store's URI)."""
    with _guard:
        return _tables.setdefault(location.absolute() if isinstance(location, Path) else str(location), _TablePath())


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


def executors_for(spark: SparkSession | SparkSessions, warehouse: Path | ObjectStoreUri,
                  types: Mapping[str, TypeConfig], *, landing: Landing | None = None,
                  write_timeout: float = DEFAULT_WRITE_TIMEOUT,
                  catalog: bool = False, writer: str = "spark",
                  conf: Mapping[str, str] | None = None, table_format: str = "parquet") -> dict[str, SparkExecutor]:
    """One executor per configured message type (exactly-once through `landing` when given);
    `catalog`: each landed table is registered in the session's catalog (`mqbridge.landing.catalog`);
    `writer` and `conf` (the `[spark]` settings): who writes raw bulks (`arrow_codec`); `table_format`:
    `[spark] table_format`, which a type's own `table_format` overrides."""
    sessions = spark if isinstance(spark, SparkSessions) else SparkSessions(None, spark)
    registrar = CatalogRegistrar(sessions.get) if catalog else None
    codec = arrow_codec(writer, sessions, {**DEFAULT_CONF, **dict(conf or {})})
    return {name: SparkExecutor(sessions, warehouse, name, type_cfg, landing=landing, write_timeout=write_timeout,
                                catalog=registrar, arrow=codec, table_format=type_cfg.table_format or table_format,
                                conf=conf)
            for name, type_cfg in types.items()}


class SparkExecutor:
    """Appends bulks of one message type to <warehouse>/<table> as Parquet partitioned by put_date.

    `execute` never raises: a failed write makes every message RETRYABLE (except those already
    known to be PERMANENT); a typed body that does not fit the schema is PERMANENT for that message
    alone and the rest of the bulk lands. A write that cannot be the messages' fault is an outage
    (`MessageResult.sink_outage`): the JVM is gone (the session is then started again for the next
    write), Spark cannot be started, Spark refuses the type's schema, or the write ran longer than
    `write_timeout` (its job group is cancelled). Any other failure is triaged by the collector with `probe`.

    Nothing here starts Spark before it is needed: a type pyarrow writes never asks for a session
    (its writes and its probe are pyarrow's), a typed type asks on its first write or probe.

    Counters (read without a lock; updated under `_counted`, since two writes of a type may end
    together): `last_write_seconds` is the wall time of the last successful execute's Spark work
    (DataFrame, body parsing, append); `rows_written`, `bytes_written` (bytes of landed bodies) and
    `writes` are totals.
    """

    def __init__(self, spark: SparkSession | SparkSessions, warehouse: Path | ObjectStoreUri, message_type: str,
                 config: TypeConfig,
                 *, landing: Landing | None = None, write_timeout: float = DEFAULT_WRITE_TIMEOUT,
                 catalog: CatalogRegistrar | None = None, arrow: str | None = None,
                 table_format: str = "parquet", conf: Mapping[str, str] | None = None) -> None:
        self.sessions = spark if isinstance(spark, SparkSessions) else SparkSessions(None, spark)
        self.write_timeout = write_timeout
        self.message_type = message_type
        self.table = config.table or message_type  # a template such as "{destination}" (containers.py)
        self.format = config.format
        # `config` was validated at load (format and options agree, the table is a valid name); only
        # the DDL itself needs Spark's own parser, hence a session: parsed on first use (`body_format`).
        self._config = config
        self._format: BodyFormat | None = None
        # A URI of an object store or HDFS stays one (a Path would fold `s3a://b` into `s3a:/b`): only
        # Delta tables land there (`mqbridge.config.warehouse`), and only Spark and delta-rs read them.
        self.warehouse: Path | ObjectStoreUri = warehouse if isinstance(warehouse, ObjectStoreUri) else Path(warehouse)
        self._path: Path | ObjectStoreUri = self.warehouse / self.table
        self.landing = landing  # None: at-least-once, a plain append into the table
        self._conf = dict(conf or {})  # `[spark] conf`: names the object store's endpoint in an outage
        # A Delta Lake table (`mqbridge.landing.delta`): staged as Parquet by Spark, then one Delta commit.
        self.delta = table_format == "delta"
        # The pyarrow codec when pyarrow writes this type's bulks (`mqbridge.landing.arrow_writer`), else None.
        self.arrow = arrow if not config.schema_ddl and not self.delta else None
        self.catalog = catalog  # registers each table by name once it holds published rows
        self.last_write_seconds = 0.0
        self.rows_written = 0
        self.bytes_written = 0
        self.writes = 0
        self._counted = threading.Lock()

    @property
    def path(self) -> Path | ObjectStoreUri:
        """The table's directory or URI (of a template: with its placeholders, see `tables_of`)."""
        return self._path

    @property
    def spark(self) -> SparkSession:
        """The current session (started again if its JVM is gone)."""
        return self.sessions.get()

    @property
    def body_format(self) -> BodyFormat | None:
        """How a typed type's bodies are parsed (None for a raw one), its `schema` by Spark's own DDL
        parser, which needs a live session: the first use waits for it (SparkUnavailableError if it
        cannot start). ConfigError, naming the type, if Spark refuses the DDL."""
        if self._format is None and self._config.schema_ddl:
            self.sessions.get()
            self._format = body_format(self.message_type, self._config)
        return self._format

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        """Land `bulk`; one result per message, in the bulk's order."""
        results: list[MessageResult | None] = [None] * len(bulk.messages)
        writing: list[str] = []  # the rendered tables, each appended as its write starts
        try:
            self._execute(bulk, results, writing)
        except Exception as exc:
            outage = self._outage(exc)
            reason = f"Spark write failed: {outage or one_line(exc)}"
            log.warning("type %s: bulk %s (%d messages) not written to %s: %s", self.message_type,
                        bulk.bulk_id, len(bulk.messages), self._failed_table(writing), reason)
            log.debug("type %s: bulk %s write failure", self.message_type, bulk.bulk_id, exc_info=True)
            make = MessageResult.sink_outage if outage else MessageResult.retryable
            for i, message in enumerate(bulk.messages):
                if results[i] is None:  # messages known to be PERMANENT stay so
                    results[i] = make(message.msg_id, reason, bulk.bulk_id)
        return [r for r in results if r is not None]

    def probe(self) -> None:
        """One probe write for this sink by its writer: a row into `<table>/_staging/<owner>/probe`
        (where this process stages its bulks, so recovery removes it if the process dies meanwhile),
        then removed. Through Spark (started again first if the JVM is gone) where Spark writes this
        type's bulks, and its schema parsed; by pyarrow where pyarrow does, with no Spark at all.
        Raises SinkOutageError if the sink cannot be written to, and while a prepared bulk of its
        table waits for an operator's decision (`Landing.stuck_in`, `mqbridge.landing.stuck`)."""
        owner = self.landing.owner if self.landing is not None else owner_id()
        if not isinstance(self._path, Path):
            self._probe_object_store(owner)
            return
        target = staging_dir(self._path, owner, "probe")
        existed = self._path.exists()
        what = f"probe of {self.table}"
        try:
            self._refuse_while_stuck()
            if self.arrow is not None:
                private_staging(target)
                self._abandoned_after(f"arrow-probe-{self.message_type}", what, target,
                                      lambda: arrow_writer.write_probe(target))
            else:
                spark = self.sessions.get()
                if writes_as_this_user(spark):  # a probe may be the first to make `_staging`: private too
                    private_staging(target)
                spark_guarded(spark, self.message_type, what, lambda: write_probe(spark, target),
                              self.write_timeout)
                if self.delta:  # and a Delta commit beside it: Spark has Delta Lake on its class path
                    probe_table = staging_dir(self._path, owner, "probe-delta")
                    try:
                        spark_guarded(spark, self.message_type, what,
                                      lambda: delta.write_probe(spark, str(probe_table)), self.write_timeout)
                    finally:
                        discard(probe_table)
                _ = self.body_format  # a DDL Spark refuses keeps the sink unavailable, and says why
            # Read back here: a Spark that writes where this process does not look is down for the
            # bridge, whatever it says.
            verify_staged(staged_moves(self._path, target, "probe"), 1, target, what=f"probe of {self.table}")
            if self.landing is not None:  # the landing path is the ledger's too
                self.landing.probe()
        except Exception as exc:
            raise SinkOutageError(self._outage(exc) or one_line(exc)) from exc
        finally:
            discard(target)
            if not existed:  # leave no empty table directory behind (readers could not infer a schema)
                for empty in (target.parents[1], self._path):
                    with contextlib.suppress(OSError):
                        empty.rmdir()

    def _probe_object_store(self, owner: str) -> None:
        """`probe` of a Delta table on an object store: a one-row Delta table written by Spark under
        the table's `_staging/<owner>`, then removed (`delta.write_probe`); nothing to read back here,
        the store is the one place both this process and Spark read."""
        location = f"{self._path}/{STAGING}/{owner_dirname(owner)}/probe"
        try:
            self._refuse_while_stuck()
            spark = self.sessions.get()
            spark_guarded(spark, self.message_type, f"probe of {self.table}",
                          lambda: delta.write_probe(spark, location), self.write_timeout)
            _ = self.body_format  # a DDL Spark refuses keeps the sink unavailable, and says why
            if self.landing is not None:
                self.landing.probe()
        except Exception as exc:
            raise SinkOutageError(self._outage(exc) or one_line(exc)) from exc

    def _refuse_while_stuck(self) -> None:
        """SinkOutageError while a prepared bulk of this type's table waits for an operator's decision:
        no write would make the sink available."""
        stuck = self.landing.stuck_in(self.table, self.message_type) if self.landing is not None else None
        if stuck is not None:
            raise SinkOutageError(f"table {stuck.table} waits for an operator's decision on prepared bulk "
                                  f"{stuck.bulk_id} (`mqbridge ledger --abandon {stuck.bulk_id}`)")

    def _failed_table(self, writing: list[str]) -> str:
        """The table a failed write names: the rendered one it was writing (and the template it was
        rendered from), never the template alone where a table was rendered: an operator looks for
        `orders_sub1`, not for a directory `orders_{subscription}` that does not exist."""
        if writing:
            table = writing[-1]
            template = f", table template {self.table}" if table != self.table else ""
            return f"table {table} ({self.warehouse / table}{template})"
        if "{" in self.table:
            return f"table template {self.table} (failed before a table was rendered)"
        return f"table {self.table} ({self._path})"

    def _outage(self, exc: BaseException) -> str:
        """Why `exc` is an outage of the sink whatever the messages, or "" if it may be theirs."""
        store = object_store_outage(exc, self.warehouse, self._conf)
        if store:  # refused credentials, a missing bucket, an endpoint or namenode that does not answer
            return f"{store} ({exc})" if isinstance(exc, SinkOutageError) else store
        if isinstance(exc, SinkOutageError | SparkUnavailableError | ConfigError):
            # A write timeout, the ledger unavailable, staged files not where written, Spark not
            # started, or a schema Spark refuses.
            return str(exc)
        if self.delta and delta.missing_from_spark(exc):
            return delta.MISSING_FROM_SPARK
        session = self.sessions.current
        if session is not None and is_connect(session):
            if connect_session_lost(exc):  # the server restarted: only a new session gets through
                self.sessions.reset(session, f"the Spark Connect server no longer knows it ({one_line(exc)})")
                return f"Spark Connect session lost ({one_line(exc)})"
            if connection_lost(exc) or connect_unavailable(exc):
                return f"Spark Connect server unreachable ({one_line(exc)})"
            return ""
        gone = jvm_gone(session)
        if gone or connection_lost(exc):
            if session is not None:
                self.sessions.reset(session, "py4j lost its JVM" if gone else one_line(exc))
            return f"the Spark JVM is gone ({one_line(exc)})"
        return ""

    # -- internals -------------------------------------------------------------------------
    def _execute(self, bulk: Bulk, results: list[MessageResult | None], writing: list[str]) -> None:
        messages = bulk.messages
        parser = self.body_format
        if parser is not None:
            for i, message in enumerate(messages):
                reason = parser.precheck(message.body)
                if reason is not None:
                    results[i] = MessageResult.permanent(message.msg_id, reason, bulk.bulk_id)
        keep = [i for i, r in enumerate(results) if r is None]
        twins = self._twins(bulk, keep)
        if twins:
            keep = [i for i in keep if i not in twins]
        groups = tables_of(self.table, bulk, keep)
        for n, (table, rows) in enumerate(groups.items()):
            # One ledger bulk per table: a bulk spread over several destinations lands per table.
            ledger_bulk_id = bulk.bulk_id if len(groups) == 1 else f"{bulk.bulk_id}.{n}"
            path = self.warehouse / table
            writing.append(table)
            self._write(bulk, rows, table, path, ledger_bulk_id, results)
            landed = [bulk.messages[i] for i in rows if (r := results[i]) is not None and r.ok]
            if self.catalog is not None and landed and isinstance(path, Path):  # after publication: a name never
                # shows unlanded rows (no catalog on an object store: `mqbridge.config.warehouse`)
                self.catalog.register(table, path, {put_date_of(m) for m in landed})
        for twin, first in twins.items():  # landed once, as the first delivery with that identity
            result = results[first]
            if result is not None:
                results[twin] = dataclasses.replace(result, msg_id=messages[twin].msg_id)

    def _twins(self, bulk: Bulk, keep: list[int]) -> dict[int, int]:
        """Positions in `keep` whose identity an earlier position holds (a producer's retry, two
        identical bodies under `body-sha256`, two units coalesced into one bulk), each mapped to
        that earlier position: with the ledger an identity lands once per bulk, as it lands once
        across bulks, and both deliveries get its result. Without the ledger every row lands."""
        if self.landing is None:
            return {}
        first: dict[str, int] = {}
        twins: dict[int, int] = {}
        for i in keep:
            message = bulk.messages[i]
            key = message.identity or message.msg_id
            if key in first:
                twins[i] = first[key]
            else:
                first[key] = i
        return twins

    def _write(self, bulk: Bulk, keep: list[int], table: str, path: Path | ObjectStoreUri, ledger_bulk_id: str,
               results: list[MessageResult | None]) -> None:
        if self.delta:
            self._write_delta(bulk, keep, table, path, ledger_bulk_id, results)
            return
        if not isinstance(path, Path):  # refused at load already (`mqbridge.config.warehouse`)
            raise ConfigError(f"table {table}: Parquet tables land in a local warehouse, not {path}: set "
                              "table_format = \"delta\"")
        messages = bulk.messages
        start = time.perf_counter()
        existed = path.exists()
        landing = self.landing
        # Exactly-once: the bulk goes to its own staging directory, which no reader lists, and is
        # published below; at-least-once: Spark appends straight into the table, pyarrow stages
        # too (its files are not written atomically) and the files are moved in right after.
        staged = landing is not None or self.arrow is not None
        owner = landing.owner if landing is not None else owner_id()
        target = staging_dir(path, owner, ledger_bulk_id) if staged else path
        shared = _table_path(path)
        with contextlib.nullcontext() if staged else shared.lock:
            observation = self._stage(bulk, keep, target, staged, staging_dir(path, owner, f"{ledger_bulk_id}.rows"))
            failpoints.wait("after_write_staged")  # tests only: other writers land meanwhile
            # Without a ledger the rows are in the table from here on: nothing below may fail in a way
            # that would report them RETRYABLE (Observation.get only reads metrics the finished job delivered).
            if observation is not None and self._format is not None:
                for i, reason in self._format.corrupt_rows(observation).items():
                    results[i] = MessageResult.permanent(messages[i].msg_id, reason, bulk.bulk_id)
            landed = [i for i in keep if results[i] is None]
            with shared.lock:  # publications into one table one after another (see `_TablePath`)
                self._publish(bulk, landed, table, path, target, ledger_bulk_id, staged=staged)
        if not landed and not existed:
            _leave_as_it_was(path)
        self._landed(bulk, landed, table, path, ledger_bulk_id, results, start)

    def _landed(self, bulk: Bulk, landed: list[int], table: str, location: Path | str, ledger_bulk_id: str,
                results: list[MessageResult | None], start: float) -> None:
        """Record the rows `landed` of `bulk` as landed in `table`: their results, the counters."""
        messages = bulk.messages
        for i in landed:
            results[i] = MessageResult.success(messages[i].msg_id, ledger_bulk_id, table)
        if not landed:
            return
        with self._counted:
            self.last_write_seconds = time.perf_counter() - start
            self.rows_written += len(landed)
            self.bytes_written += sum(len(messages[i].body) for i in landed)
            self.writes += 1
        log.debug("type %s: bulk %s, %d rows appended to %s in %.3f s", self.message_type, bulk.bulk_id,
                  len(landed), location, self.last_write_seconds)

    def _write_delta(self, bulk: Bulk, keep: list[int], table: str, location: Path | str, ledger_bulk_id: str,
                     results: list[MessageResult | None]) -> None:
        """Land the rows `keep` of `bulk` as one commit of the Delta table at `location`, written once
        straight from the handoff (`mqbridge.landing.delta`): a typed bulk's rows Spark cannot convert are
        found first and left out, so that the ledger prepares exactly the rows the commit holds; then
        `Landing.commit` prepares the bulk with its transaction and runs the write, which each attempt
        builds again on the current session (a JVM that died meanwhile is started again)."""
        messages = bulk.messages
        start = time.perf_counter()
        owner = self.landing.owner if self.landing is not None else owner_id()
        rows = arrow_table(bulk, keep)
        handoff = self._delta_handoff(location, owner, ledger_bulk_id)
        ready: list[tuple[SparkSession, DataFrame]] = []  # a typed bulk's frame, parsed and kept by Spark
        what = f"Delta commit of bulk {ledger_bulk_id}"
        try:
            if self.body_format is not None:
                self._leave_out_corrupt(bulk, keep, rows, handoff, results, ready)
            landed = [i for i in keep if results[i] is None]
            if landed:
                def write(transaction: TableTransaction | None) -> None:
                    spark = self.sessions.get()
                    job = self._delta_job(spark, bulk, keep, rows, handoff, str(location), ledger_bulk_id,
                                          transaction, ready)
                    spark_guarded(spark, self.message_type, what, job, self.write_timeout)

                with _table_path(location).lock:  # versions of one table commit in the order given
                    if self.landing is not None:
                        self.landing.commit(ledger_bulk_id, table,
                                            [messages[i].identity or messages[i].msg_id for i in landed], write)
                    else:
                        write(None)
        finally:
            for _, frame in ready:
                with contextlib.suppress(Exception):  # a session whose JVM is gone took it along
                    frame.unpersist()
            if handoff is not None:
                discard(handoff)
                for empty in (handoff.parent, handoff.parents[1]):  # no staging left where the bulk's was the last
                    with contextlib.suppress(OSError):
                        empty.rmdir()
        self._landed(bulk, landed, table, location, ledger_bulk_id, results, start)

    def _delta_handoff(self, location: Path | str, owner: str, bulk_id: str) -> Path | None:
        """Where the bulk's rows are handed to Spark (`mqbridge.landing.handoff`): under the table's
        `_staging` on a local warehouse, as today; for an object store, a private local directory
        when Spark's executors run in this host's driver, else None (the rows go to Spark with
        `createDataFrame`: a cluster's or Spark Connect server's executors do not see this host's disk)."""
        if isinstance(location, Path):
            handoff = staging_dir(location, owner, f"{bulk_id}.rows")
            if self.arrow is not None or writes_as_this_user(self.sessions.get()):
                private_staging(handoff)
            return handoff
        spark = self.sessions.get()
        if is_connect(spark) or not str(spark.conf.get("spark.master", "")).startswith("local"):
            return None
        return Path(tempfile.mkdtemp(prefix="mqbridge-handoff-")) / bulk_id

    def _leave_out_corrupt(self, bulk: Bulk, keep: list[int], rows: pa.Table, handoff: Path | None,
                           results: list[MessageResult | None],
                           ready: list[tuple[SparkSession, DataFrame]]) -> None:
        """Parse a typed bulk's bodies by one Spark job and mark the rows Spark cannot convert PERMANENT
        in `results`; the parsed frame of the other rows is kept by Spark (`ready`) for the commit."""
        spark = self.sessions.get()
        tasks, groups = self._spread(spark, bulk, keep)
        frame, observation = self._frame(spark, rows, handoff, tasks, groups)
        frame = frame.persist()
        ready.append((spark, frame))
        spark_guarded(spark, self.message_type, f"parse of bulk {bulk.bulk_id}", frame.count, self.write_timeout)
        if observation is not None and self._format is not None:
            for i, reason in self._format.corrupt_rows(observation).items():
                results[i] = MessageResult.permanent(bulk.messages[i].msg_id, reason, bulk.bulk_id)

    def _delta_job(self, spark: SparkSession, bulk: Bulk, keep: list[int], rows: pa.Table, handoff: Path | None,
                   location: str, bulk_id: str, transaction: TableTransaction | None,
                   ready: list[tuple[SparkSession, DataFrame]]) -> Callable[[], object]:
        """The Spark job that commits the bulk's rows into the Delta table at `location`: from the
        in-process driver's own objects for a raw bulk (`raw_write`), else by the DataFrame API (a
        typed bulk's parsed frame when this session made it)."""
        options = delta.commit_options(bulk_id, transaction)
        tasks, groups = self._spread(spark, bulk, keep)
        if (handoff is not None and self.body_format is None and not is_connect(spark)
                and not failpoints.armed(*SPARK_WRITE_FAILPOINTS)):
            return raw_write(spark, rows, handoff, location, mode="append", tasks=tasks, sort=SORT_COLUMNS,
                             options=WRITE_OPTIONS, groups=groups, identity=IDENTITY_COLUMN, table_format="delta",
                             commit_options=options)
        frames = [frame for session, frame in ready if session is spark]
        frame = frames[0] if frames else self._frame(spark, rows, handoff, tasks, groups)[0]
        return lambda: delta.write_frame(frame, location, bulk_id, transaction)

    def _stage(self, bulk: Bulk, keep: list[int], target: Path, staged: bool, handoff: Path) -> Observation | None:
        """Write the rows `keep` of `bulk` to `target` (pyarrow or Spark, which reads them from a file
        under `handoff`, removed after); a staged part that failed is discarded. The Observation of a
        typed type's corrupt rows, when Spark wrote them."""
        try:
            if self.arrow is not None or writes_as_this_user(self.sessions.get()):
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
        landing = self.landing
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
        spark = self.sessions.get()
        rows = arrow_table(bulk, keep)
        tasks, groups = self._spread(spark, bulk, keep)
        what = f"write of bulk {bulk.bulk_id}"
        if self.body_format is None and not is_connect(spark) and not failpoints.armed(*SPARK_WRITE_FAILPOINTS):
            job = raw_write(spark, rows, handoff, str(target), mode=mode, tasks=tasks, sort=SORT_COLUMNS,
                            options=WRITE_OPTIONS, groups=groups)
            spark_guarded(spark, self.message_type, what, job, self.write_timeout)
            return None
        df, observation = self._frame(spark, rows, handoff, tasks, groups)
        writer = df.write.options(**WRITE_OPTIONS).partitionBy("put_date").mode(mode)
        spark_guarded(spark, self.message_type, what, lambda: writer.parquet(str(target)), self.write_timeout)
        return observation

    def _spread(self, spark: SparkSession, bulk: Bulk, keep: list[int]) -> tuple[int, int]:
        """(tasks, row groups) of the write of the rows `keep` of `bulk`. A bulk of more than FILE_BYTES
        is spread over a task (and file per put_date) per FILE_BYTES by a (local) shuffle. A smaller one
        is read in one task per core where each gets at least SPLIT_BYTES (the handoff file's row groups,
        `row_groups`): the job's wall time nearly halves on two cores, for the same JVM CPU; a small bulk
        stays one task and one file per put_date."""
        nbytes = sum(len(bulk.messages[i].body) for i in keep)
        return math.ceil(nbytes / FILE_BYTES), row_groups(nbytes, scan_cores(spark))

    def _frame(self, spark: SparkSession, rows: pa.Table, handoff: Path | None, tasks: int,
               groups: int) -> tuple[DataFrame, Observation | None]:
        """The landed rows of a bulk (`rows`, from `arrow_table`) as the DataFrame its write writes, in
        its tasks (`_spread`) and sorted within each; the Observation of a typed type's corrupt rows."""
        df = bulk_frame(spark, rows, handoff, 1 if tasks > 1 else groups)
        observation: Observation | None = None
        parser = self.body_format
        if parser is None:
            # The Arrow table's columns are already in order: dropping `_row` costs 6 py4j calls
            # where a select of 13 columns costs 57. Each call waits for the GIL, which the
            # listener threads keep busy, and the write is the bridge's serial bottleneck.
            df = df.drop("_row")
            df = df.withColumnRenamed("_identity", IDENTITY_COLUMN) if self.delta else df.drop("_identity")
        else:
            df, observation = parser.parse(df)
            identity = [F.col("_identity").alias(IDENTITY_COLUMN)] if self.delta else []
            df = df.select(*LANDED_COLUMNS[:-1], *identity, *parser.columns(), "put_date")
        df = partitioned(df, tasks, groups)
        # Rows ordered by their key within each file: time-range reads skip files by Parquet statistics.
        df = df.sortWithinPartitions(*SORT_COLUMNS)
        poison = failpoints.value("spark_poison_body")
        if poison is not None:  # test only: Spark fails the write of a bulk holding this body
            df = df.where(F.assert_true(~F.col("body").cast("string").contains(poison),
                                        F.lit(f"failpoint spark_poison_body: {poison}")).isNull())
        if failpoints.active("spark_write_hang"):
            df = df.where(failpoints.HANG_FILTER)  # test only: a write that never ends, until cancelled
        return df, observation

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
            arrow_writer.write_bulk(table, target, codec=codec, file_bytes=FILE_BYTES)

        self._abandoned_after(f"arrow-write-{self.message_type}", f"write of bulk {bulk.bulk_id}", target, write)

    def _abandoned_after(self, thread: str, what: str, target: Path, write: Callable[[], object]) -> None:
        """A pyarrow `write` to `target`, abandoned past `write_timeout` (`deadlines.abandoned_after`)."""
        timeout = self.write_timeout
        abandoned_after(timeout, thread, write,
                        logged=f"type {self.message_type}: pyarrow {what} to {target} running for more than "
                        f"write_timeout {timeout:.0f}s: abandoned (its staging directory is discarded)",
                        error=f"pyarrow {what} exceeded write_timeout ({timeout:.0f}s); the filesystem of "
                        f"{target.parent} does not answer")
