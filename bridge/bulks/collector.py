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
always called without the lock, on the worker threads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from mqbridge.bulks import triage
from mqbridge.bulks.breaker import SinkBreakers
from mqbridge.bulks.collector_limits import CollectorLimits, CollectorStats, TypeLimits
from mqbridge.bulks.result_routes import ResultHandler, ResultRoutes, call_handlers
from mqbridge.bulks.sizing import TypeSizer
from mqbridge.counters import Counters
from mqbridge.errors import CollectorClosedError, UnknownMessageTypeError
from mqbridge.identity import answers_to
from mqbridge.message import Bulk, Message, MessageResult

log = logging.getLogger("mqbridge.collector")  # the name operators configure

# Longest single wait of a blocked submit; stop events and timeouts are checked this often.
_WAIT_STEP = 0.1
# Idle workers wake up this often even without a notification (belt and braces).
_WORKER_WAIT = 1.0


class Executor(Protocol):
    """Writes a bulk (to Spark) and reports one result per message of the bulk.

    An executor may also have `probe()`: one tiny write to its sink that raises if the sink cannot
    be written to. With it, a failed bulk is triaged (`mqbridge.bulks.triage`: outage or culprits) and
    an open circuit breaker can close again; without it, results are taken as they come.
    """

    def execute(self, bulk: Bulk) -> list[MessageResult]: ...


class BulkCollector:
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

    # -- intake ----------------------------------------------------------------------------
    def submit(self, message: Message, handler: ResultHandler | None = None, *,
               timeout: float | None = None, stop: threading.Event | None = None) -> None:
        """Add `message` to its type's active bulk; `handler` (if given) receives its result.

        Blocks while the collector's memory is full (backpressure), until results release
        memory. Raises UnknownMessageTypeError (nothing kept) for a type without executor,
        CollectorClosedError when closed or when `stop` is set while blocked, TimeoutError when
        `timeout` seconds pass while blocked.
        """
        self.submit_unit((message,), handler, timeout=timeout, stop=stop)

    def submit_unit(self, messages: Sequence[Message], handler: ResultHandler | None = None, *,
                    timeout: float | None = None, stop: threading.Event | None = None) -> None:
        """`submit` each of a unit of work's `messages`, in order, holding the lock except while
        memory is full: a bulk closes within the unit only at a fixed limit (size, memory, count),
        never because of its age, latency target or intake pause meanwhile, so a unit's results come
        from one write (its commit does not wait for the next). Raises as `submit`: nothing kept on
        an unknown type; the messages before a wait that raised stay submitted."""
        with self._changed:
            if self._closed:
                raise CollectorClosedError("the collector is closed")
            if unknown := {m.message_type for m in messages} - self._executors.keys():
                raise UnknownMessageTypeError(f"no executor for message type {sorted(unknown)[0]!r} "
                                              f"(registered: {sorted(self._executors)})")
            touched: dict[str, Bulk] = {}
            for message in messages:
                self._wait_for_memory_locked(message.size, timeout, stop)
                touched[message.message_type] = self._add_locked(message, handler)
            for mtype, bulk in touched.items():  # the sizing's target, once the unit is in
                sizer = self._sizers.get(mtype)
                if (sizer is not None and self._active.get(mtype) is bulk and sizer.reached(len(bulk))
                        and self._sink_idle_locked(mtype)):
                    self._forward_locked(bulk, "target")

    def _add_locked(self, message: Message, handler: ResultHandler | None) -> Bulk:
        """Add `message` to its type's active bulk and apply the fixed limits; returns that bulk."""
        mtype = message.message_type
        if handler is not None:
            self._routes.submitted(message, handler)
        now = self._clock()
        bulk = self._active.get(mtype)
        if bulk is None:
            bulk = self._active[mtype] = Bulk(mtype, created=now)
        bulk.add(message)
        if (sizer := self._sizers.get(mtype)) is not None:
            sizer.added(now)
        self._held[message.msg_id] += 1
        self._stats.bytes += message.size
        self._stats.messages += 1
        self._apply_flush_conditions_locked(bulk)
        return bulk

    def _wait_for_memory_locked(self, size: int, timeout: float | None,
                                stop: threading.Event | None) -> None:
        # An empty collector takes any message, even one larger than memory: otherwise that
        # message could never progress.
        if not self._stats.messages or self._stats.bytes + size <= self.limits.memory:
            return
        self._stats.backpressure_waits += 1
        # Only results release memory; messages sitting in active bulks would wait for their
        # timeout, so send them on now.
        for bulk in list(self._active.values()):
            self._forward_locked(bulk, "memory")
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._stats.messages and self._stats.bytes + size > self.limits.memory:
            if self._closed:
                raise CollectorClosedError("the collector is closed")
            if stop is not None and stop.is_set():
                raise CollectorClosedError("stopping")
            step = _WAIT_STEP
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"collector memory full for {timeout}s")
                step = min(step, remaining)
            self._changed.wait(step)

    def _apply_flush_conditions_locked(self, bulk: Bulk) -> None:
        if bulk.nbytes >= self.types[bulk.message_type].bulk_size:
            self._forward_locked(bulk, "size")
        if self._stats.bytes >= self.limits.memory:
            for active in list(self._active.values()):
                self._forward_locked(active, "memory")
        if len(self._active) >= self.limits.max_bulks:
            self._forward_locked(next(iter(self._active.values())), "count")

    def _writing_locked(self, message_type: str) -> int:
        return sum(1 for b in self._executing if b.message_type == message_type)

    def _sink_idle_locked(self, message_type: str) -> bool:
        """Whether a bulk of the type closed now would be written at once: fewer of its bulks are
        written or queued than `writes_per_type`."""
        busy = self._writing_locked(message_type) + sum(1 for b in self._queue if b.message_type == message_type)
        return busy < self.limits.writes_per_type

    def _check_due_locked(self, now: float) -> None:
        """Forward the active bulks that are due by age or by their type's sizing (`TypeSizer.due`)."""
        for bulk in list(self._active.values()):
            mtype = bulk.message_type
            age = now - bulk.oldest
            sizer = self._sizers.get(mtype)
            if age >= self.types[mtype].bulk_timeout:
                self._forward_locked(bulk, "timeout")
            elif sizer is not None and (reason := sizer.due(len(bulk), age, now, self._sink_idle_locked(mtype))):
                self._forward_locked(bulk, reason)

    # -- flushing --------------------------------------------------------------------------
    def flush(self, *, message_type: str | None = None, msg_ids: Iterable[str] | None = None,
              reason: str = "requested") -> int:
        """Forward the active bulks holding any of `msg_ids`, or the active bulk of
        `message_type`, or (neither given) every active bulk. Returns how many were forwarded."""
        if message_type is not None and msg_ids is not None:
            raise ValueError("give message_type or msg_ids, not both")
        wanted = None if msg_ids is None else set(msg_ids)
        with self._changed:
            bulks = list(self._active.values())
            if message_type is not None:
                bulks = [b for b in bulks if b.message_type == message_type]
            elif wanted is not None:
                bulks = [b for b in bulks if any(m.msg_id in wanted for m in b.messages)]
            for bulk in bulks:
                self._forward_locked(bulk, reason)
            return len(bulks)

    def _forward_locked(self, bulk: Bulk, reason: str) -> None:
        """Move an active bulk to the to-be-processed list."""
        del self._active[bulk.message_type]
        bulk.flush_reason = reason
        self._queue.append(bulk)
        self._stats.flushed[reason] = self._stats.flushed.get(reason, 0) + 1
        log.debug("bulk %s flushed (%s): %d messages, %d bytes", bulk.bulk_id, reason, len(bulk), bulk.nbytes)
        self._changed.notify_all()

    def _timer_loop(self) -> None:
        while not self._timer_stop.wait(self._tick):
            try:
                with self._lock:
                    self._check_due_locked(self._clock())
            except Exception:  # the timer must survive anything (a broken fake clock...)
                log.exception("collector timer failed; continuing")

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

    # -- execution -------------------------------------------------------------------------
    def _worker_loop(self) -> None:
        while True:
            with self._changed:
                bulk = self._take_locked()
                while bulk is None and not self._stopping:
                    self._changed.wait(_WORKER_WAIT)
                    bulk = self._take_locked()
                if bulk is None:
                    return
                executor = self._executors[bulk.message_type]
            try:
                self._run(bulk, executor)
            except Exception:  # a worker must never die; _run already released what it could
                log.exception("collector worker failed on bulk %s", bulk.bulk_id)

    def _take_locked(self) -> Bulk | None:
        """The first queued bulk of a type with fewer than `writes_per_type` bulks executing now,
        with the later queued bulks of its type merged in (they would wait anyway)."""
        if self._stopping:
            return None
        limit = self.limits.writes_per_type
        index = next((i for i, b in enumerate(self._queue) if self._writing_locked(b.message_type) < limit), None)
        if index is None:
            return None
        bulk = self._queue.pop(index)
        same = [b for b in self._queue if b.message_type == bulk.message_type]
        if same:
            self._queue = [b for b in self._queue if b.message_type != bulk.message_type]
            for other in same:
                for message in other.messages:
                    bulk.add(message)
            self._stats.coalesced_bulks += len(same)
            log.debug("bulk %s absorbed queued bulks %s: %d messages, %d bytes", bulk.bulk_id,
                     ", ".join(b.bulk_id for b in same), len(bulk), bulk.nbytes)
        self._executing.append(bulk)
        return bulk

    def _run(self, bulk: Bulk, executor: Executor) -> None:
        messages = list(bulk.messages)  # the executor may touch the bulk; fan out what we took
        delivered = 0
        try:
            started = time.perf_counter()
            breakers = self.breakers
            if breakers is not None and breakers.is_open(bulk.message_type):
                # Writing would fail like the last write did: give the messages back at once.
                reason = breakers[bulk.message_type].describe()
                pairs = [(m, MessageResult.sink_outage(m.msg_id, reason, bulk.bulk_id)) for m in messages]
                with self._lock:
                    self._stats.outage_bulks += 1
                delivered = self._deliver(pairs)
                return
            pairs = self._execute(bulk, messages, executor)
            if all(result.ok for _message, result in pairs):  # the costs of a clean write only
                with self._lock:
                    if (sizer := self._sizers.get(bulk.message_type)) is not None:
                        sizer.written(len(messages), time.perf_counter() - started)
            verdict = triage.settle(bulk.message_type, pairs, probe=getattr(executor, "probe", None),
                                    run=lambda part: self._execute(part, list(part.messages), executor))
            elapsed = time.perf_counter() - started
            with self._lock:
                self._stats.executed_bulks += 1
                self._stats.executed_messages += len(messages)
                self._stats.executed_bytes += sum(m.size for m in messages)
                self._stats.execute_seconds_total += elapsed
                self._stats.last_execute_seconds = elapsed
                self._stats.bisect_writes += verdict.bisect_writes
                self._stats.isolated_culprits += verdict.culprits
                if verdict.outage:
                    self._stats.outage_bulks += 1
            if verdict.outage and breakers is not None:
                breakers.trip(bulk.message_type, verdict.outage)
            if self._counters is not None:
                self._counters.observe("bulk_write_seconds", elapsed, type=bulk.message_type)
            delivered = self._deliver(verdict.pairs)
        finally:
            with self._changed:
                # Anything not delivered (an internal error) is released without a result, so
                # its listener stops waiting and backs it out instead of hanging.
                for message in messages[delivered:]:
                    self._release_locked(message)
                self._executing = [b for b in self._executing if b is not bulk]  # by identity, not ==
                if not self._stopping:  # the sink is free: the type's growing bulk may be due now
                    self._check_due_locked(self._clock())
                self._changed.notify_all()

    @staticmethod
    def _execute(bulk: Bulk, messages: list[Message], executor: Executor) -> list[tuple[Message, MessageResult]]:
        """Run the executor on `bulk` and pair each message with its result (never raises)."""
        try:
            results = list(executor.execute(bulk))
            error = None
        except Exception as exc:
            results, error = [], exc
            log.error("executor for %r failed on bulk %s (%d messages); all retryable",
                      bulk.message_type, bulk.bulk_id, len(messages), exc_info=exc)
        return triage.match_results(bulk, messages, results, error)

    def probe(self, message_type: str) -> None:
        """One probe write to the sink of `message_type` (raises if it cannot be written to). An
        executor without `probe` is taken as available."""
        with self._lock:
            executor = self._executors.get(message_type)
        probe = getattr(executor, "probe", None)
        if probe is not None:
            probe()

    def _deliver(self, pairs: list[tuple[Message, MessageResult]]) -> int:
        """Hand each result to its producer handlers and the type's observers, then release
        the messages, all in one go (one lock round and one wake-up per bulk, not per message).
        Returns how many were delivered."""
        with self._lock:
            calls = [(message, result, self._routes.take(message)) for message, result in pairs]
        errors = call_handlers(calls)
        with self._changed:
            self._stats.handler_errors += errors
            for message, _result in pairs:
                self._release_locked(message)
            self._changed.notify_all()
        return len(pairs)

    def _release_locked(self, message: Message) -> None:
        self._routes.released(message)  # released without a result (a no-op after `take`)
        self._stats.bytes -= message.size
        self._stats.messages -= 1
        self._held[message.msg_id] -= 1
        if self._held[message.msg_id] <= 0:
            del self._held[message.msg_id]


__all__ = ["BulkCollector", "CollectorLimits", "CollectorStats", "Executor", "ResultHandler", "TypeLimits"]
