"""A circuit breaker per sink (per message type and its table): an outage pauses intake, not messages.

    closed ──outage──▶ open ──probe fails──▶ open (next probe after a doubled wait, capped)
      ▲                 │
      └──probe write succeeds──┘

`SinkBreaker` is the state machine of one sink. `SinkBreakers` holds one per configured type, is
the bridge's observer (status, metrics) and runs the probes on its own thread ("sink-prober"), never
on the control thread: a probe is a Spark write and may take as long as `[spark] write_timeout`.

While a breaker is open:
- its gate (an `IntakeGate`, like the memory guard's) is closed: the listener threads whose
  `message_type` is that sink wait before their next batch, connections and heartbeats kept;
- the collector answers the sink's bulks with outage results at once, without writing (the
  listeners give the messages back, uncounted);
- `/healthz` is 503 and `/status`, `mqbridge status`, the sd_notify STATUS line and
  `mqbridge_sink_available{type=…}` say "sink orders: unavailable since …, next probe in …".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from mqbridge.counters import Counters
from mqbridge.gate import IntakeGate
from mqbridge.observer import BridgeView, Observer

log = logging.getLogger("mqbridge.breaker")  # the name operators configure

#: Wait before the first probe after a breaker opens; doubled after each failed probe.
PROBE_INITIAL = 1.0
#: The prober thread wakes this often (stop stays prompt, due probes start within this time).
PROBER_TICK = 0.2


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class SinkBreaker:
    """The breaker of one sink. Thread-safe; `clock` is monotonic, `wall` the wall clock (for
    "since" in the status)."""

    def __init__(self, name: str, *, probe_max: float, probe_initial: float = PROBE_INITIAL,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.name = name
        self.gate = IntakeGate()
        self.probe_initial = probe_initial
        self.probe_max = max(probe_max, probe_initial)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self.reason = ""
        self.opened_at: float | None = None  # wall clock
        self.opened_monotonic: float | None = None
        self.next_probe: float | None = None  # monotonic
        self.backoff = probe_initial
        self.opens = 0
        self.probes = 0
        self.probe_failures = 0
        self.last_probe_error = ""
        self.last_outage = ""  # the reason of the latest outage, kept after the breaker closed
        self.last_outage_seconds = 0.0  # how long it lasted

    @property
    def is_open(self) -> bool:
        return not self.gate.is_open

    def trip(self, reason: str) -> bool:
        """An outage of this sink: open (or stay open, keeping the first reason's time). True if
        the breaker was closed until now."""
        with self._lock:
            if self.is_open:
                self.last_probe_error = self.last_probe_error or reason
                return False
            self.reason = self.last_outage = reason
            self.opened_at = self._wall()
            self.opened_monotonic = self._clock()
            self.backoff = self.probe_initial
            self.next_probe = self.opened_monotonic + self.backoff
            self.opens += 1
            self.last_probe_error = ""
            self.gate.close()
            return True

    def due(self) -> bool:
        """Open, and its next probe is due."""
        with self._lock:
            return self.is_open and self.next_probe is not None and self._clock() >= self.next_probe

    def probe_failed(self, error: str) -> None:
        """A probe write failed: wait twice as long (at most `probe_max`) before the next."""
        with self._lock:
            self.probes += 1
            self.probe_failures += 1
            self.last_probe_error = error
            self.backoff = min(self.backoff * 2, self.probe_max)
            self.next_probe = self._clock() + self.backoff

    def probe_succeeded(self) -> float:
        """A probe write landed: close, resume intake. Returns how long the sink was unavailable."""
        with self._lock:
            self.probes += 1
            down = self._clock() - self.opened_monotonic if self.opened_monotonic is not None else 0.0
            self.last_outage_seconds = down
            self.reason, self.opened_at, self.opened_monotonic, self.next_probe = "", None, None, None
            self.last_probe_error = ""
            self.backoff = self.probe_initial
            self.gate.open()
            return down

    def unavailable_for(self) -> float:
        """Seconds since the breaker opened (0 when closed)."""
        opened = self.opened_monotonic
        return 0.0 if opened is None or not self.is_open else self._clock() - opened

    def describe(self) -> str:
        """"sink orders: unavailable since …, next probe in …s: <reason>", or "sink orders: available"."""
        with self._lock:
            if not self.is_open or self.opened_at is None:
                return f"sink {self.name}: available"
            wait = max(0.0, (self.next_probe or 0.0) - self._clock())
            last = f"; last probe: {self.last_probe_error}" if self.last_probe_error else ""
            return (f"sink {self.name}: unavailable since {_iso(self.opened_at)}, next probe in {wait:.0f}s: "
                    f"{self.reason}{last}")

    def status(self) -> dict[str, Any]:
        """This sink's entry in the status page's "sinks" field."""
        with self._lock:
            is_open = self.is_open
            return {
                "available": not is_open,
                "state": "open" if is_open else "closed",
                "reason": self.reason,
                "unavailable_since": _iso(self.opened_at) if is_open and self.opened_at else None,
                "seconds_unavailable": round(self._clock() - self.opened_monotonic, 1)
                if is_open and self.opened_monotonic is not None else 0.0,
                "next_probe_seconds": round(max(0.0, self.next_probe - self._clock()), 1)
                if is_open and self.next_probe is not None else None,
                "last_probe_error": self.last_probe_error,
                "last_outage": self.last_outage,
                "last_outage_seconds": round(self.last_outage_seconds, 1),
                "opens": self.opens,
                "probes": self.probes,
                "probe_failures": self.probe_failures,
            }


class SinkBreakers(Observer):
    """One breaker per configured message type, and the thread that probes the open ones.

    `probe(type)` does one probe write for that sink (it may recreate the Spark session first) and
    raises if the sink still cannot be written to. It is given by the composition root
    (`BulkCollector.probe`).
    """

    def __init__(self, types: Iterable[str], counters: Counters, *, probe_max: float,
                 probe: Callable[[str], None] | None = None, probe_initial: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        probe_initial = PROBE_INITIAL if probe_initial is None else probe_initial
        self.breakers = {name: SinkBreaker(name, probe_max=probe_max, probe_initial=probe_initial, clock=clock)
                         for name in types}
        self.counters = counters
        self.probe = probe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for name in self.breakers:
            counters.set("sink_available", 1, type=name)

    def __getitem__(self, name: str) -> SinkBreaker:
        return self.breakers[name]

    def gate(self, name: str) -> IntakeGate | None:
        """The intake gate of sink `name` (None for a type that is not configured)."""
        breaker = self.breakers.get(name)
        return breaker.gate if breaker is not None else None

    def is_open(self, name: str) -> bool:
        breaker = self.breakers.get(name)
        return breaker is not None and breaker.is_open

    def open_breakers(self) -> list[SinkBreaker]:
        return [b for b in self.breakers.values() if b.is_open]

    def trip(self, name: str, reason: str) -> None:
        """Sink `name` is unavailable (called by the collector when a bulk's write is an outage)."""
        breaker = self.breakers.get(name)
        if breaker is None or not breaker.trip(reason):
            return
        self.counters.set("sink_available", 0, type=name)
        self.counters.inc("sink_breaker_opens", type=name)
        log.critical("sink %s unavailable: %s; listeners feeding it pause intake (connections stay up), "
                     "their messages go back to the source uncounted; probing every %.0f-%.0fs",
                     name, reason, breaker.probe_initial, breaker.probe_max)

    def run_probe(self, name: str) -> bool:
        """Probe sink `name` now (the prober thread does this when a probe is due). True if it closed."""
        breaker = self.breakers[name]
        if self.probe is None:
            return False
        try:
            self.probe(name)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            breaker.probe_failed(text)
            self.counters.inc("sink_probes", type=name, result="failed")
            log.warning("sink %s: probe write failed (next in %.0fs): %s", name, breaker.backoff, text)
            return False
        down = breaker.probe_succeeded()
        self.counters.inc("sink_probes", type=name, result="ok")
        self.counters.set("sink_available", 1, type=name)
        log.warning("sink %s: probe write succeeded; available again after %.1fs, listeners resume", name, down)
        return True

    # -- the prober thread ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the "sink-prober" thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="sink-prober", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop probing (a probe in progress finishes on its own: the thread is a daemon)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(PROBER_TICK):
            for name, breaker in self.breakers.items():
                if self._stop.is_set():
                    return
                if breaker.due():
                    try:
                        self.run_probe(name)
                    except Exception:  # the prober must survive anything
                        log.exception("sink %s: probe failed unexpectedly", name)

    # -- observer --------------------------------------------------------------------------------------
    def summary(self) -> str:
        """The open sinks for the log and systemd's STATUS line; "" when every sink is available."""
        return "; ".join(b.describe() for b in self.open_breakers())

    def problems(self) -> list[str]:
        return [b.describe() for b in self.open_breakers()]

    def status_fields(self) -> dict[str, Any]:
        return {"sinks": {name: b.status() for name, b in self.breakers.items()}}

    def on_stopping(self, bridge: BridgeView) -> None:
        self.stop(timeout=0.0)
