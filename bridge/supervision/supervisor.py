"""The control thread: starts the listener threads and every tick reconciles configured listener
threads with live ones (gunicorn's arbiter idea). It is given its parts, ready made, by the
composition root (`mqbridge.app`), and tells its observers (`mqbridge.observer`) what happens.

A listener thread that dies (lost connection, unexpected error) is restarted with capped
exponential backoff; one that stops beating is reported as stuck. A configuration error
raised at run time (e.g. a classify hook naming an unknown type) stops the bridge instead of
restarting forever. Which threads should run is the configuration's `threads` of each listener,
as an operator changed it at run time (paused, stopped, another thread count: `mqbridge.supervision.control`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqbridge.bulks.breaker import SinkBreakers
from mqbridge.bulks.collector import BulkCollector, Executor
from mqbridge.config import DEFAULT_BACKOUT_THRESHOLD
from mqbridge.config.listener import unit_wait
from mqbridge.counters import Counters, RateMeter
from mqbridge.drivers import open_source, stored_sender_of
from mqbridge.errors import BridgeError, FatalError, RetryLater
from mqbridge.gate import AllOpenGate
from mqbridge.identity import listener_scope
from mqbridge.loop.dedupe import Deduplicator
from mqbridge.loop.in_flight import Held, held
from mqbridge.loop.listener import Chain, ListenerSpec, ListenerThread, PlainChain
from mqbridge.observer import Event, Observer
from mqbridge.outbound.stations import Stations
from mqbridge.outbound.stored import StoredLog, StoredResults, stored_results_of
from mqbridge.source import QueueShared, Source, SourceContext
from mqbridge.supervision.control import STATES, STOPPED, ListenerControls, control_status
from mqbridge.supervision.decision import Decision, decide
from mqbridge.supervision.guard import MemoryGuard
from mqbridge.supervision.report import listener_entries, observer_fields, summary_line
from mqbridge.supervision.tuning import ConcurrencyTuner, latency_targets
from mqbridge.tracing.backout_log import BackoutLog

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig, ListenerConfig

log = logging.getLogger("mqbridge.supervisor")  # the name operators configure

BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0
# A listener that ran this long since its last (re)start is healthy again: reset its backoff.
HEALTHY_AFTER = 60.0


SourceFactory = Callable[[SourceContext], Source]
#: The chain provider of one listener entry, by its name (`source:queue`).
ChainFactory = Callable[[str], Callable[[], Chain]]


@dataclass
class Slot:
    """One configured listener thread position and the thread currently filling it."""

    config: ListenerConfig
    index: int  # thread number within the entry, 1..threads
    name: str
    thread: ListenerThread | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_INITIAL
    next_start: float = 0.0
    last_error: str = ""
    reported_stuck: bool = False
    halted: bool = False  # a listener that must not be restarted (see _reap)
    starts: int = 0  # the listener's `start` commands this slot has followed (see reconcile)
    #: Made for a thread count the tuner raised (`mqbridge.supervision.tuning`): its first start is the
    #: tuner's, not a restart, and `listener_threads_created` (an alert watches it) does not count it.
    tuned: bool = False

    @property
    def listener(self) -> str:
        """The listener entry's name, `source:queue`."""
        return f"{self.config.source}:{self.config.queue}"

    @property
    def alive(self) -> bool:
        """A listener thread fills this slot and is running."""
        return self.thread is not None and self.thread.is_alive()


class Bridge:
    """The whole bridge of one configuration: Spark, executors, collector, listener threads."""

    def __init__(self, config: BridgeConfig, *, collector: BulkCollector,
                 executors: Callable[[], Mapping[str, Executor]],
                 chain_factory: ChainFactory = lambda _entry: PlainChain,
                 source_factory: SourceFactory = open_source,
                 counters: Counters, guard: MemoryGuard,
                 observers: Sequence[Observer] = (),
                 dedupe: Deduplicator | None = None,
                 stop_event: threading.Event | None = None,
                 reload_event: threading.Event | None = None,
                 breakers: SinkBreakers | None = None,
                 backout_log: BackoutLog | None = None) -> None:
        self.config = config
        self.counters = counters
        self.collector = collector
        self.guard = guard  # pauses listener intake while the process is above [bridge] max_rss
        #: The sinks' circuit breakers: pause the intake of the listeners feeding an unavailable sink.
        self.breakers = breakers
        #: The level of the per-tick summary line (DEBUG under the terminal's live progress line).
        self.summary_level = logging.INFO
        #: Why `run(until_idle=...)` gave up waiting (a sink unavailable too long); "" otherwise.
        self.gave_up = ""
        self._executors = executors  # called once, at start (it may start Spark)
        self._chain_factory = chain_factory
        self._source_factory = source_factory
        self.observers = list(observers)
        self._dedupe = dedupe  # the landing ledger; None: at-least-once
        self.backout_log = backout_log  # where moves to a backout queue are recorded; None: nowhere
        self._stored_log: StoredLog | None = None  # claimed stored results (`mqbridge.outbound.stored`)
        self.shared: dict[tuple[str, str], QueueShared] = {}  # per (source, queue), across restarts
        self.slots: list[Slot] = []
        #: Set by a signal or service control handler to stop; only ever set, never cleared.
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        #: Set (e.g. by a SIGHUP handler) to have the control thread tell the observers `on_reload`.
        self.reload_event = reload_event if reload_event is not None else threading.Event()
        self.fatal: BaseException | None = None
        self._ready = False
        self._errors = RateMeter()
        #: What an operator changed at run time: paused, stopped, thread counts (`mqbridge.supervision.control`).
        self.controls = ListenerControls((cfg.source, cfg.queue, cfg.start_threads,
                                          cfg.threads_max if cfg.adaptive_threads else None)
                                         for cfg in config.listeners)
        #: Chooses the thread count of the entries whose `threads` is unset (`mqbridge.supervision.tuning`).
        self.tuner = ConcurrencyTuner(self.controls, counters, latency_targets=lambda: latency_targets(self.config),
                                      backpressure_waits=lambda: self.collector.stats().backpressure_waits,
                                      alive=lambda name: sum(1 for s in self.slots if s.listener == name and s.alive))

    def start(self) -> None:
        """Start the executors (Spark), the collector and every listener thread."""
        for name, executor in self._executors().items():
            self.collector.register_executor(name, executor)
        self.collector.start()
        if self.breakers is not None:
            self.breakers.start()
        for cfg in self.config.listeners:
            for index in range(1, cfg.start_threads + 1):
                self.slots.append(Slot(cfg, index, f"{cfg.source}:{cfg.queue}#{index}"))
            self.shared.setdefault((cfg.source, cfg.queue), QueueShared(
                backout_log=self.backout_log, stations=Stations.of(self.config.types, cfg), counters=self.counters,
                stored=self._stored_results(cfg)))
        self.reconcile()

    def _stored_results(self, cfg: ListenerConfig) -> StoredResults | None:
        """The stored results of listener `cfg`'s messages (`mqbridge.outbound.stored`), None if no type wants them."""
        if not any(t.stored_result for t in self.config.types.values()):
            return None
        if self._stored_log is None:
            self._stored_log = StoredLog(self.config.resolve_path(self.config.bridge.state_dir)
                                         / "stored_results.sqlite3", self.config.bridge.dedupe_window)
        source = self.config.sources[cfg.source]
        return stored_results_of(self.config.types, cfg, source, self._stored_log,
                                 stored_sender_of(source.kind), self.config.bridge.name, self.counters)

    # -- supervision -----------------------------------------------------------------------
    def _spawn(self, slot: Slot) -> None:
        cfg = slot.config
        shared = self.shared[(cfg.source, cfg.queue)]
        # One connection per unit in flight, each with a client name of its own.
        sources = [self._source_factory(SourceContext(
            source_name=cfg.source, source=self.config.sources[cfg.source], listener=cfg,
            bridge_name=self.config.bridge.name, thread_index=(slot.index - 1) * cfg.in_flight + k, shared=shared))
            for k in range(1, cfg.in_flight + 1)]
        source = sources[0]
        if source.applies_backout_threshold:
            threshold = 0  # the adapter moves them itself (see Source.applies_backout_threshold)
        elif cfg.backout_threshold is None:
            threshold = DEFAULT_BACKOUT_THRESHOLD
        else:
            threshold = cfg.backout_threshold
        latency = self.config.types[cfg.message_type].latency if cfg.message_type in self.config.types else None
        spec = ListenerSpec(name=slot.name, source_name=cfg.source, queue=cfg.queue, batch=cfg.batch,
                            wait=unit_wait(cfg, latency), message_type=cfg.message_type,
                            backout_threshold=threshold, backout_queue=cfg.backout_queue, identity=cfg.identity,
                            halt_after_failures=cfg.halt_after_failures,
                            outbox_allow=None if cfg.outbox_allow is None else tuple(cfg.outbox_allow),
                            identity_scope=listener_scope(cfg.source, cfg.queue, cfg.subscription, cfg.identity))
        gates = [self.guard.gate, self.controls.get(slot.listener).gate]  # the operator's pause and stop
        sink_gate = self.breakers.gate(cfg.message_type) if self.breakers is not None else None
        if sink_gate is not None:  # an unavailable sink pauses the listeners that feed it
            gates.append(sink_gate)
        chain = self._chain_factory(f"{cfg.source}:{cfg.queue}")
        thread = ListenerThread(spec, sources, self.collector, chain, self.counters,
                                shared.tracker, dedupe=self._dedupe,
                                gate=AllOpenGate(gates), poison=shared.poison,
                                sink_gate=self.breakers.gate if self.breakers is not None else None,
                                backout_log=self.backout_log, stored=shared.stored)
        if not (slot.tuned and slot.started == 0.0):
            self.counters.inc("listener_threads_created", listener=f"{cfg.source}:{cfg.queue}")
        slot.thread, slot.started, slot.reported_stuck = thread, time.monotonic(), False
        thread.start()

    def reconcile(self) -> None:
        """Compare the listener threads that should run (configured, as an operator changed them at
        run time) with live ones; restart the dead (with backoff), end those no longer wanted."""
        now = time.monotonic()
        self._fit_slots()
        for slot in self.slots:
            control = self.controls.get(slot.listener)
            wanted = control.wants(slot.index)
            if slot.starts != control.starts:  # `start`: a halted or waiting thread starts again now
                slot.starts, slot.halted, slot.next_start, slot.backoff = control.starts, False, 0.0, BACKOFF_INITIAL
            thread = slot.thread
            if thread is not None and thread.is_alive():
                if not wanted and not thread.stopping:
                    log.info("%s: %s: finishing its units of work, then ending", slot.name,
                             "listener stopped" if control.state == STOPPED else f"threads set to {control.threads}")
                    thread.stop()
                if now - slot.started > HEALTHY_AFTER and thread.state.units:
                    slot.backoff = BACKOFF_INITIAL
                self._check_stuck(slot, now)
                continue
            if thread is not None:  # it ended: find out why, once
                self._reap(slot, now, wanted)
                if self.fatal is not None:
                    return
            if not wanted or slot.halted or self.stop_event.is_set() or now < slot.next_start:
                continue
            try:
                self._spawn(slot)
            except FatalError as exc:
                self.fail(exc)
                return
            except BridgeError as exc:
                self._note_error(slot, now, exc)
        self._set_thread_gauges()

    def _fit_slots(self) -> None:
        """One slot per thread each listener should have: new slots for a raised thread count; the
        slots beyond a lowered one leave once their thread has ended. A stopped listener keeps its
        slots (empty), so that /status shows its threads as stopped."""
        slots: list[Slot] = []
        for cfg in self.config.listeners:
            control = self.controls.get(f"{cfg.source}:{cfg.queue}")
            kept = [s for s in self.slots if s.config is cfg and (s.index <= control.threads or s.thread is not None)]
            have = {s.index for s in kept}
            kept += [Slot(cfg, index, f"{cfg.source}:{cfg.queue}#{index}", starts=control.starts,
                          tuned=control.adaptive and index > control.configured)
                     for index in range(1, control.threads + 1) if index not in have]
            slots += sorted(kept, key=lambda s: s.index)
        if [id(s) for s in slots] != [id(s) for s in self.slots]:
            self.slots = slots  # a new list: other threads (status) iterate the old one undisturbed

    def _set_thread_gauges(self) -> None:
        """Threads configured (as changed at run time) and alive, in total and per listener, and each
        listener's run-time state (`mqbridge_listener_state{listener, state}`: 1 for the one it is in)."""
        alive: dict[str, int] = {}
        for slot in self.slots:
            alive[slot.listener] = alive.get(slot.listener, 0) + slot.alive
        self.counters.set("listener_threads_actual", sum(alive.values()))
        self.counters.set("listener_threads_configured", sum(control.wanted for control in self.controls))
        for control in self.controls:
            self.counters.set("listener_threads", control.threads, listener=control.name)
            self.counters.set("listener_threads_alive", alive.get(control.name, 0), listener=control.name)
            for state in STATES:
                self.counters.set("listener_state", float(control.state == state), listener=control.name, state=state)

    def _reap(self, slot: Slot, now: float, wanted: bool = True) -> None:
        thread = slot.thread
        assert thread is not None
        slot.thread = None
        failure = thread.failure
        if failure is None:
            if wanted and not self.stop_event.is_set():
                self._note_error(slot, now, RuntimeError("listener thread ended"))
            return
        decision = decide(failure)
        if decision is Decision.STOP_BRIDGE:
            self.fail(failure)
            return
        if not wanted:  # it was asked to end (stopped, or beyond the thread count): no restart to plan
            slot.last_error = f"{type(failure).__name__}: {failure}"
            self.counters.inc("listener_errors", listener=slot.listener)
            log.warning("%s: ended with %s while finishing its units of work", slot.name, slot.last_error)
            return
        if decision is Decision.HALT:
            # Restarting would hit the same poison message again and again: halt this slot.
            slot.halted = True
            slot.last_error = f"halted: {failure}"
            self.counters.inc("listener_errors", listener=f"{slot.config.source}:{slot.config.queue}")
            log.critical("%s: halted: %s", slot.name, failure)
            return
        if decision is Decision.RETRY_LATER:
            delay = failure.retry_after if isinstance(failure, RetryLater) else HEALTHY_AFTER
            log.warning("%s: %s; retrying in %.0fs", slot.name, failure, delay)
            slot.last_error = f"{type(failure).__name__}: {failure}"
            slot.next_start = now + delay
            return
        if isinstance(failure, thread.source.recoverable_errors):
            log.critical("%s: connection lost: %s", slot.name, failure)
        else:
            log.error("%s: listener thread failed", slot.name, exc_info=failure)
        self._note_error(slot, now, failure)

    def _note_error(self, slot: Slot, now: float, exc: BaseException) -> None:
        slot.last_error = f"{type(exc).__name__}: {exc}"
        slot.restarts += 1
        slot.next_start = now + slot.backoff
        log.warning("%s: restarting in %.1fs (restart %d)", slot.name, slot.backoff, slot.restarts)
        slot.backoff = min(slot.backoff * 2, BACKOFF_MAX)
        self.counters.inc("listener_errors", listener=f"{slot.config.source}:{slot.config.queue}")
        self.counters.inc("listener_restarts", listener=f"{slot.config.source}:{slot.config.queue}")

    def _check_stuck(self, slot: Slot, now: float) -> None:
        thread = slot.thread
        assert thread is not None
        limit = max(3 * self.config.bridge.control_interval, 60.0)
        silent = now - thread.state.heartbeat
        if silent > limit and not slot.reported_stuck:
            slot.reported_stuck = True
            self.counters.inc("listener_stuck", listener=f"{slot.config.source}:{slot.config.queue}")
            log.error("%s: no heartbeat for %.0fs in phase %s; a driver call is hanging",
                      slot.name, silent, thread.state.phase)

    def fail(self, exc: BaseException) -> None:
        """Stop the bridge because of `exc`, which retrying cannot cure (`run` returns 2). Safe from any
        thread: the Spark warm-up (`mqbridge.landing.warmup`) reports what it finds this way."""
        self.fatal = exc
        log.critical("stopping the bridge: %s", exc)
        self.stop_event.set()

    # -- running ---------------------------------------------------------------------------
    def idle(self) -> bool:
        """Every listener thread is connected, waiting, holding nothing; the collector is empty.
        A halted listener (see `_reap`) will not read again, so it does not count against idleness;
        `run` reports it in its exit code. An unavailable sink is never idle: its messages are still
        on the queues. A paused listener is not idle: it holds messages back until it is resumed."""
        if self.breakers is not None and self.breakers.open_breakers():
            return False
        if not self.slots:
            return True
        reading: set[str] = set()  # the listeners that still read: a backlog holds back only theirs
        for slot in self.slots:
            if slot.halted or self.controls.get(slot.listener).state == STOPPED:
                continue  # a stopped listener reads nothing more either; `run` reports it like a halted one
            if (thread := slot.thread) is None or not thread.is_alive() or not thread.idle:
                return False
            reading.add(slot.listener)
        since = self.last_activity()  # a backlog read before then is stale
        return self.collector.stats().messages == 0 and not any(
            o.holds_back_idle(since, frozenset(reading)) for o in self.observers)

    def holding(self, key: str) -> list[Held]:
        """The deliveries this bridge holds whose msg_id or identity is `key` (`mqbridge where`;
        `mqbridge.loop.in_flight.held`)."""
        threads = [(s.name, s.thread.connections) for s in self.slots if s.thread is not None and s.thread.is_alive()]
        return held(key, self.collector.holding(key), threads)

    def last_activity(self) -> float:
        times = [s.thread.state.last_activity for s in self.slots if s.thread is not None]
        return max(times, default=0.0)

    def measure_rates(self) -> None:
        """Once per control interval: the seed's "errors per second" since the last call."""
        self.counters.set("errors_per_second", self._errors.rate(self.counters.total("listener_errors")))

    def summary(self) -> str:
        """One line of counters for the log and systemd's STATUS (no side effects)."""
        return summary_line(self.counters, self.collector.stats(), self.slots, self.controls,
                            self.breakers.summary() if self.breakers is not None else "")

    def run(self, until_idle: float | None = None) -> int:
        """Supervise until stopped (or idle for `until_idle` seconds); then shut down.
        Returns the process exit code."""
        interval = self.config.bridge.control_interval
        tick = min(0.25, interval)
        next_summary = time.monotonic() + interval
        idle_since: float | None = None
        while not self.stop_event.wait(tick):
            self.reconcile()
            self.tuner.step(time.monotonic())
            if self.reload_event.is_set():
                self.reload_event.clear()
                log.info("reload requested")
                self._notify("on_reload")
            now = time.monotonic()
            if not self._ready and self.slots and all(
                    s.thread is not None and s.thread.state.connected_once for s in self.slots
                    if self.controls.get(s.listener).wants(s.index)):
                self._ready = True
                self._notify("on_ready")
            if now >= next_summary:
                next_summary = now + interval
                self.measure_rates()
                log.log(self.summary_level, "%s", self.summary())
                self._notify("on_tick")
            self._notify("on_wake")
            if until_idle is not None and self._outage_too_long():
                break
            if until_idle is not None:
                if self.idle() and now - self.last_activity() >= until_idle:
                    if idle_since is None:
                        idle_since = now
                    if now - idle_since >= min(until_idle, 1.0):
                        log.info("idle for %.1fs: every message is committed; stopping", until_idle)
                        break
                else:
                    idle_since = None
        self._notify("on_stopping")
        ok = self.shutdown()
        log.info("%s", self.summary())
        if self.fatal is not None:
            return 2
        if self.gave_up:
            log.error("run --until-idle gave up: %s; the messages are still on their queues", self.gave_up)
            return 1
        halted = [s for s in self.slots if s.halted]
        for slot in halted:
            log.error("%s stopped reading: %s; its messages are still on the queue", slot.name, slot.last_error)
        stopped = [c.name for c in self.controls if c.state == STOPPED] if until_idle is not None else []
        for name in stopped:  # `run --until-idle` promises every message committed: not those
            log.error("listener %s was stopped (mqbridge listener stop); its messages are still on the queue", name)
        return 0 if ok and not halted and not stopped else 1

    def _outage_too_long(self) -> bool:
        """`run --until-idle`: a sink unavailable for `[spark] until_idle_outage_limit` ends the run."""
        limit = self.config.spark.until_idle_outage_limit
        for breaker in self.breakers.open_breakers() if self.breakers is not None else ():
            if breaker.unavailable_for() >= limit:
                self.gave_up = (f"{breaker.describe()} (for {breaker.unavailable_for():.0f}s, "
                                f"[spark] until_idle_outage_limit is {limit:.0f}s)")
                return True
        return False

    def _notify(self, event: Event) -> None:
        """Call the Observer method named `event` on every observer; one that raises is logged and kept."""
        for observer in self.observers:
            try:
                getattr(observer, event)(self)
            except Exception:
                log.exception("observer %s failed in %s", type(observer).__name__, event)

    def status(self) -> dict[str, Any]:
        """A JSON-able view of listeners, collector and counters for /status and logs."""
        stats = self.collector.stats()
        return {
            "name": self.config.bridge.name,
            "ready": self._ready,
            "stopping": self.stop_event.is_set(),
            "fatal": str(self.fatal) if self.fatal else "",
            "gave_up": self.gave_up,
            "listeners": listener_entries(self.slots, self.controls, time.monotonic()),
            "listener_controls": control_status(self.controls, self.slots),
            "collector": {k: v for k, v in vars(stats).items()},
            **observer_fields(self.observers),
        }

    def stop(self) -> None:
        """Ask the bridge to shut down. Only sets an event (safe from a signal handler)."""
        self.stop_event.set()

    def shutdown(self) -> bool:
        """Stop intake, let every listener finish its unit of work (its bulks are flushed and
        its results awaited), then close the collector. All within `shutdown_timeout`."""
        self.stop_event.set()
        deadline = time.monotonic() + self.config.bridge.shutdown_timeout
        if self.breakers is not None:
            self.breakers.stop(timeout=0.0)  # no new probes; a running one ends with the process
        threads = [s.thread for s in self.slots if s.thread is not None]
        for thread in threads:
            thread.stop()
        # Listeners waiting for results need their bulks flushed now, not at bulk_timeout.
        self.collector.flush(reason="shutdown")
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        drained = self.collector.close(max(0.0, deadline - time.monotonic()))
        for shared in self.shared.values():  # what is queued of the stored results, within the deadline
            if shared.stored is not None:
                shared.stored.close(max(0.0, deadline - time.monotonic()))
        if stuck:
            log.error("shutdown timeout: listener threads still busy: %s; their unacknowledged "
                      "messages return to the source when the process exits", ", ".join(stuck))
        return not stuck and drained
