"""The shared bulk collector: gathers messages into one active bulk per message type and
hands full, old or requested bulks to the type's executor on a small pool of worker threads.

Flush conditions (each counted in `CollectorStats.flushed` under its reason):

- ``size``: the active bulk's bytes reached the type's `bulk_size`;
- ``memory``: the bytes held by the collector (active + queued + executing) reached
  `CollectorLimits.memory` — every active bulk is forwarded;
- ``timeout``: the oldest message of an active bulk is `bulk_timeout` old (background timer);
- ``count``: after a message was added, `max_bulks` or more bulks are active — the oldest goes;
- ``latency``: the oldest message of an active bulk waited the type's `latency` target;
- ``target`` / ``idle``: the type's sink is idle (a write slot of the type is free) and the
  bulk reached the size its learned write costs need to keep up with the intake, or the intake
  paused (the listeners wait for results): `mqbridge.bulks.sizing`. While the sink is busy the bulk keeps
  growing (group commit) and is taken as soon as the write ends;
- ``shutdown`` (or any reason given to `flush`): explicit requests.

A listener hands a unit of work over whole (`submit_unit`), under one hold of the lock: only a
fixed limit (size, memory, count) closes a bulk within a unit, so a unit's results come from one
write and its commit never waits for the next write as well.

Forwarded bulks wait in a FIFO to-be-processed list. At most `writes_per_type` bulks of one message
type execute at a time (default 1): their Spark jobs stage into private
directories and overlap, so one bulk's Python work (its Arrow table, its handoff file) and its Spark
job's planning run while the JVM writes the other's; the executor publishes them into the table
one after another. Queued bulks of a type are merged into the one taken next (fewer, bigger writes).
A message stays in the message-id list (`is_bulk_mode_on`) and its bytes stay counted until its result has been
handed to every handler, so memory is the backpressure that slows listeners down.

A bulk whose write failed is triaged before its results are handed out (`mqbridge.bulks.triage`): a
probe write decides outage (the sink's circuit breaker opens, `mqbridge.bulks.breaker`) or message
failure (the bulk is bisected so that only the culprits come back). While a sink's breaker is
open its bulks are answered with outage results without a write.

Threading: one lock and one condition guard all state; executors and result handlers are
always called without the lock, on the worker threads. The code is split by the thread that runs
it, over that one shared state: the intake and flush decisions run on the listener threads and the
timer thread (`mqbridge.bulks.intake`), the writes on the worker threads
(`mqbridge.bulks.workers`), which also deliver the results (`mqbridge.bulks.delivery`). This module
keeps the one public object, `BulkCollector`: its state, registration, start and close, and the
queries any thread may make.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from mqbridge.bulks.breaker import SinkBreakers
from mqbridge.bulks.collector_limits import CollectorLimits, CollectorStats, TypeLimits
from mqbridge.bulks.intake import _WAIT_STEP
from mqbridge.bulks.result_routes import ResultHandler, ResultRoutes
from mqbridge.bulks.sizing import TypeSizer
from mqbridge.bulks.workers import BulkWorkers, Executor
from mqbridge.counters import Counters
from mqbridge.errors import CollectorClosedError, UnknownMessageTypeError
from mqbridge.identity import answers_to
from mqbridge.message import Bulk, Message

log = logging.getLogger("mqbridge.collector")  # the name operators configure


class BulkCollector(BulkWorkers):
    """Collects messages into bulks per message type and executes them on a worker pool.

    Create it, `register_executor` for every type, `start` it, `submit` messages; `close`
    drains it. `clock` is the time base of bulk age (it must match
    `Message.received_monotonic`, hence `time.monotonic`); tests pass a fake one. `counters`,
    when given, receives a `bulk_write_seconds` histogram sample per executed bulk.

    `breakers` (the sinks' circuit breakers): a bulk of a sink whose breaker is open gets outage
    results at once, without a write; a write the triage calls an outage opens the breaker.
    """

    def __init__(self, limits: CollectorLimits, types: Mapping[str, TypeLimits], *,
                 clock: Callable[[], float] = time.monotonic, tick: float = 0.01,
                 counters: Counters | None = None, breakers: SinkBreakers | None = None) -> None:
        if limits.memory <= 0 or limits.max_bulks < 1 or limits.workers < 1 or limits.writes_per_type < 1:
            raise ValueError(f"collector limits must be positive: {limits}")
        self.limits = limits
        self.types: dict[str, TypeLimits] = dict(types)
        self._clock = clock
        self._tick = tick
        self._counters = counters
        self.breakers = breakers
        self._lock = threading.Lock()
        # Signalled whenever bulks are queued, a type finishes, memory is released or we close.
        self._changed = threading.Condition(self._lock)
        self._executors: dict[str, Executor] = {}
        self._routes = ResultRoutes()
        self._active: dict[str, Bulk] = {}  # insertion order = age order (count flush)
        self._queue: list[Bulk] = []  # the to-be-processed list, FIFO
        self._executing: list[Bulk] = []  # the bulks on a worker right now
        self._committing: list[Bulk] = []  # of them, those that only commit now (`Bulk.files_written`)
        self._held: Counter[str] = Counter()  # the message-id list
        self._stats = CollectorStats()
        now = clock()
        self._sizers = {name: TypeSizer(limits_.latency, now, limits.writes_per_type)
                        for name, limits_ in self.types.items()
                        if limits_.latency is not None}
        self._closed = False
        self._stopping = False  # workers exit once set
        self._timer_stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- registration ---------------------------------------------------------------------
    def register_executor(self, message_type: str, executor: Executor) -> None:
        """Use `executor` for bulks of `message_type` (a configured type); replaces any earlier one."""
        self._check_type(message_type)
        with self._lock:
            previous = self._executors.get(message_type)
            self._executors[message_type] = executor
        if previous is not None and previous is not executor:
            log.info("executor for message type %r replaced: %r -> %r", message_type, previous, executor)

    def register_result_handler(self, handler: ResultHandler, *, message_type: str | None = None,
                                msg_id: str | None = None) -> None:
        """Call `handler` for results of every message of `message_type` (an observer), or for
        the result of message `msg_id` (its producer; removed once that result is delivered).
        Exactly one of the two must be given. Registering the same handler twice has no effect."""
        self._check_handler_key(message_type, msg_id)
        with self._lock:
            self._routes.add(handler, message_type, msg_id)

    def unregister_result_handler(self, handler: ResultHandler, *, message_type: str | None = None,
                                  msg_id: str | None = None) -> None:
        """Remove a handler registered with the same arguments; unknown handlers are ignored."""
        self._check_handler_key(message_type, msg_id)
        with self._lock:
            self._routes.remove(handler, message_type, msg_id)

    def _check_handler_key(self, message_type: str | None, msg_id: str | None) -> None:
        if (message_type is None) == (msg_id is None):
            raise ValueError("give exactly one of message_type or msg_id")
        if message_type is not None:
            self._check_type(message_type)

    def _check_type(self, message_type: str) -> None:
        if message_type not in self.types:
            raise UnknownMessageTypeError(
                f"message type {message_type!r} is not configured (configured: {sorted(self.types)})")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the timeout thread and the worker pool."""
        with self._lock:
            if self._closed:
                raise CollectorClosedError("the collector is closed")
            if self._threads:
                raise RuntimeError("the collector is already started")
            self._threads.append(threading.Thread(target=self._timer_loop, name="collector-timer", daemon=True))
            self._threads += [
                threading.Thread(target=self._worker_loop, name=f"collector-worker-{n}", daemon=True)
                for n in range(1, self.limits.workers + 1)
            ]
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float) -> bool:
        """Stop intake, flush every active bulk ("shutdown"), wait up to `timeout` seconds for
        every result to be delivered, then stop the threads. True if everything was delivered.

        A bulk still executing when the time is up keeps its worker thread (a daemon) busy;
        its messages were not confirmed, so their sources will deliver them again.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            if not self._closed:
                self._closed = True
                for bulk in list(self._active.values()):
                    self._forward_locked(bulk, "shutdown")
                self._changed.notify_all()
            while self._stats.messages and (remaining := deadline - time.monotonic()) > 0:
                self._changed.wait(min(remaining, _WAIT_STEP))
            delivered = self._stats.messages == 0
            undelivered = self._stats.messages
            self._stopping = True
            self._changed.notify_all()
        self._timer_stop.set()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if not delivered:
            log.error("collector closed with %d messages without a result", undelivered)
        return delivered

    # -- queries ---------------------------------------------------------------------------
    def is_bulk_mode_on(self, msg_id: str) -> bool:
        """True while the collector holds the message: submitted, result not yet delivered."""
        with self._lock:
            return self._held[msg_id] > 0

    def holding(self, key: str) -> list[tuple[Message, Bulk, str]]:
        """The messages held whose msg_id or identity is `key` (`mqbridge where`), with their bulk and its
        state: "collecting" (active), "queued" or "writing". Only references are copied under the lock."""
        with self._lock:
            bulks = [(b, list(b.messages), state) for state, group in (("collecting", self._active.values()),
                     ("queued", self._queue), ("writing", self._executing)) for b in group]
        return [(m, bulk, state) for bulk, messages, state in bulks for m in messages
                if key and (key == m.msg_id or answers_to(m.identity, key))]

    def stats(self) -> CollectorStats:
        """A consistent snapshot of the counters and current sizes."""
        with self._lock:
            snapshot = dataclasses.replace(self._stats, flushed=dict(self._stats.flushed))
            snapshot.active_bulks = len(self._active)
            snapshot.queued_bulks = len(self._queue)
            snapshot.in_flight_bulks = len(self._executing)
            snapshot.sizing = {name: sizer.status() for name, sizer in self._sizers.items()}
            return snapshot

    def probe(self, message_type: str) -> None:
        """One probe write to the sink of `message_type` (raises if it cannot be written to). An
        executor without `probe` is taken as available."""
        with self._lock:
            executor = self._executors.get(message_type)
        probe = getattr(executor, "probe", None)
        if probe is not None:
            probe()


__all__ = ["BulkCollector", "CollectorLimits", "CollectorStats", "Executor", "ResultHandler", "TypeLimits"]
