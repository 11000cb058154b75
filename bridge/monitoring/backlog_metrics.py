"""The backlog gauges of /metrics, from the "backlog" field of the status document
(`mqbridge.backlog.BacklogPoller`). An unknown backlog (the broker cannot tell, a read failed) has
no sample at all rather than 0, so an alert on growth never mistakes "unknown" for "empty";
`mqbridge_listener_backlog_known` says which listeners are measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mqbridge.monitoring.metrics import PREFIX


class BacklogMetrics(Collector):
    """mqbridge_listener_backlog_messages, _oldest_age_seconds and _known, by listener."""

    def __init__(self, backlog: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._backlog = backlog

    def collect(self) -> Iterator[Metric]:
        messages = GaugeMetricFamily(PREFIX + "listener_backlog_messages", "Messages waiting on a listener's "
                                     "queue at the last read (the queue's, whatever the listener's selector)",
                                     labels=["listener"])
        age = GaugeMetricFamily(PREFIX + "listener_backlog_oldest_age_seconds", "Age of the oldest message "
                                "waiting on a listener's queue, where the broker tells it (RabbitMQ)",
                                labels=["listener"])
        known = GaugeMetricFamily(PREFIX + "listener_backlog_known", "1 while a listener's backlog is known "
                                  "(0: the broker cannot tell, or the last read failed)", labels=["listener"])
        for label, reading in sorted(self._backlog().items()):
            known.add_metric([label], 0.0 if reading.get("messages") is None else 1.0)
            if reading.get("messages") is not None:
                messages.add_metric([label], float(reading["messages"]))
            if reading.get("oldest_age_seconds") is not None:
                age.add_metric([label], float(reading["oldest_age_seconds"]))
        yield from (messages, age, known)
