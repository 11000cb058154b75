"""The memory guard (`[bridge] max_rss`): pause intake while the process is too big.

The control thread calls `MemoryGuard.check()` every tick. Above `max_rss` it closes an
`IntakeGate`; listener threads wait at the gate before receiving their next batch (they finish
the unit of work they hold, and keep their connections and heartbeats). Below `RESUME_RATIO` of
`max_rss` it opens the gate again. The gap between the two thresholds (hysteresis) keeps the
listeners from flapping when memory hovers around the limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psutil

from mqbridge.counters import Counters
from mqbridge.gate import IntakeGate
from mqbridge.observer import BridgeView, Observer

log = logging.getLogger("mqbridge.guard")  # the name operators configure

# Resume intake once the resident set is below this fraction of max_rss.
RESUME_RATIO = 0.9


def process_rss() -> int:
    """Resident set size of this process in bytes."""
    return int(psutil.Process().memory_info().rss)


class MemoryGuard(Observer):
    """Closes the gate above `max_rss` and opens it below `RESUME_RATIO * max_rss`.

    `max_rss=None` disables the guard (the gate stays open). `rss` is the measurement, a
    parameter so unit tests can feed it numbers.
    """

    def __init__(self, max_rss: int | None, counters: Counters, *,
                 rss: Callable[[], int] = process_rss) -> None:
        self.max_rss = max_rss
        self.gate = IntakeGate()
        self._counters = counters
        self._rss = rss
        self.last_rss = 0
        self.paused_since: float | None = None  # wall-clock time of the current pause
        self.pauses = 0
        counters.set("memory_guard_paused", 0)
        if max_rss is not None:
            counters.set("memory_guard_max_rss_bytes", max_rss)

    @property
    def paused(self) -> bool:
        return not self.gate.is_open

    def set_limit(self, max_rss: int | None) -> None:
        """Change the limit at run time (a reloaded configuration); applies at the next check."""
        self.max_rss = max_rss
        if max_rss is not None:
            self._counters.set("memory_guard_max_rss_bytes", max_rss)

    def check(self) -> None:
        """Measure and pause or resume intake. Called by the control thread every tick."""
        if self.max_rss is None:
            if self.paused:
                self._resume("memory guard disabled")
            return
        self.last_rss = rss = self._rss()
        if not self.paused and rss > self.max_rss:
            self.gate.close()
            self.paused_since = time.time()
            self.pauses += 1
            self._counters.set("memory_guard_paused", 1)
            self._counters.inc("memory_guard_pauses")
            log.warning("memory guard: resident memory %.1f MB is above max_rss %.1f MB; listeners pause "
                        "intake until it is below %.1f MB", rss / 2**20, self.max_rss / 2**20,
                        RESUME_RATIO * self.max_rss / 2**20)
        elif self.paused and rss < RESUME_RATIO * self.max_rss:
            self._resume(f"resident memory {rss / 2**20:.1f} MB is below "
                         f"{RESUME_RATIO * self.max_rss / 2**20:.1f} MB")

    def _resume(self, why: str) -> None:
        paused_for = time.time() - self.paused_since if self.paused_since else 0.0
        self.paused_since = None
        self._counters.set("memory_guard_paused", 0)
        self.gate.open()
        log.info("memory guard: %s; listeners resume intake (paused %.1fs)", why, paused_for)

    def on_wake(self, bridge: BridgeView) -> None:
        """Checked on every control-loop wake-up (the bridge's observer)."""
        self.check()

    def status_fields(self) -> dict[str, Any]:
        return {"guard": self.status()}

    def status(self) -> dict[str, Any]:
        """The status page's "guard" field."""
        return {
            "enabled": self.max_rss is not None,
            "max_rss": self.max_rss,
            "resume_below": int(RESUME_RATIO * self.max_rss) if self.max_rss is not None else None,
            "rss": self.last_rss or None,  # None until the first check
            "paused": self.paused,
            "paused_since": self.paused_since,
            "pauses": self.pauses,
        }
