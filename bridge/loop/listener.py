"""The listener thread: units of work, from receive to commit or rollback.

    receive a batch (up to `batch` messages, at most `wait`; with units in flight, until the
      oldest one's results are in)
      → classify each message on its original content
      → run the preprocessor chain (one snapshot of the chain for the whole unit of work)
      → hand the messages to the bulk collector (which closes a bulk by its size, age, latency
        target and learned write costs: `mqbridge.bulks.collector`, `mqbridge.bulks.sizing`)
      → wait for a result per message
      → decide what the results mean (`mqbridge.loop.unit_plan.plan_unit`), then carry that out:
        commit (removing them, moving permanent failures to the backout queue)
        or give the retryable failures back to the source queue.
      → tell the chain about every message it processed that does not leave as landed
        (`mqbridge.loop.undo`: its `on_submit_error`, once per delivery, on every way a unit ends).

A listener holds up to `in_flight` units at once, one per source connection of its own
(`mqbridge.loop.in_flight`): while the collector holds its earlier units it reads the next; units are
finished in the order they were read. Only this thread touches its sources; the collector's
workers hand results back through a `UnitResults` waiter. The queue's delivery records are kept
through a `DeliveryBook`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from mqbridge import failpoints
from mqbridge.bulks.collector import BulkCollector
from mqbridge.counters import Counters
from mqbridge.errors import (
    BridgeError,
    LedgerUnavailableError,
    PoisonLoopError,
    PreprocessorError,
    UnknownMessageTypeError,
)
from mqbridge.gate import AllOpenGate, IntakeGate
from mqbridge.loop.bookkeeping import DeliveryBook
from mqbridge.loop.dedupe import Deduplicator, landed_before, landed_where, repeated_in_unit
from mqbridge.loop.in_flight import Connections, PendingUnit
from mqbridge.loop.listener_spec import ListenerSpec, ListenerState
from mqbridge.loop.preprocess import Chain, PlainChain, Preprocessed, preprocess_unit
from mqbridge.loop.undo import UnitUndo, abandon
from mqbridge.loop.unit_plan import (
    Unit,
    UnitPlan,
    UnitPolicy,
    UnitResults,
    exhausted_reason,
    halting_error,
    plan_unit,
)
from mqbridge.loop.unit_report import report_committed
from mqbridge.message import Message
from mqbridge.outbound.outbox import Derived, OutboxAllow, unit_outbox
from mqbridge.outbound.stored import StoredResults
from mqbridge.put_time import settle_unit
from mqbridge.records import DeliveryTracker, PoisonLog
from mqbridge.source import BackoutMove, Source, with_derived
from mqbridge.tracing.backout_log import BackoutLog

log = logging.getLogger("mqbridge.listener")  # the name operators configure

# Seconds to wait after backing out a whole unit of work before reading again.
ROLLBACK_PAUSE = 0.5
# Longest wait for a message on one connection while units are in flight (their results are looked
# at between) or, for a unit's first message, while the thread has other connections to read.
POLL_IN_FLIGHT = 0.05


class ListenerThread(threading.Thread):
    """Reads units of work from one source connection until stopped or the connection fails.

    A lost connection ends the thread after the unit of work is given back; the control thread
    restarts it with capped backoff. Errors are captured in `failure` for the supervisor.
    """

    def __init__(
        self,
        spec: ListenerSpec,
        source: Source | Sequence[Source],
        collector: BulkCollector,
        chain_provider: Callable[[], Chain],
        counters: Counters,
        tracker: DeliveryTracker,
        gate: IntakeGate | None = None,
        dedupe: Deduplicator | None = None,
        poison: PoisonLog | None = None,
        sink_gate: Callable[[str], IntakeGate | None] | None = None,
        backout_log: BackoutLog | None = None,
        stored: StoredResults | None = None,
    ) -> None:
        super().__init__(name=f"listener-{spec.name}", daemon=True)
        # Closed by the memory guard or by the breaker of a sink this listener feeds: wait before
        # the next batch. `sink_gate(type)` gives the breaker's gate of a type the classify hook
        # routes messages to; it is added to `gate` (an AllOpenGate) once this listener feeds it.
        self.gate = gate
        self.sink_gate = sink_gate
        self._fed: set[str] = {spec.message_type}
        self.dedupe = dedupe  # the landing ledger (exactly-once), or None (at-least-once)
        self.backout_log = backout_log  # where committed moves are recorded (`mqbridge where`)
        self.stored = stored  # "stored" results when messages join a bulk (`mqbridge.outbound.stored`)
        self.spec = spec
        # Its connections (`[[listeners]] in_flight`, each holding at most one unit of work) and,
        # as `source`, the one whose unit is being read or finished.
        self.connections = Connections(list(source) if isinstance(source, Sequence) else [source])
        self.source = self.connections.sources[0]
        if dedupe is not None:  # see Source.applies_backout_threshold
            for each in self.connections.sources:
                if each.applies_backout_threshold:
                    each.landed = self._landed
        self.collector = collector
        self.chain_provider = chain_provider
        self.counters = counters
        # The queue's delivery counts, suspects and failure counts (shared by its listener threads
        # and restarts), kept through one book.
        self.book = DeliveryBook(tracker, poison if poison is not None else PoisonLog())
        self._isolating = False  # reading units of one (logged when it changes)
        self.state = ListenerState()
        self.failure: BaseException | None = None
        self._stop_event = threading.Event()
        self._labels = {"listener": spec.name.rsplit("#", 1)[0], "queue": spec.queue}

    def _landed(self, message: Message) -> bool:
        """Whether the ledger shows `message` landed (asked by an adapter before it moves a message
        over its backout threshold; LedgerUnavailableError when it cannot say)."""
        return bool(landed_before(self.dedupe, [message], self.spec.identity, None, [], self.spec.identity_scope))

    # -- supervision -----------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the thread to finish its unit of work and exit. Only sets an event."""
        self._stop_event.set()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    @property
    def idle(self) -> bool:
        """Connected, waiting for messages, holding no unit of work."""
        return self.state.phase == "receiving" and not self.connections.pending

    def run(self) -> None:
        try:
            self._run()
            self.state.phase = "stopped"
        except BaseException as exc:  # captured for the supervisor, which logs and restarts
            self.failure = exc
            self.state.phase = "failed"
            self.state.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.connections.finish_after_failure(self._finish_unit, self.spec.name)
            for source in self.connections:
                source.close()

    def _run(self) -> None:
        self.state.phase = "connecting"
        for source in self.connections:
            source.connect()
        self.state.connected_once = True
        self.state.last_activity = time.monotonic()
        connections = self.connections
        while not self._stop_event.is_set():
            while self._results_waiting():
                self._finish_oldest()
            free = connections.free()
            gate_closed = self.gate is not None and not self.gate.is_open
            # A full set, a closed gate (the units in flight may be what holds it: memory, an
            # unavailable sink) or isolating suspects: finish the oldest unit first.
            if connections.pending and (free is None or gate_closed or self.book.isolating):
                self._finish_oldest()
                continue
            if free is None or not self._wait_for_gate():
                break
            self.source = free
            self.state.phase = "receiving"
            self.state.heartbeat = time.monotonic()
            # With several connections each is polled in turn: a message the broker dispatched to one
            # must not wait while the thread blocks on another.
            batch = self._receive_batch(POLL_IN_FLIGHT if connections.pending or len(connections) > 1 else 1.0)
            if batch:
                self.state.phase = "processing"
                with connections.reading(batch):
                    self._process(batch)
                self.state.units += 1
        while connections.pending:  # stopping: every unit in flight is finished first
            self._finish_oldest()

    def _finish_oldest(self) -> None:
        """Wait for the oldest unit in flight's results and finish it on its own connection."""
        self._finish_unit(self.connections.pop_oldest())

    def _finish_unit(self, unit: PendingUnit) -> None:
        self.source = unit.source
        self.state.phase = "processing"
        self.connections.finish(unit)

    def _wait_for_gate(self) -> bool:
        """Wait while the memory guard holds intake, in short steps (stop stays prompt, the
        heartbeat fresh). False if a stop was requested meanwhile."""
        if self.gate is None or self.gate.is_open:
            return True
        self.state.phase = "paused"
        while not self.gate.wait(min(1.0, max(self.spec.wait, 0.05))):
            self.state.heartbeat = time.monotonic()
            if self._stop_event.is_set():
                return False
        return not self._stop_event.is_set()

    def _receive_batch(self, first_wait: float) -> list[Message]:
        """Up to `batch` messages; waits at most `wait` once the first one has arrived, and
        at most `first_wait` (capped by `wait`) for the first (so a stop request is seen promptly)."""
        spec = self.spec
        # While the queue has suspects, units of one: a culprit then fails alone (see PoisonLog).
        isolating = self.book.isolating
        if isolating != self._isolating:
            self._isolating = isolating
            log.info("%s: %s", spec.name, "suspects of a backed-out unit on the queue: reading units of one message"
                     if isolating else f"no suspects left: reading units of up to {spec.batch} messages again")
        limit = 1 if isolating else spec.batch
        asked = time.monotonic()
        first = self.source.receive(timeout=min(first_wait, max(spec.wait, 0.05)))
        if first is None:
            # Time spent waiting for a message that did not come: the tuner's sign that the queue is
            # drained (`mqbridge.supervision.tuning`), so that more threads would not read more.
            self.counters.inc("listener_wait_seconds", time.monotonic() - asked, **self._labels)
            return []
        batch = [first]
        if limit == 1:
            self.book.read_alone(first)
        deadline = time.monotonic() + spec.wait
        # With units in flight, look at their results between short waits: the oldest one's results
        # in end the filling of this unit, which then goes as it is (its results must not wait up to
        # `wait` for messages that trickle in).
        step = POLL_IN_FLIGHT if self.connections.pending else 1.0
        waited = 0.0
        while len(batch) < limit and not self._stop_event.is_set():
            remaining = deadline - time.monotonic()
            asked = time.monotonic()
            message = self.source.receive(timeout=max(0.0, min(remaining, step)))
            if message is None:
                waited += time.monotonic() - asked
                if remaining <= 0 or self._results_waiting():
                    break
                continue
            batch.append(message)
        now = time.monotonic()
        if waited:
            self.counters.inc("listener_wait_seconds", waited, **self._labels)
        self.state.last_activity = now
        self.state.heartbeat = now
        self.counters.inc("messages_received", len(batch), **self._labels)
        # A unit short of its `batch` ended because the queue had no message ready for a moment: the
        # arrivals set the rate, not the threads (the tuner's sign, beside waits for a first message).
        self.counters.inc("listener_units_read", 1, **self._labels)
        if len(batch) < limit:
            self.counters.inc("listener_units_short", 1, **self._labels)
        settle_unit(batch, self.counters, self._labels)  # a put time no row may have: the received time
        return batch

    def _results_waiting(self) -> bool:
        """Whether the oldest unit in flight has all its results: it can be finished now."""
        oldest = self.connections.oldest()
        return oldest is not None and oldest.ready

    # -- one unit of work --------------------------------------------------------------------
    def _process(self, batch: list[Message]) -> None:
        spec = self.spec
        moves: list[BackoutMove] = []
        try:
            recognised = landed_before(self.dedupe, batch, spec.identity, spec.backout_queue, moves,
                                       spec.identity_scope)
        except LedgerUnavailableError as unavailable:
            # Whether these messages landed cannot be known now: the whole unit goes back, and,
            # as in any outage, none of its deliveries counts towards a backout threshold.
            self.book.given_back_in_outage(batch)
            self._back_out(batch, f"cannot look the unit up in the landing ledger: {unavailable}",
                           suspects=[])
            return
        repeated = repeated_in_unit(batch, recognised) if self.dedupe is not None else set()
        todo: list[Message] = []
        for message in batch:
            if id(message) in recognised or id(message) in repeated or any(m.message is message for m in moves):
                continue
            if spec.backout_threshold and self.book.counted(message) > spec.backout_threshold:
                moves.append(BackoutMove(message, self._exhausted_reason(message), spec.backout_queue))
                continue
            todo.append(message)

        # One snapshot of the chain for the whole unit of work (or the last good one: `preprocess_unit`).
        allow = OutboxAllow(spec.outbox_allow, spec.name.rsplit("#", 1)[0])
        chain, pre, fallback = preprocess_unit(todo, self.chain_provider(), spec.message_type, spec.name, allow)
        if fallback is not None:
            for _message, exc in fallback.blamed:
                self.counters.inc("preprocessor_errors", 1, plugin=exc.plugin, **self._labels)
            abandon(fallback.chain, fallback.failed, spec.name)
        undo = UnitUndo(chain, todo, pre, spec.name)
        for message, exc in pre.failed:
            self._preprocessor_failed(message, exc)
        if pre.failed and not self.source.supports_partial_commit and self.dedupe is None:
            self._land_nothing(batch, undo, pre.failed)
            return
        # Otherwise the unit goes on: on a source that commits in part, only the messages that
        # failed are given back; on one that cannot (IBM MQ), the good messages land before the unit
        # is backed out, and the ledger recognises them when they come back, one by one.

        submitted = pre.submitted
        try:
            results = self._submit(submitted, undo)
        except BaseException as exc:  # the unit is given back (rolled back, or with its connection)
            undo.not_committed(exc)
            raise

        def finish() -> None:
            try:
                self._await(results, submitted)
                unit = Unit(tuple(batch), results.pairs(submitted), tuple(moves),
                            tuple((m, str(e)) for m, e in pre.failed),
                            deduplicated=tuple(m for m in batch if id(m) in recognised) if recognised else (),
                            consumed=pre.consumed,
                            repeated=tuple(m for m in batch if id(m) in repeated) if repeated else ())
                self._finish(unit, undo, unit_outbox(chain, pre.derived, unit.deduplicated, allow))
            except BaseException as exc:  # not committed (a commit that failed, or never reached)
                undo.not_committed(exc)
                raise

        self.connections.add(PendingUnit(self.source, results, finish, batch))

    def _land_nothing(self, batch: list[Message], undo: UnitUndo,
                      failed: list[tuple[Message, PreprocessorError]]) -> None:
        """A preprocessor failed in a unit that can only be backed out whole, and without the ledger
        whatever lands now would land again when it comes back: land nothing (every message's
        preprocessing is undone), and read the whole unit again one by one."""
        halt = None  # counting each failure (per message, across redeliveries) may halt the listener
        for message, exc in failed:
            halt = halting_error(self._policy(), message, self.book.blamed(message), str(exc)) or halt
        undo.land_nothing()
        self._back_out(batch, str(failed[0][1]), suspects=batch, halt=halt)

    def _submit(self, submitted: list[Message], undo: UnitUndo) -> UnitResults:
        """Hand the unit's messages to the collector; their results come back through the waiter."""
        results = undo.results = UnitResults(submitted)
        try:
            self.collector.submit_unit(submitted, results)
        except UnknownMessageTypeError as exc:
            # A classify hook chose a type nobody configured: a configuration error, not a
            # message error. Give everything back and let the supervisor stop the bridge.
            self._await(results, submitted)
            undo.not_committed(exc)
            self.source.rollback()
            raise
        if submitted:
            self._feeding({m.message_type for m in submitted})
            if self.stored is not None:  # accepted into bulks: "stored, not yet landed" (never blocks)
                self.stored.joined(submitted)
        return results

    def _feeding(self, types: set[str]) -> None:
        """Pause for the sinks of other types too, once messages were routed to them: a listener
        whose units hold messages for an unavailable sink would only have them given back."""
        new = types - self._fed
        if not new:
            return
        self._fed |= new
        if self.sink_gate is None or not isinstance(self.gate, AllOpenGate):
            return
        for message_type in sorted(new):
            gate = self.sink_gate(message_type)
            if gate is not None:
                self.gate.add(gate)
                log.info("%s: feeds message type %r too: pauses while its sink is unavailable",
                         self.spec.name, message_type)

    def _await(self, results: UnitResults, submitted: list[Message]) -> None:
        """Wait for every submitted message's result. Rolling back while the collector still
        holds a message would let it land *and* come back: so this waits, without limit, but
        keeps the heartbeat fresh so the supervisor can tell waiting from hanging."""
        if results.wait(0):  # every result is in (the usual case when a unit is finished): nothing to wait for
            return
        while not results.wait(0.5):
            self.state.heartbeat = time.monotonic()
            if not any(self.collector.is_bulk_mode_on(m.msg_id) for m in submitted):
                # Nothing of ours is held and not every result came back: they were submitted
                # before a failure; any missing result counts as retryable below.
                return

    def _finish(self, unit: Unit, undo: UnitUndo, derived: dict[int, tuple[Derived, ...]]) -> None:
        """End the unit of work: decide what its results mean (`plan_unit`), then carry the plan
        out: count the failures, tell the chain what does not land, then commit the unit or back it
        out whole."""
        records = self.book.records([m for m, _ in unit.failed] + unit.submitted)
        plan = plan_unit(unit, self._policy(), records)
        halt: PoisonLoopError | None = None
        for failure in plan.failures:
            if not failure.noted:
                self.book.failed(failure.message, failure.reason)
            halt = plan.halt(failure, self.book.blamed(failure.message)) or halt
        undo.planned(unit, plan)
        if plan.back_out:
            self._back_out_unit(unit, plan, halt)
        else:
            self._commit(unit, plan, halt, undo, derived)

    def _back_out_unit(self, unit: Unit, plan: UnitPlan, halt: PoisonLoopError | None) -> None:
        """Carry out a plan that gives messages back on a source that cannot commit in part."""
        if plan.duplicated_risk:
            # MQ cannot commit part of a unit of work: without the ledger, what landed will land
            # again (with it, the redelivered copies are recognised and committed unlanded).
            self.counters.inc("messages_duplicated_risk", plan.duplicated_risk, **self._labels)
            log.warning("%s: %d messages landed but their unit of work is backed out "
                        "(another type's write failed); they will be delivered and land again",
                        self.spec.name, plan.duplicated_risk)
        if plan.outage_only:  # only the sink's fault: no delivery of this unit counts
            self.book.given_back_in_outage(unit.batch)
        self._back_out(list(unit.batch), plan.reason, suspects=list(plan.culprits), halt=halt)

    def _commit(self, unit: Unit, plan: UnitPlan, halt: PoisonLoopError | None, undo: UnitUndo,
                derived: dict[int, tuple[Derived, ...]]) -> None:
        """Carry out a plan that commits the unit: its messages leave the source, `plan.moves` go to
        the backout queue and `plan.returns` back to the source, and the landed messages' `derived`
        messages are sent (`mqbridge.outbound.outbox`), in one unit of work."""
        spec = self.spec
        failpoints.hit("before_source_commit")
        self.book.given_back_in_outage(plan.outages)
        landed = with_derived(list(plan.landed) + landed_where(self.dedupe, unit.deduplicated), derived)
        confirmed = self.source.commit(moves=list(plan.moves), returns=list(plan.returns), landed=landed)
        undo.committed()
        failpoints.hit("after_source_commit")
        if confirmed is not None:
            for name in ("sent", "failed", "rerouted", "not_allowed", "to_stations"):
                if count := getattr(confirmed, name):
                    self.counters.inc(f"results_{name}", count, **self._labels)
        self.book.left_queue(plan.left)
        report_committed(self.counters, self._labels, spec.name, unit, plan, self.backout_log,
                         self.source.backout_queue)
        if plan.returns:
            self.counters.inc("messages_backed_out", len(plan.returns), **self._labels)
            log.warning("%s: returned %d messages to %s: %s", spec.name, len(plan.returns), spec.queue,
                        plan.reason)
            if halt is not None:
                raise halt
            if len(plan.returns) == len(unit.batch):
                self._pause_after_rollback()  # nothing of the unit got through: do not spin on it

    def _back_out(self, batch: list[Message], reason: str, *, suspects: list[Message],
                  halt: PoisonLoopError | None = None) -> None:
        """Back the whole unit out (a source that cannot commit in part), then raise `halt` if
        given. The `suspects` may hold the culprit: until they leave the queue, its listeners read
        units of one (PoisonLog), so the culprit fails alone."""
        spec = self.spec
        if suspects and len(batch) > 1:
            self.book.backed_out(suspects, len(batch))
        self.source.rollback()
        self.counters.inc("messages_backed_out", len(batch), **self._labels)
        log.warning("%s: backed out %d messages: %s", spec.name, len(batch), reason)
        if suspects and len(batch) > 1:
            log.warning("%s: reading units of one message until the suspect(s) %s fail or pass alone",
                        spec.name, ", ".join(m.msg_id for m in suspects[:5]) + (" ..." if len(suspects) > 5 else ""))
        if halt is not None:
            raise halt
        self._pause_after_rollback()

    def _policy(self) -> UnitPolicy:
        """What `plan_unit` needs to know of this listener and its source."""
        spec, source = self.spec, self.source
        return UnitPolicy(queue=spec.queue, backout_threshold=spec.backout_threshold,
                          backout_queue=spec.backout_queue, halt_after_failures=spec.halt_after_failures,
                          partial_commit=source.supports_partial_commit,
                          source_moves=source.applies_backout_threshold,
                          moving_threshold=self._moving_threshold(), ledger=self.dedupe is not None)

    def _moving_threshold(self) -> int:
        """The delivery count at which a failing message is moved aside: the listener's own, or,
        where the adapter applies it, the adapter's (IBM MQ: the queue's BOTHRESH, inquired at
        connect). 0: nothing will ever move it."""
        if self.source.applies_backout_threshold:
            return self.source.backout_threshold
        return self.spec.backout_threshold

    def _preprocessor_failed(self, message: Message, exc: PreprocessorError) -> None:
        log.warning("%s: message %s: %s", self.spec.name, message.msg_id, exc)
        self.counters.inc("preprocessor_errors", 1, plugin=exc.plugin, **self._labels)
        self.book.failed(message, str(exc))

    def _pause_after_rollback(self) -> None:
        """A unit of work that failed as a whole would otherwise be retried in a tight loop,
        burning the messages' backout counts in milliseconds."""
        self._stop_event.wait(ROLLBACK_PAUSE)

    def _exhausted_reason(self, message: Message) -> str:
        return exhausted_reason(message, self.spec.backout_threshold, self.book.last_reason(message))


__all__ = ["BridgeError", "Chain", "ListenerSpec", "ListenerState", "ListenerThread", "PlainChain", "Preprocessed",
           "UnitResults"]
