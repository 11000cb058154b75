"""The composition root: the one place that turns a validated configuration into running objects.

    app = build_app(load_config("bridge.toml"))   # ConfigError if a preprocessor chain cannot be built
    exit_code = app.run(until_idle=10.0)

Every other module receives its parts ready made: the supervisor (`Bridge`) gets its collector,
memory guard, executor factory, chain and source factories and observers; each component gets its
own typed configuration section. Source adapters are found by their `kind` string
(`mqbridge.drivers.DRIVER_KINDS`) and observers from other packages (systemd's sd_notify) through the
`mqbridge.observers` entry points, so core imports none of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mqbridge import __version__
from mqbridge.backlog import BacklogPoller, ProbeFactory, probe_for
from mqbridge.bulks.breaker import SinkBreakers
from mqbridge.bulks.collector import BulkCollector, CollectorLimits, Executor, TypeLimits
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.counters import Counters
from mqbridge.drivers import open_source
from mqbridge.errors import LedgerUnavailableError
from mqbridge.landing import (
    DriverSecrets,
    Landing,
    SparkSessions,
    SparkWarmup,
    check_warehouse,
    executors_for,
    recover,
    schema_checks,
    spark_needed,
    spark_writes_bulks,
    spark_written,
    type_tables,
)
from mqbridge.landing.archive_maker import ArchiveMaker
from mqbridge.landing.ledger import PreparedBulk, open_ledger, owner_id
from mqbridge.landing.object_stores import object_store_outage
from mqbridge.landing.schema_verdicts import check_schemas
from mqbridge.landing.session import store_answers
from mqbridge.lint import start_warnings
from mqbridge.maintenance.compaction_scheduler import CompactionScheduler
from mqbridge.maintenance.entries import request_deleter
from mqbridge.maintenance.purge.scheduler import PurgeScheduler
from mqbridge.monitoring import MonitoringServer, ProgressLine, initialize_series
from mqbridge.observer import Observer, installed_observers
from mqbridge.plugins import PluginHost, ResultObserver
from mqbridge.strict_modes import check_trusted
from mqbridge.supervision.guard import MemoryGuard
from mqbridge.supervision.reload import ConfigReloader
from mqbridge.supervision.supervisor import Bridge, ChainFactory, SourceFactory
from mqbridge.table_formats import command_session_conf, format_named, format_of, format_of_bulk, formats_configured
from mqbridge.tracing.backout_log import BackoutLog
from mqbridge.tracing.where import NO_LEDGER, Locator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mqbridge.config import BridgeConfig, CollectorSection, SparkSection, TypeConfig
    from mqbridge.landing.session import SessionFactory

log = logging.getLogger(__name__)


@dataclass
class App:
    """A bridge and what runs beside it: plugins, Spark, the monitoring endpoint."""

    config: BridgeConfig
    bridge: Bridge
    plugins: PluginHost
    monitor: MonitoringServer | None  # None when [monitoring] listen = ""
    landing: Landing | None  # None when [bridge] exactly_once = false
    #: Starts Spark and checks what needs it (None: no Spark needed, or executors given), beside the
    #: listeners, or before them with Spark Connect (`mqbridge.landing.warmup`).
    warmup: SparkWarmup | None = None
    #: The types whose bulks Spark writes: their sinks are unavailable while Spark cannot start.
    spark_sinks: Sequence[str] = ()
    #: Where moves to a backout queue are recorded (`mqbridge where`); closed after the bridge.
    backout_log: BackoutLog | None = None

    def run(self, until_idle: float | None = None) -> int:
        """Start, supervise until stopped (or idle for `until_idle` seconds), shut down; the exit
        code: 0 drained, 1 not drained or a listener halted, 2 fatal (configuration)."""
        cfg = self.config
        log.info("mqbridge %s starting: %s (%d listener threads)", __version__, cfg.path,
                 sum(listener.start_threads for listener in cfg.listeners))
        for finding in start_warnings(cfg):  # accepted, but an operator should know; `check-config` says the same
            log.warning("%s", finding.text())
        monitor, warmup = self.monitor, self.warmup
        try:
            if monitor is not None:
                monitor.bind()  # a taken port fails here, before anything has started
            self.recover()  # the ledger and the file system only: no Spark
            check_schemas(cfg)  # Parquet footers, no Spark: a refused schema change stops here, nothing read
            if warmup is not None:
                if cfg.spark.remote:
                    warmup.run()  # WarehouseInvisibleError stops here, before anything is read
                else:
                    warmup.start(self.bridge.fail, self.spark_outage)  # listeners connect while the JVM comes up
            self.bridge.start()
            if monitor is not None:
                monitor.start()
            return self.bridge.run(until_idle=until_idle)
        finally:
            if monitor is not None:
                monitor.stop()
            if warmup is not None:
                warmup.join()
            self.plugins.close()
            if self.backout_log is not None:
                self.backout_log.close()
            if self.landing is not None:
                self.landing.close()

    def spark_outage(self, reason: str) -> None:
        """Spark could not be started: the sinks it writes are unavailable (`mqbridge.bulks.breaker`)."""
        breakers = self.bridge.breakers
        if breakers is not None:
            for name in self.spark_sinks:
                breakers.trip(name, reason)

    def recover(self) -> None:
        """Before any listener connects: roll every bulk a dead process left prepared forward, and
        remove staging and `_temporary` leftovers, and finish or roll back purges killed mid-run
        (exactly-once only). A bulk that cannot be rolled forward (its files are gone) makes the
        sinks of its table unavailable until an operator decides (`mqbridge.landing.stuck`)."""
        if self.landing is None:
            return
        warehouse = self.config.resolve_warehouse()
        if isinstance(warehouse, ObjectStoreUri):
            # Only Delta tables land there (`config.warehouse`): their dead processes' bulks are decided
            # by their tables once Spark is up (`Landing.delta_duties`); nothing is staged to remove.
            return
        tables = list(type_tables(warehouse, self.config.types))
        report = recover(self.landing.ledger, tables, warehouse=warehouse)
        for table in tables:  # a purge killed mid-run: finished or rolled back (its format's `recover`)
            format_of(table).recover(table)
        # A bulk whose files are gone waits for an operator: only its tables' sinks wait meanwhile.
        for name, reason in self.landing.hold(report.stuck, self.config.types).items():
            if self.bridge.breakers is not None:
                self.bridge.breakers.trip(name, reason)
        counters = self.bridge.counters
        counters.inc("recovery_rolled_forward", report.rolled_forward)
        counters.inc("recovery_rolled_back", report.rolled_back)
        counters.inc("recovery_stale_dirs_removed", report.stale_dirs_removed)


def build_app(config: BridgeConfig, *, spark: SparkSession | None = None,
              executors: Mapping[str, Executor] | None = None,
              source_factory: SourceFactory = open_source,
              chain_factory: ChainFactory | None = None,
              observers: Sequence[Observer] = (),
              counters: Counters | None = None,
              stop_event: threading.Event | None = None,
              reload_event: threading.Event | None = None,
              session_factory: SessionFactory | None = None,
              backlog_probe: ProbeFactory = probe_for) -> App:
    """Build every part of a bridge from `config`; nothing is started or connected yet.

    Loads the plugins and builds every listener's preprocessor chain (ConfigError if one names an
    unknown preprocessor or gives bad options). `spark` is an existing session to use (tests, the
    benchmark); otherwise one is started when the bridge starts, if anything needs it
    (`mqbridge.landing.warmup`). `executors` replaces the Spark executors (tests); `source_factory`
    the adapter registry (the IBM MQ fake), `backlog_probe` the adapters' backlog probes (the same);
    `chain_factory` the plugin host's preprocessor chains (tests of the listener loop);
    `session_factory` how a Spark session is started (tests count the starts). `stop_event` and
    `reload_event` are set by signal or service control handlers.
    """
    counters = counters or Counters()
    # Checked whatever the ledger's backend (the SQLite ledger checks its own file too): the state
    # the bridge keeps must not be changeable by another local user (mqbridge.strict_modes).
    check_trusted(config.resolve_path(config.bridge.state_dir), "state_dir")
    initialize_series(counters, [(cfg.source, cfg.queue) for cfg in config.listeners],
                      ledger=config.bridge.exactly_once,
                      purge=config.purge.interval is not None and config.bridge.exactly_once,
                      compaction=config.compaction.interval is not None and config.bridge.exactly_once)
    plugins = PluginHost.from_config(config, counters=counters)
    plugins.start()
    breakers = SinkBreakers(config.types, counters, probe_max=config.spark.probe_interval_max)
    collector = _build_collector(config.collector, config.types, counters, breakers, plugins)
    landing = open_landing(config, counters)
    state_dir = config.resolve_path(config.bridge.state_dir)
    # The driver's class-data archive made by the bridge itself (only where it starts its own driver).
    make_archive = (config.spark.class_archive == "auto" and not config.spark.remote and spark is None
                    and executors is None)
    sessions = SparkSessions(_spark_section(config), spark, secrets=DriverSecrets.of(config), create=session_factory,
                             state_dir=state_dir, record_classes=make_archive)
    if landing is not None and _transactional_types(config):
        _land_by_table_commits(config, sessions, landing)
    make_executors: Callable[[], Mapping[str, Executor]] = (
        (lambda: executors) if executors is not None else _spark_executors(config, sessions, landing))
    guard = MemoryGuard(config.bridge.max_rss, counters)
    backout_log = BackoutLog.in_state_dir(state_dir, secrets=config.secrets().values())
    bridge = Bridge(config, collector=collector, executors=make_executors,
                    chain_factory=chain_factory or plugins.chain_provider,
                    source_factory=source_factory, counters=counters, guard=guard,
                    # Plugins before the configuration file: a reload request rescans plugins first.
                    observers=[plugins, ConfigReloader(), guard, breakers, *([landing] if landing else []),
                               *observers],
                    dedupe=landing, stop_event=stop_event, reload_event=reload_event, breakers=breakers,
                    backout_log=backout_log)
    # Both swap under the ledger's lock: without a ledger they are ignored (`lint.start_warnings` says so).
    if config.purge.interval is not None and landing is not None:
        bridge.observers.append(PurgeScheduler(config, sessions.get, counters))
    if config.compaction.interval is not None and landing is not None:
        bridge.observers.append(CompactionScheduler(config, sessions.get, counters))
    if make_archive:
        bridge.observers.append(ArchiveMaker(sessions, state_dir, config.spark.class_archive_after,
                                             DriverSecrets.of(config).values))
    backlog = BacklogPoller.for_config(config, backlog_probe)
    if backlog is not None:
        bridge.observers.append(backlog)
    bridge.controls.move_plugins = plugins.move  # `mqbridge listener plugins` (mqbridge.plugins.pinning)
    monitor = MonitoringServer.for_bridge(bridge, config.monitoring, session=lambda: sessions.current,
                                          control=bridge.controls)
    if monitor is not None:
        bridge.observers.append(monitor)
        monitor.locate = Locator(config.listeners, config.bridge.dedupe_window,
                                 ledger=landing.ledger if landing is not None else None,
                                 backout_log=backout_log, holding=bridge.holding,
                                 ledger_note="" if landing is not None else NO_LEDGER,
                                 warehouse=config.tables_warehouse()).locate
        monitor.delete_entries = request_deleter(config, sessions.get)  # POST /tables/delete (its token)
    warmup = _spark_warmup(config, sessions, landing) if executors is None else None
    return App(config=config, bridge=bridge, plugins=plugins, monitor=monitor, landing=landing, warmup=warmup,
               spark_sinks=spark_written(sessions, config.types, config.spark.writer, config.spark.conf,
                                         config.spark.table_format),
               backout_log=backout_log)


def _build_collector(section: CollectorSection, types: Mapping[str, TypeConfig], counters: Counters,
                     breakers: SinkBreakers, plugins: PluginHost) -> BulkCollector:
    """The bulk collector of `[collector]` and each type's limits; the sink breakers probe through it,
    and the plugins observe every result."""
    collector = BulkCollector(
        CollectorLimits(memory=section.memory, max_bulks=section.max_bulks, workers=section.workers,
                        writes_per_type=section.writes_per_type),
        {name: TypeLimits(bulk_size=t.bulk_size, bulk_timeout=t.bulk_timeout, latency=t.latency)
         for name, t in types.items()},
        counters=counters, breakers=breakers,
    )
    breakers.probe = collector.probe
    observer = ResultObserver(plugins)
    for name in types:
        collector.register_result_handler(observer, message_type=name)
    return collector


def _spark_executors(config: BridgeConfig, sessions: SparkSessions,
                    landing: Landing | None) -> Callable[[], Mapping[str, Executor]]:
    """Makes each type's executor when the bridge starts (none of them starts Spark: each asks for the
    session when a write needs it)."""
    warehouse = config.resolve_warehouse()
    return lambda: executors_for(sessions, warehouse, config.types, landing=landing,
                                 write_timeout=config.spark.write_timeout, catalog=config.spark.catalog,
                                 writer=config.spark.writer, conf=config.spark.conf,
                                 table_format=config.spark.table_format)


def _transactional_types(config: BridgeConfig) -> dict[str, list[str]]:
    """The types that land into tables publishing a bulk by their own commit (Delta), by format name."""
    return {name: types for name, types in formats_configured(config.types, config.spark.table_format).items()
            if format_named(name).transactional}


def _land_by_table_commits(config: BridgeConfig, sessions: SparkSessions, landing: Landing) -> None:
    """What the landing of tables that commit each bulk by their own transaction (Delta) needs with
    Spark: deciding dead processes' prepared bulks by their tables (the format's `settle`), and, when the
    ledger was created at this start, its rebuild from the tables before any message is answered for
    (the format's `rebuild_ledger`; both run by the Spark warm-up)."""
    warehouse = config.resolve_warehouse()

    def settle(bulk: PreparedBulk) -> bool:
        location = warehouse / bulk.table
        return format_of_bulk(location, bulk).settle(landing.ledger, bulk, sessions.get(), location)

    landing.in_doubt.settle = settle
    landing.in_doubt.rolled_back = lambda bulk: format_of_bulk(warehouse / bulk.table, bulk).rolled_back
    if landing.ledger.created:
        by_format: dict[str, list[tuple[str, Path | ObjectStoreUri]]] = {}
        on_store: dict[str, list[str]] = {}  # format name -> its types, whose tables the rebuild lists
        for name, types in _transactional_types(config).items():
            if isinstance(warehouse, ObjectStoreUri):  # listed by the rebuild, where an unreachable store is an outage
                by_format[name], on_store[name] = [], types
                continue
            table_format = format_named(name)
            tables: list[tuple[str, Path | ObjectStoreUri]] = [
                (str(path.relative_to(warehouse)), path)
                for path, names in type_tables(warehouse, config.types).items()
                if set(types) & set(names) and table_format.holds(path)]
            if tables:
                by_format[name] = tables
        if not by_format:  # a first start: nothing landed yet that the ledger could miss
            return
        landing.await_rebuild()

        def rebuild() -> int:
            try:
                if on_store:  # one request first: a silent or refusing store named after it, not after many
                    store_answers(sessions.get(), warehouse)
                for name, types in on_store.items():  # plain tables by name, a template's as listed (delta-rs)
                    store = config.tables_warehouse()
                    by_format[name] = [(str(path.relative_to(store)), path) for path
                                       in type_tables(store, {n: config.types[n] for n in types})]
                return sum(format_named(name).rebuild_ledger(landing.ledger, sessions.get(), tables,
                                                             config.bridge.dedupe_window)
                           for name, tables in by_format.items())
            except Exception as exc:  # what an operator must fix, named, where the store says it
                reason = object_store_outage(exc, warehouse, config.spark.conf)
                if reason:
                    raise LedgerUnavailableError(reason) from exc
                raise

        landing.pending_rebuild = rebuild


def _spark_section(config: BridgeConfig) -> SparkSection:
    """`[spark]` as the session is started with it: in a driver of the bridge's own, with what the
    configured table formats need (`session_conf_for`: for Delta tables the Delta jars and Delta's SQL
    extension and catalog; ConfigError naming the command that fetches the jars when they are missing),
    and on an object store or HDFS with the bridge's S3A or HDFS client settings under `[spark] conf`
    (`mqbridge.landing.object_stores`). A Spark Connect
    server is started with them by its operator."""
    section = config.spark
    if section.remote:
        return section
    conf = command_session_conf(config)
    return section if conf == section.conf else section.model_copy(update={"conf": conf})


def _spark_warmup(config: BridgeConfig, sessions: SparkSessions, landing: Landing | None) -> SparkWarmup | None:
    """What starts Spark when the bridge starts, if anything needs it while the bridge runs (None
    otherwise), and checks what needs it: each typed type's schema, and the warehouse where Spark writes
    into it, bulks or the scheduled purge's containers (bulks pyarrow writes are checked by their footers)."""
    if not spark_needed(config, sessions):
        return None
    checks = schema_checks(config.types)
    if (spark_writes_bulks(sessions, config.types, config.spark.writer, config.spark.conf, config.spark.table_format)
            or (config.purge.interval is not None and landing is not None)):
        owner = landing.owner if landing is not None else owner_id()
        warehouse = config.resolve_warehouse()
        checks.append(lambda: check_warehouse(sessions, warehouse, owner))
    if landing is not None and landing.in_doubt.settle is not None:
        # Dead processes' prepared bulks of Delta tables: their tables decide them, with Spark; and a
        # ledger created at this start is rebuilt from the tables first.
        checks.append(landing.delta_duties)
    return SparkWarmup(sessions, checks)


def open_landing(config: BridgeConfig, counters: Counters) -> Landing | None:
    """The landing ledger under `[bridge] state_dir` (created on first use), or None with
    `exactly_once = false`. LedgerError (a FatalError) if the file is unreadable."""
    if not config.bridge.exactly_once:  # at-least-once: `lint.start_warnings` says so at start
        return None
    ledger = open_ledger(config, owner=owner_id())
    if ledger.created:
        log.warning("landing ledger %s created: messages landed before it existed cannot be recognised "
                    "if they are delivered again (at-least-once for them)", ledger.path)
    return Landing(ledger=ledger, owner=ledger.owner, counters=counters, dedupe_window=config.bridge.dedupe_window,
                   warehouse=config.resolve_warehouse(),
                   config_path=str(config.path.absolute()) if config.path else "")


def run_bridge(config: BridgeConfig, *, until_idle: float | None = None,
               stop_event: threading.Event | None = None,
               reload_event: threading.Event | None = None,
               progress: TextIO | None = None) -> int:
    """Build and run a bridge as the CLI and the service wrappers do, with the observers that
    installed packages contribute (sd_notify under systemd); return the exit code. `progress` (a
    terminal) gets the live progress line instead of the per-tick summary log line."""
    observers = installed_observers(config)
    line = ProgressLine(progress).attach() if progress is not None else None
    if line is not None:
        observers.append(line)
    app = build_app(config, stop_event=stop_event, reload_event=reload_event, observers=observers)
    if line is not None:
        app.bridge.summary_level = logging.DEBUG
    try:
        return app.run(until_idle=until_idle)
    finally:
        if line is not None:
            line.detach()
