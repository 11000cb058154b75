"""The bulk collector's limits (its flush conditions and backpressure, `mqbridge.bulks.collector`) and
the snapshot of its state and counters that it reports (`BulkCollector.stats`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TypeLimits:
    """Per message type: `bulk_size` in bytes (flush condition 1), `bulk_timeout` in seconds
    (flush condition 3)."""

    bulk_size: int
    bulk_timeout: float
    # The latency target (`mqbridge.bulks.sizing`): the longest a message waits between its receipt and
    # its write starting; None: only the fixed conditions close a bulk (size, timeout, ...).
    latency: float | None = None


@dataclass(frozen=True)
class CollectorLimits:
    """Collector-wide: `memory` in bytes (flush condition 2 and backpressure), `max_bulks`
    active bulks (flush condition 4), `workers` threads executing bulks, at most `writes_per_type` of
    them on bulks of one type."""

    memory: int
    max_bulks: int
    workers: int
    writes_per_type: int = 1


@dataclass
class CollectorStats:
    """A snapshot of the collector's state and counters (for /metrics, /status, the log)."""

    bytes: int = 0
    messages: int = 0
    active_bulks: int = 0
    queued_bulks: int = 0
    in_flight_bulks: int = 0
    flushed: dict[str, int] = field(default_factory=dict)
    executed_bulks: int = 0
    executed_messages: int = 0
    executed_bytes: int = 0  # bytes of the messages in executed bulks (bodies + row overhead)
    execute_seconds_total: float = 0.0
    last_execute_seconds: float = 0.0
    backpressure_waits: int = 0  # submits that had to wait for memory (once per submit)
    coalesced_bulks: int = 0  # queued bulks merged into another bulk of their type
    handler_errors: int = 0  # result handler calls that raised
    outage_bulks: int = 0  # bulks answered with outage results (write failed for the sink, or breaker open)
    bisect_writes: int = 0  # extra writes spent isolating the culprits of failed bulks
    sizing: dict[str, dict[str, object]] = field(default_factory=dict)  # per type: target rows and why
    isolated_culprits: int = 0  # messages found to fail on their own (while the sink took writes)
