"""The collector's intake and flush decisions, run on the threads that hand messages in: the
listener threads (`submit`, `submit_unit`, `flush`) and the collector's timer thread (`_timer_loop`).

It keeps the active bulk of each message type, applies the flush conditions (size, memory, count on
each add; timeout and the type's sizing on the timer tick and when a write ends) and makes a
submitting listener wait while the collector's memory is full (backpressure). A flushed bulk goes to
the to-be-processed list that the bulk workers (`mqbridge.bulks.workers`) take from; the intake never
calls an executor or a result handler, so a listener only ever waits on memory, never on a write.

Separate from the workers and the delivery because other threads run it; it shares their state and
their one lock and condition (`BulkCollector` sets them up): every ``*_locked`` method expects the
lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from mqbridge.bulks.collector_limits import CollectorLimits, CollectorStats, TypeLimits
from mqbridge.bulks.result_routes import ResultHandler, ResultRoutes
from mqbridge.bulks.sizing import TypeSizer
from mqbridge.errors import CollectorClosedError, UnknownMessageTypeError
from mqbridge.message import Bulk, Message

log = logging.getLogger("mqbridge.collector")  # the name operators configure

# Longest single wait of a blocked submit; stop events and timeouts are checked this often.
_WAIT_STEP = 0.1


class BulkIntake:
    """The intake half of `BulkCollector`: submit, the active bulks, the flush conditions and the
    backpressure wait. Its state is created by `BulkCollector.__init__`."""

    limits: CollectorLimits
    types: dict[str, TypeLimits]
    _clock: Callable[[], float]
    _tick: float
    _lock: threading.Lock
    _changed: threading.Condition
    _executors: Mapping[str, object]
    _routes: ResultRoutes
    _active: dict[str, Bulk]
    _queue: list[Bulk]
    _executing: list[Bulk]
    _committing: list[Bulk]
    _held: Counter[str]
    _stats: CollectorStats
    _sizers: dict[str, TypeSizer]
    _closed: bool
    _timer_stop: threading.Event

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
        """Bulks of the type in their write, but for those whose files are written and which only
        commit now (`Bulk.files_written`)."""
        return sum(1 for b in self._executing
                   if b.message_type == message_type and not any(b is c for c in self._committing))

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
