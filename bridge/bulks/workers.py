"""The bulk worker threads (``collector-worker-N``): each takes the next bulk from the
to-be-processed list that the intake (`mqbridge.bulks.intake`) fills, merges the queued bulks of its
type into it, writes it with the type's executor (at most `writes_per_type` per type at a time),
hands a failed write to the triage (`mqbridge.bulks.triage`) and the sink's circuit breaker, and
delivers the results (`mqbridge.bulks.delivery`).

Separate from the intake because these threads, not the listeners, run the executors and the
result handlers, always without the lock: a write never holds up a listener's submit. They share
the collector's one lock and condition (`BulkCollector` sets them up).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from mqbridge.bulks import triage
from mqbridge.bulks.breaker import SinkBreakers
from mqbridge.bulks.delivery import ResultDelivery
from mqbridge.bulks.intake import BulkIntake
from mqbridge.counters import Counters
from mqbridge.message import Bulk, Message, MessageResult

log = logging.getLogger("mqbridge.collector")  # the name operators configure

# Idle workers wake up this often even without a notification (belt and braces).
_WORKER_WAIT = 1.0


class Executor(Protocol):
    """Writes a bulk (to Spark) and reports one result per message of the bulk.

    An executor may also have `probe()`: one tiny write to its sink that raises if the sink cannot
    be written to. With it, a failed bulk is triaged (`mqbridge.bulks.triage`: outage or culprits) and
    an open circuit breaker can close again; without it, results are taken as they come.
    """

    def execute(self, bulk: Bulk) -> list[MessageResult]: ...


class BulkWorkers(BulkIntake, ResultDelivery):
    """The worker part of `BulkCollector`: the worker loop, the choice of the next bulk, its write,
    triage and delivery. Its state is created by `BulkCollector.__init__`."""

    _executors: dict[str, Executor]
    _counters: Counters | None
    breakers: SinkBreakers | None
    _stopping: bool

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
        bulk.on_files_written = lambda: self._files_written(bulk)
        return bulk

    def _files_written(self, bulk: Bulk) -> None:
        """`Bulk.files_written`: the bulk only commits now, so it no longer holds a write slot of its type
        (`_writing_locked`); the next bulk of the type may be taken."""
        with self._changed:
            self._committing.append(bulk)
            if not self._stopping:
                self._check_due_locked(self._clock())
            self._changed.notify_all()

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
                self._committing = [b for b in self._committing if b is not bulk]
                bulk.on_files_written = None
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
