"""The backlog poller: a named thread reading every listener's queue depth at a modest interval,
on connections of its own (never a listener's), each read bounded by a timeout.

It is an observer: its readings go into `/status` ("backlog", by listener label), and `run
--until-idle` asks it (`holds_back_idle`) whether a queue still has messages its idle listeners
have not seen yet: it then reads again at once and vetoes idleness while a fresh reading is above
zero, reading again every `RECHECK` seconds meanwhile (a reading taken between the listeners' last
receive and their commit shows messages that are gone a moment later: waiting for the next
interval kept a run that had committed everything for up to `backlog_interval`, 30 s by default).
A source that cannot tell (a broker plugin not enabled) shows "unknown", never 0, and says once in
the log how to enable it; a failed read shows unknown until the next one succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mqbridge.backlog.probe import BacklogProbe, BacklogUnavailable, ProbeFactory, Reading
from mqbridge.drivers import probe_for
from mqbridge.observer import BridgeView, Observer

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)

#: The longest one read of one source may take before it counts as failed.
READ_TIMEOUT = 5.0
#: The longest `run --until-idle` waits for queues that show messages its idle listeners never get.
VETO_LIMIT = 30.0
#: While a fresh reading vetoes idleness: how soon `run --until-idle` asks for the next one.
RECHECK = 1.0


class _SourceProbe:
    """One source's probe, the queues it reads (queue -> listener labels) and what it last said."""

    def __init__(self, name: str, probe: BacklogProbe, queues: dict[str, list[str]]) -> None:
        self.name, self.probe, self.queues = name, probe, queues
        self.unavailable = ""  # why the broker cannot tell (logged once), "" while it can
        self.failing = False  # the last read failed (logged when it starts failing and when it recovers)


class BacklogPoller(Observer):
    """Reads the backlog of every listener's queue every `interval` seconds (see the module docstring)."""

    def __init__(self, probes: Sequence[_SourceProbe], interval: float, *, selectors: frozenset[str] = frozenset(),
                 timeout: float = READ_TIMEOUT) -> None:
        self._probes = list(probes)
        self.interval = interval
        self.timeout = timeout
        # Listeners with a selector: their queue's depth also counts messages meant for others.
        self._selectors = selectors
        self._readings: dict[str, Reading] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._veto: tuple[float, float] | None = None  # (since, when the veto began) of `holds_back_idle`

    @classmethod
    def for_config(cls, config: BridgeConfig, factory: ProbeFactory = probe_for) -> BacklogPoller | None:
        """The poller of `[bridge] backlog_interval` over every listener whose source has a probe
        (`factory`: the adapters' by default); None when disabled (0) or no source can tell one."""
        interval = config.bridge.backlog_interval
        if not interval:
            return None
        queues: dict[str, dict[str, list[str]]] = {}
        for listener in config.listeners:
            if listener.topic is not None:
                continue  # a durable subscription is not a queue the probes can read (docs/topics.md)
            queues.setdefault(listener.source, {}).setdefault(listener.queue, []).append(
                f"{listener.source}:{listener.queue}")
        probes = []
        for name, by_queue in queues.items():
            probe = factory(name, config.sources[name])
            if probe is not None:
                probes.append(_SourceProbe(name, probe, by_queue))
        selectors = frozenset(f"{lc.source}:{lc.queue}" for lc in config.listeners if lc.selector)
        return cls(probes, interval, selectors=selectors) if probes else None

    # -- the thread ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="backlog-poller", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; wait a moment for it. A read in progress ends by its own timeout
        (the thread is a daemon): shutdown never waits for a broker that does not answer."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll()
                self._wake.wait(self.interval)
                self._wake.clear()
        finally:
            self.close()  # on this thread: an MQ connection handle belongs to the thread that made it

    def close(self) -> None:
        """Close every probe's connection (best effort: the process is ending)."""
        for source in self._probes:
            try:
                source.probe.close()
            except Exception:
                log.debug("closing the backlog probe of %s failed", source.name, exc_info=True)

    def poll(self) -> None:
        """Read every source once (from the thread; tests call it directly)."""
        for source in self._probes:
            if self._stop.is_set():
                return
            self._read(source)

    def _read(self, source: _SourceProbe) -> None:
        now = time.monotonic()
        try:
            found = source.probe.read(list(source.queues), self.timeout)
        except BacklogUnavailable as exc:
            if not source.unavailable:  # once: the broker's set-up is the operator's choice
                log.info("backlog of source %r is unknown: %s", source.name, exc)
            source.unavailable = str(exc)
            found = {}
        except Exception as exc:  # a failed read: unknown until the next one succeeds
            if not source.failing:
                log.warning("reading the backlog of source %r failed (shown as unknown; retried every %gs): %s",
                            source.name, self.interval, exc)
            source.failing = True
            found = {}
        else:
            if source.failing or source.unavailable:
                log.info("backlog of source %r is known again", source.name)
            source.failing, source.unavailable = False, ""
        with self._lock:
            for queue, labels in source.queues.items():
                reading = found.get(queue, Reading(None, None, now))
                for label in labels:
                    self._readings[label] = reading

    # -- what others see -------------------------------------------------------------------------
    def readings(self) -> dict[str, Reading]:
        """The latest reading of each listener label (`source:queue`; listeners with selectors on one
        queue share its reading: the broker counts the queue, not a selector's share)."""
        with self._lock:
            return dict(self._readings)

    def status_fields(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"backlog": {label: {"messages": r.depth, "oldest_age_seconds": r.age,
                                    "seconds_since_read": round(now - r.at, 1)}
                            for label, r in sorted(self.readings().items())}}

    def holds_back_idle(self, since: float, listeners: frozenset[str] | None = None) -> bool:
        """`run --until-idle`: True while the queue of one of `listeners` (labels; None: all) is known
        to hold messages by a reading taken after `since` (their last activity), or while that
        reading is still to come. Unknown backlogs and selector listeners (their queue may hold
        messages for others) never hold back; nor, after `VETO_LIMIT` seconds, messages the idle
        listeners are never given (another consumer's, scheduled ones): the run then ends, logged."""
        waiting: list[str] = []
        stale = recheck = False
        now = time.monotonic()
        for label, reading in self.readings().items():
            if label in self._selectors or reading.depth is None or (listeners is not None and label not in listeners):
                continue
            if reading.at < since:
                stale = True
            elif reading.depth > 0:
                waiting.append(f"{label}: {reading.depth}")
                recheck = recheck or now - reading.at >= RECHECK
        if not waiting and not stale:
            self._veto = None
            return False
        if self._veto is None or self._veto[0] != since:
            self._veto = (since, now)
        if now - self._veto[1] > VETO_LIMIT:
            log.warning("the listeners received nothing for %.0fs while their queues still show messages (%s): "
                        "ending the run anyway (messages held by another consumer, or not yet deliverable)",
                        VETO_LIMIT, ", ".join(waiting) or "no fresh reading")
            return False
        if stale or recheck:
            self._wake.set()  # read again now rather than at the next interval
        return True

    def on_ready(self, bridge: BridgeView) -> None:
        self.start()

    def on_tick(self, bridge: BridgeView) -> None:
        self.start()  # also when a listener never connects: its queue's backlog matters most then

    def on_stopping(self, bridge: BridgeView) -> None:
        self.stop()
