"""The Spark executor: lands bulks of one message type in its table, whatever the table's format.

A bulk becomes a pyarrow.Table with an explicit schema (the landed row, `mqbridge.landing.rows`),
then one write into `<warehouse>/<table>` partitioned by `put_date`, by the writer of the type's
table format (`mqbridge.landing.writes`: a Parquet directory, or a Delta table), chosen once from
`[spark] table_format` or the type's own; a raw bulk may be written by pyarrow instead of Spark
(`mqbridge.landing.writer_choice`). Typed bodies (json, xml, csv, fixed) are parsed with the type's
schema (`mqbridge.landing.formats`), so that one bad body fails only its own message. What the
executor keeps, whatever the format: which rows of a bulk land where (prechecks, twins, one ledger
bulk per rendered table), what a failed write means (an outage or not), the counters.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from mqbridge.config import TypeConfig
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import (
    BulkFencedError,
    ConfigError,
    DuplicateIdentityError,
    SinkOutageError,
    SparkUnavailableError,
    one_line,
)
from mqbridge.landing.catalog import CatalogRegistrar
from mqbridge.landing.containers import tables_of
from mqbridge.landing.formats import BodyFormat, body_format
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import owner_id
from mqbridge.landing.object_stores import object_store_outage
from mqbridge.landing.session import (
    DEFAULT_CONF,
    SparkSessions,
    connect_session_lost,
    connect_unavailable,
    connection_lost,
    is_connect,
    jvm_gone,
)
from mqbridge.landing.writer_choice import arrow_codec
from mqbridge.landing.writes import BulkWrites, bulk_writes_for
from mqbridge.message import Bulk, MessageResult, put_date_of

log = logging.getLogger(__name__)

#: `[spark] write_timeout` when an executor is built without one (tests, benchmarks).
DEFAULT_WRITE_TIMEOUT = 600.0


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
    """Appends bulks of one message type to <warehouse>/<table> partitioned by put_date, in the type's
    table format (a Parquet directory or a Delta table: `mqbridge.landing.writes`).

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
        self.partition_by = config.partition_by  # an Iceberg table's partition transform (landing.iceberg)
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
        # What pyarrow would write this type's raw bulks with (`[spark] writer`), if the format lets it.
        self.pyarrow_codec = arrow if not config.schema_ddl else None
        self.table_format = table_format
        # Writes and probes the type's tables (`mqbridge.landing.writes`); ConfigError for an unknown format.
        self.bulk_writes: BulkWrites = bulk_writes_for(table_format, self)
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
    def arrow(self) -> str | None:
        """The pyarrow codec when pyarrow writes this type's bulks (`mqbridge.landing.arrow_writer`), else
        None: Spark writes them (a typed type's, a Delta table's, or by `[spark] writer`)."""
        return self.bulk_writes.arrow

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
        """One probe write for this sink by the writer of its table format (`BulkWrites.probe`: where
        this process stages or commits its bulks, then removed), by Spark (started again first if the
        JVM is gone) where Spark writes this type's bulks, and its schema parsed; by pyarrow where
        pyarrow does, with no Spark at all; then the ledger's. Raises SinkOutageError if the sink
        cannot be written to, and while a prepared bulk of its table waits for an operator's decision
        (`Landing.stuck_in`, `mqbridge.landing.stuck`)."""
        owner = self.landing.owner if self.landing is not None else owner_id()
        try:
            self._refuse_while_stuck()
            self.bulk_writes.probe(owner)
            _ = self.body_format  # a DDL Spark refuses keeps the sink unavailable, and says why
            if self.landing is not None:  # the landing path is the ledger's too
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
        written = self.bulk_writes.outage(exc)
        if written:  # what this table format's writes know of (Delta Lake missing from Spark)
            return written
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
            if self.catalog is not None and landed:  # after publication: a name never shows unlanded rows
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
        """Land the rows `keep` of `bulk` into `table` at `path` by the writer of the type's table format.

        The ledger may refuse the bulk's `prepare` because it holds some of its identities elsewhere:
        published by another bulk, or prepared by another (a bridge that read the same messages before
        their source gave them here again). Those messages are given back, uncounted (on redelivery
        the look-up knows their fate), and the rest is written again under the same ledger bulk id
        (the refusal recorded nothing). A bulk of this process that another decided meanwhile
        (`BulkFencedError`) gives every message back the same way."""
        start = time.perf_counter()
        while True:
            try:
                landed = self.bulk_writes.write(bulk, keep, table, path, ledger_bulk_id, results)
                break
            except DuplicateIdentityError as refused:
                held = set(refused.identities)
                back = [i for i in keep if (bulk.messages[i].identity or bulk.messages[i].msg_id) in held]
                self._give_back(bulk, back, f"not landed here: {one_line(refused)}", results)
                if not back:  # none of the rows named: not a conflict that leaving rows out resolves
                    raise
                keep = [i for i in keep if i not in set(back)]
                if not keep:
                    return
            except BulkFencedError as fenced:
                self._give_back(bulk, keep, one_line(fenced), results)
                return
        self._landed(bulk, landed, table, path, ledger_bulk_id, results, start)

    def _give_back(self, bulk: Bulk, rows: list[int], reason: str, results: list[MessageResult | None]) -> None:
        """The rows `rows` of `bulk` go back to their source uncounted (`MessageResult.given_back`)."""
        log.warning("type %s: bulk %s: %d messages given back: %s", self.message_type, bulk.bulk_id, len(rows), reason)
        for i in rows:
            results[i] = MessageResult.given_back(bulk.messages[i].msg_id, reason, bulk.bulk_id)

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
