"""Prometheus rendering of the bridge's numbers, computed at scrape time.

`BridgeMetrics` is a prometheus_client custom collector. On every scrape it renders a snapshot
of `bridge.counters.Counters` (counters get `_total`, histograms cumulative `le` buckets), the
bulk collector's `stats()`, the health view and the process figures from psutil. Every name
starts with `mqbridge_`. Nothing is registered in prometheus_client's global registry: each
monitoring server has its own, so several bridges in one process (tests) do not collide.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from mqbridge.counters import Counters, Labels

PREFIX = "mqbridge_"

# Help texts of the names used with Counters.inc/set/observe; an unknown name still renders.
HELP = {
    "listener_threads_created": "Listener threads started, first starts and restarts (not the threads an adaptive "
                                "count adds: mqbridge_listener_threads_tuned_total counts those changes)",
    "listener_threads_configured": "Listener threads that should run: the configuration's, as changed at run time "
                                   "(mqbridge listener threads; none for a stopped listener)",
    "listener_threads_actual": "Listener threads alive at the last control tick",
    "listener_threads": "A listener's thread count: [[listeners]] threads, the one set at run time, or the "
                        "adaptive one (threads unset: mqbridge.supervision.tuning)",
    "listener_threads_tuned": "Changes of an adaptive listener's thread count, by direction (up, down); the reason "
                              "is in /status (listener_controls[].tuning) and the log",
    "listener_wait_seconds": "Thread-seconds a listener's threads waited for a message that did not come (a "
                             "drained queue); the adaptive thread count holds while it is over a quarter",
    "listener_units_read": "Units of work a listener's threads read (each up to [[listeners]] batch messages)",
    "listener_units_short": "Units of work that ended short of [[listeners]] batch because no message was ready "
                            "(the arrivals set the rate): the adaptive thread count neither grows nor judges a "
                            "change while they are over a quarter of the units read",
    "listener_threads_alive": "A listener's threads alive at the last control tick",
    "listener_state": "1 for the run-time state a listener is in (running, paused, stopped: mqbridge listener), "
                      "0 for the others",
    "listener_errors": "Listener thread failures (lost connection, unexpected error, halt)",
    "listener_restarts": "Listener thread restarts scheduled by the control thread",
    "listener_stuck": "Listener threads reported without heartbeat",
    "errors_per_second": "Listener errors per second over the last control interval",
    "messages_received": "Messages received from the source",
    "messages_committed": "Messages removed from the source after landing (commit)",
    "messages_backed_out": "Messages given back to the source queue (rollback)",
    "messages_moved_to_backout": "Messages moved to the backout queue",
    "results_sent": ("Results sent to producers (IBM MQ PAN/NAN reports, STOMP confirm = reply-to) in a committed "
                     "unit of work"),
    "results_failed": ("Results not sent (no reply-to queue took it, nor a dead-letter queue); the message was "
                       "committed without"),
    "results_rerouted": "Results that went to the dead-letter queue instead of the reply-to queue",
    "results_not_allowed": ("Results not sent because the reply-to is not allowed ([[listeners]] reply_to_allow; "
                            "IBM MQ default: the connected queue manager only); the message was committed without"),
    "results_to_stations": ("Results sent to a type's results_to ([types.X] results_to) in a committed unit of "
                            "work"),
    "stored_results_sent": ("\"Stored, not yet landed\" results sent when messages joined a bulk ([types.X] "
                            "stored_result), confirmed by the broker"),
    "stored_results_dropped": ("\"Stored\" results not sent (the sender behind, the destination refused or "
                               "unreachable, the stored-results log failed); final results are unaffected"),
    "messages_consumed_by_preprocessors": "Messages a preprocessor consumed (committed, not landed)",
    "messages_duplicated_risk": "Landed messages whose unit of work was backed out "
                                "(exactly_once = false: they land again)",
    "preprocessor_errors": "Preprocessor failures",
    "put_to_commit_seconds": "Latency from the message's put time to its commit",
    "receipt_to_commit_seconds": ("Latency from the message's receipt (its listener took it from the source) to its "
                                  "commit: put_to_commit without the time in the broker and the client's prefetch"),
    "bulk_write_seconds": "Duration of one bulk's executor call (Spark write), by message type",
    "plugin_reloads": "Plugin generations swapped in by hot reload",
    "plugin_reload_failures": "Plugin reloads rejected (the previous generation keeps running)",
    "plugin_load_errors": "Plugin files that failed to load",
    "plugin_errors": "Plugins currently not loaded because of an error",
    "plugin_generation": "Current plugin generation number",
    "plugin_observer_errors": "mqbridge_result hook calls that raised",
    "memory_guard_paused": "1 while the memory guard holds listener intake, else 0",
    "memory_guard_pauses": "Times the memory guard paused intake",
    "memory_guard_max_rss_bytes": "The memory guard's limit ([bridge] max_rss)",
    "messages_deduplicated": "Redelivered messages the landing ledger knew as landed (committed, not landed again)",
    "possible_duplicates": ("Landed messages that may have landed before: redeliveries RabbitMQ flagged on a listener "
                            "whose identity is per delivery (identity msg_id), less those this process gave back "
                            "unlanded itself; an upper bound (0 elsewhere: every redelivery is recognised)"),
    "put_timestamps_refused": ("Messages received whose put time was before 2000-01-01 or more than a day after "
                               "their receipt: their rows took the received time as put_timestamp (header "
                               "mqbridge-put-timestamp-refused says why)"),
    "ledger_bytes": "Size of the landing ledger file and its write-ahead log",
    "ledger_identities": "Message identities the landing ledger remembers (within dedupe_window)",
    "ledger_prune_runs": "Times the landing ledger was pruned of identities older than dedupe_window",
    "ledger_land_seconds": "Time the landing protocol adds to one bulk after Spark staged it (ledger prepare, "
                           "publication, ledger published), by table",
    "ledger_lookup_seconds": "Time of one unit of work's question to the ledger: which messages landed already",
    "ledger_publish_retries": "Attempts to publish a prepared bulk that failed and are retried",
    "ledger_bulks_fenced": "Prepared bulks of this process that another decided while this one could not publish "
                           "them (a lease expired: a stalled or cut-off host); their messages went back",
    "recovery_rolled_forward": "Prepared bulks of dead processes published by recovery",
    "recovery_rolled_back": "Prepared bulks of dead processes discarded (another bulk had landed their messages)",
    "sink_available": "1 while the sink (a message type's table) takes writes, 0 while its circuit breaker is open",
    "sink_breaker_opens": "Times a sink's circuit breaker opened "
                          "(an outage: Spark down, JVM gone, path unwritable, timeout)",
    "sink_probes": "Probe writes to unavailable sinks, by result (ok closes the breaker)",
    "recovery_stale_dirs_removed": "Staging and _temporary directories of dead processes removed at start",
    "plugin_fallbacks": "Times a new plugin generation that raised on every message was replaced by the last good one",
    "plugin_canary_promotions": "Plugin generations promoted from the canary listener(s) to the others",
    "plugin_canary_rollbacks": "Plugin generations rolled back on the canary listener(s) (the others never ran them)",
    "purge_runs": "Scheduled retention rounds started ([purge] interval)",
    "purge_failures": "Scheduled retention rounds that failed (logged; the next round runs as planned)",
    "purge_containers": "Containers (put_date partitions) purged, by strategy: delete, copy or drop",
    "purge_containers_skipped": "Containers the scheduled retention left for a later round: designated rows "
                                "at or below [purge] threshold",
    "purge_containers_dropped": "Containers removed whole because every row in them was designated",
    "purge_rows_deleted": "Rows removed by purges, by strategy",
    "purge_rows_written": "Surviving rows rewritten by purges (the work delete and copy do), by strategy",
    "purge_conflicts": "Delta purge commits refused for a concurrent commit into the same partition, tried again",
    "purge_files_carried": "Files landed into a container while it was being purged, carried into the new container",
    "purge_estimated_seconds": "The cost model's estimate for the strategy chosen, per purged container",
    "purge_measured_seconds": "Measured duration of a container's purge, by strategy (compare with the estimate)",
    "compaction_runs": "Scheduled compaction rounds started ([compaction] interval)",
    "compaction_failures": "Scheduled compaction rounds that failed (logged; the next round runs as planned)",
    "compaction_containers": "Containers compacted (small files merged, sorted by put_timestamp across the container)",
    "compaction_files_removed": "Data files replaced by compactions",
    "compaction_files_written": "Data files compactions wrote",
    "compaction_files_carried": "Files landed into a container while it was compacted, carried into the new container",
    "compaction_rows": "Rows rewritten by compactions",
    "compaction_purged": "Containers a compaction round purged by retention, by strategy: drop, delete or copy",
    "compaction_seconds": "Measured duration of a container's compaction",
    "compaction_low_disk": "1 while the warehouse's free space is under [compaction] min_free_disk, else 0",
}

#: Per-listener counters that exist (at 0) from the start, so that `increase()` and `rate()` in alert
#: rules and dashboards see their first event, and every panel has a series to show.
LISTENER_SERIES = ("messages_received", "messages_committed", "messages_backed_out", "messages_moved_to_backout",
                   "messages_consumed_by_preprocessors", "messages_deduplicated", "put_timestamps_refused",
                   "possible_duplicates")


def initialize_series(counters: Counters, listeners: Iterable[tuple[str, str]], *, ledger: bool,
                      purge: bool = False, compaction: bool = False) -> None:
    """Create the per-listener counters at 0 for each (source, queue), with the labels the listener
    threads use, the plugin host's fallbacks, the ledger's error counter when there is a ledger and
    the scheduled purge's (and compaction's) rounds and failures when on: the alert rules watch these with
    `increase()`, which misses the first event of a series that did not exist before it."""
    for source, queue in listeners:
        label = f"{source}:{queue}"
        for name in LISTENER_SERIES:
            counters.inc(name, 0, listener=label, queue=queue)
        counters.inc("listener_restarts", 0, listener=label)
        counters.inc("listener_errors", 0, listener=label)  # watched by MqbridgeListenerErrors
        counters.inc("listener_wait_seconds", 0, listener=label, queue=queue)
        counters.inc("listener_units_read", 0, listener=label, queue=queue)
        counters.inc("listener_units_short", 0, listener=label, queue=queue)
    counters.inc("plugin_fallbacks", 0)
    if ledger:
        counters.inc("ledger_publish_retries", 0)
        counters.inc("ledger_bulks_fenced", 0)
    if purge:
        counters.inc("purge_runs", 0)
        counters.inc("purge_failures", 0)
    if compaction:
        counters.inc("compaction_runs", 0)
        counters.inc("compaction_failures", 0)
        counters.set("compaction_low_disk", 0)


# CollectorStats field -> (metric name, help). Counters (monotonic) and gauges (current value).
COLLECTOR_COUNTERS = {
    "executed_bulks": ("bulks_written", "Bulks handed to an executor (Spark writes)"),
    "executed_messages": ("bulk_rows", "Messages in bulks handed to an executor"),
    "executed_bytes": ("bulk_bytes", "Bytes of the messages in bulks handed to an executor"),
    "execute_seconds_total": ("spark_write_seconds", "Time spent in executors (Spark writes)"),
    "backpressure_waits": ("collector_backpressure_waits", "Submits that waited for collector memory"),
    "coalesced_bulks": ("bulks_coalesced", "Queued bulks merged into another bulk of their type"),
    "handler_errors": ("result_handler_errors", "Result handler calls that raised"),
}
COLLECTOR_GAUGES = {
    "bytes": ("collector_bytes", "Bytes held by the collector"),
    "messages": ("collector_messages", "Messages held by the collector"),
    "active_bulks": ("collector_active_bulks", "Active (filling) bulks"),
    "queued_bulks": ("collector_queued_bulks", "Flushed bulks waiting for a worker"),
    "in_flight_bulks": ("collector_in_flight_bulks", "Bulks being written now"),
    "last_execute_seconds": ("spark_last_write_seconds", "Duration of the last executor call"),
}
# Always rendered, so a dashboard sees 0 rather than no series.
FLUSH_REASONS = ("size", "memory", "timeout", "count", "latency", "target", "idle", "shutdown")


def _series_labels(series: Mapping[Labels, Any]) -> list[str]:
    """The union of label names over a metric's series (a missing label renders as "")."""
    return sorted({name for key in series for name, _ in key})


def _values(names: list[str], key: Labels) -> list[str]:
    given = dict(key)
    return [given.get(name, "") for name in names]


def counter_families(counters: Counters) -> Iterator[Metric]:
    """Every counter, gauge and histogram of `counters`, as Prometheus metric families."""
    snap = counters.snapshot()
    simple: tuple[tuple[str, type[CounterMetricFamily] | type[GaugeMetricFamily]], ...] = (
        ("counters", CounterMetricFamily), ("gauges", GaugeMetricFamily))
    for kind, family_type in simple:
        for name, series in sorted(snap[kind].items()):
            labels = _series_labels(series)
            family = family_type(PREFIX + name, HELP.get(name, name), labels=labels)
            for key, value in series.items():
                family.add_metric(_values(labels, key), float(value))  # type: ignore[arg-type]
            yield family
    for name, series in sorted(snap["histograms"].items()):
        labels = _series_labels(series)
        histogram = HistogramMetricFamily(PREFIX + name, HELP.get(name, name), labels=labels)
        for key, value in series.items():
            bounds, counts, total, _count = cast("tuple[list[float], list[int], float, int]", value)
            cumulative, buckets = 0, []
            for bound, count in zip([*bounds, float("inf")], counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
            histogram.add_metric(_values(labels, key), buckets, sum_value=total)
        yield histogram


def collector_families(stats: Any) -> Iterator[Metric]:
    """The bulk collector's `CollectorStats` as counters and gauges."""
    flushed = CounterMetricFamily(PREFIX + "bulks_flushed", "Bulks flushed, by flush reason", labels=["reason"])
    reasons = dict.fromkeys(FLUSH_REASONS, 0) | dict(stats.flushed)
    for reason, count in sorted(reasons.items()):
        flushed.add_metric([reason], count)
    yield flushed
    for field, (name, help_text) in COLLECTOR_COUNTERS.items():
        yield CounterMetricFamily(PREFIX + name, help_text, value=float(getattr(stats, field, 0)))
    for field, (name, help_text) in COLLECTOR_GAUGES.items():
        yield GaugeMetricFamily(PREFIX + name, help_text, value=float(getattr(stats, field, 0)))
    target = GaugeMetricFamily(PREFIX + "bulk_target_rows", "Rows the next bulk of a type aims for, and why "
                               "(keep-up: learned write costs against the intake; latency: capped by the "
                               "latency target; saturated: no size keeps up)", labels=["type", "reason"])
    for name, sizing in sorted(getattr(stats, "sizing", {}).items()):
        target.add_metric([name, str(sizing["reason"])], float(sizing["target_rows"]))
    yield target


def process_info() -> dict[str, Any]:
    """This process's CPU, memory, threads, open files and connections (psutil)."""
    proc = psutil.Process()
    with proc.oneshot():
        cpu = proc.cpu_times()
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "cpu_seconds": round(cpu.user + cpu.system, 3),
            "cpu_percent": proc.cpu_percent(None),  # since the previous call (first: 0.0)
            "rss_bytes": proc.memory_info().rss,
            "threads": proc.num_threads(),
            "uptime_seconds": round(time.time() - proc.create_time(), 1),
        }
    info.update(_file_and_connection_counts(proc))
    return info


#: How long the open-file and connection counts are reused. Counting connections reads every line
#: of /proc/net/tcp*: a scrape computed it twice (the metrics and the health view's status), and a
#: poll of /metrics every 100 ms took a third of the bridge's Python time (py-spy, bench --mode steady).
COUNTS_MAX_AGE = 5.0
_counts: tuple[float, dict[str, Any]] = (float("-inf"), {})
_counts_lock = threading.Lock()


def _file_and_connection_counts(proc: psutil.Process) -> dict[str, Any]:
    global _counts
    with _counts_lock:
        at, counts = _counts
        if time.monotonic() - at < COUNTS_MAX_AGE:
            return counts
        try:
            counts = {"open_files": len(proc.open_files()), "connections": len(proc.net_connections(kind="inet"))}
        except (psutil.AccessDenied, OSError):  # some platforms restrict these
            counts = {"open_files": None, "connections": None}
        _counts = (time.monotonic(), counts)
        return counts


def process_families(info: Mapping[str, Any]) -> Iterator[Metric]:
    """`process_info()` as metrics (a figure the platform refused is left out)."""
    yield CounterMetricFamily(PREFIX + "process_cpu_seconds", "User and system CPU time of the bridge process",
                              value=info["cpu_seconds"])
    for key, name, help_text in (
        ("rss_bytes", "process_resident_memory_bytes", "Resident set size of the bridge process"),
        ("threads", "process_threads", "Threads of the bridge process"),
        ("open_files", "process_open_files", "Regular files open in the bridge process"),
        ("connections", "process_connections", "Internet connections of the bridge process"),
    ):
        if info.get(key) is not None:
            yield GaugeMetricFamily(PREFIX + name, help_text, value=float(info[key]))


class BridgeMetrics(Collector):
    """Renders a bridge's counters, collector stats, health and process at scrape time."""

    def __init__(self, counters: Counters, collector_stats: Callable[[], Any] | None = None,
                 health: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.counters = counters
        self.collector_stats = collector_stats
        self.health = health

    def collect(self) -> Iterator[Metric]:
        yield from counter_families(self.counters)
        if self.collector_stats is not None:
            yield from collector_families(self.collector_stats())
        if self.health is not None:
            view = self.health()
            yield GaugeMetricFamily(PREFIX + "healthy", "1 while /healthz answers 200", value=float(view["healthy"]))
            if view.get("spark_reachable") is not None:
                yield GaugeMetricFamily(PREFIX + "spark_reachable", "1 while Spark answers the health probe",
                                        value=float(view["spark_reachable"]))
        yield from process_families(process_info())
