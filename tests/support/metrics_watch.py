"""A counter of a running `mqbridge run`, read from its Prometheus endpoint (/metrics) every 0.2 s
until the process ends: what a bridge that exits by itself (`--until-idle`) counted, as an operator's
Prometheus would have scraped it. A run that ends after `idle` seconds without work has made its last
count at least that long before it exits, so the last value read is the final one."""

from __future__ import annotations

import re
import threading

from tests.support.http import get


def counter_sum(metrics: str, name: str) -> float | None:
    """The sum of every series of counter `name` in a Prometheus text exposition, or None without any."""
    values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", metrics, re.MULTILINE)]
    return sum(values) if values else None


class MetricsWatch:
    """Reads `name` from `url`/metrics every `every` seconds on a thread, until `stop()`."""

    def __init__(self, url: str, name: str, every: float = 0.2) -> None:
        self.url, self.name, self.every = url, name, every
        self.last: float | None = None
        self.reads = 0  # answers that held the counter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            status, text = get(self.url + "/metrics", timeout=2.0)
            value = counter_sum(text, self.name) if status == 200 else None
            if value is not None:
                self.last, self.reads = value, self.reads + 1

    def close(self) -> None:
        """Stop reading."""
        self._stop.set()
        self._thread.join(10)

    def stop(self) -> float:
        """Stop reading; the last value read (AssertionError if the endpoint never answered with it)."""
        self.close()
        assert self.last is not None, f"{self.url}/metrics never showed {self.name}"
        return self.last
