"""Performance counters: plain thread-safe numbers that the control thread logs and the
monitoring endpoint exports.

Counters are keyed by name and a small set of labels (listener, queue, type, reason...). The
store is deliberately dumb; turning it into Prometheus text is the monitoring layer's job.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]

#: Events of one kind `Counters.record` keeps.
RECENT_EVENTS = 50
#: Histogram buckets in seconds (put-to-commit latency, write and ledger times): fine between 0.5 and
#: 5 s, where a type's `latency` target and its twice lie, so that `histogram_quantile` can tell 2.6 s
#: from 4.9 s (linear within a bucket).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0,
                   120.0, 300.0)


def _labels(labels: Mapping[str, object]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


@dataclass
class Histogram:
    """Cumulative-bucket histogram with a bounded reservoir of recent samples for quantiles."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1
        self.recent.append(value)

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) of the recent samples, or None without samples."""
        if not self.recent:
            return None
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Counters:
    """Thread-safe counters, gauges and histograms of one bridge."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._gauges: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, dict[Labels, Histogram]] = {}
        self._events: dict[str, deque[dict[str, object]]] = {}
        self.started = time.time()

    def record(self, kind: str, **fields: object) -> None:
        """Keep a recent event of `kind` (the last `RECENT_EVENTS`), with its UTC time, for the
        status page (e.g. moves to a backout queue and their reasons)."""
        event = {"time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), **fields}
        with self._lock:
            self._events.setdefault(kind, deque(maxlen=RECENT_EVENTS)).append(event)

    def events(self, kind: str) -> list[dict[str, object]]:
        """The recent events of `kind`, oldest first."""
        with self._lock:
            return list(self._events.get(kind, ()))

    def inc(self, name: str, amount: float = 1, **labels: object) -> float:
        """Add `amount` to a monotonically increasing counter; the series' new value (so that one of
        several threads can tell it made the first count)."""
        key = _labels(labels)
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = value = series.get(key, 0) + amount
        return value

    def set(self, name: str, value: float, **labels: object) -> None:
        """Set a gauge."""
        with self._lock:
            self._gauges.setdefault(name, {})[_labels(labels)] = value

    def observe(self, name: str, value: float, **labels: object) -> None:
        """Record one sample in a histogram."""
        self.observe_many(name, (value,), **labels)

    def observe_many(self, name: str, values: Iterable[float], **labels: object) -> None:
        """Record samples in a histogram (one lock round for a whole unit of work)."""
        values = list(values)
        if not values:
            return
        key = _labels(labels)
        with self._lock:
            series = self._histograms.setdefault(name, {})
            hist = series.get(key)
            if hist is None:
                hist = series[key] = Histogram()
            for value in values:
                hist.observe(value)

    def total(self, name: str, **labels: object) -> float:
        """Sum of a counter over every series whose labels include the given ones."""
        want = set(_labels(labels))
        with self._lock:
            return sum(v for k, v in self._counters.get(name, {}).items() if want <= set(k))

    def gauge(self, name: str, **labels: object) -> float | None:
        with self._lock:
            return self._gauges.get(name, {}).get(_labels(labels))

    def histogram_sum(self, name: str, **labels: object) -> tuple[float, int]:
        """The sum and count of a histogram's samples over every series whose labels include the given
        ones (cheap: without the merged reservoir `histogram` copies)."""
        want = set(_labels(labels))
        with self._lock:
            found = [hist for key, hist in self._histograms.get(name, {}).items() if want <= set(key)]
            return sum(hist.total for hist in found), sum(hist.count for hist in found)

    def histogram(self, name: str, **labels: object) -> Histogram | None:
        """The histogram merged over every series whose labels include the given ones."""
        want = set(_labels(labels))
        merged = Histogram()
        found = False
        with self._lock:
            for key, hist in self._histograms.get(name, {}).items():
                if want <= set(key):
                    found = True
                    merged.counts = [a + b for a, b in zip(merged.counts, hist.counts, strict=True)]
                    merged.total += hist.total
                    merged.count += hist.count
                    merged.recent.extend(hist.recent)
        return merged if found else None

    def snapshot(self) -> dict[str, dict[str, dict[Labels, object]]]:
        """A copy of everything, for exporters."""
        with self._lock:
            return {
                "counters": {n: dict(s) for n, s in self._counters.items()},
                "gauges": {n: dict(s) for n, s in self._gauges.items()},
                "histograms": {
                    n: {k: (list(h.buckets), list(h.counts), h.total, h.count) for k, h in s.items()}
                    for n, s in self._histograms.items()
                },
            }


class RateMeter:
    """Events per second over the last control interval (the seed's "errors per second")."""

    def __init__(self) -> None:
        self._last_total = 0.0
        self._last_time = time.monotonic()

    def rate(self, total: float) -> float:
        now = time.monotonic()
        elapsed = max(now - self._last_time, 1e-9)
        value = (total - self._last_total) / elapsed
        self._last_total, self._last_time = total, now
        return value
