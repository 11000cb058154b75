"""STOMP source adapter (ActiveMQ, RabbitMQ, Artemis) on stomp.py.

Unit of work: messages are received and left unacknowledged. The commit removes them, moving some to
a backout queue and giving others back, as `commit_mode` says (`mqbridge.listeners.stomp.commit`):
in one STOMP transaction (ActiveMQ's default), or with every SEND confirmed by its receipt before any
ACK (RabbitMQ's and Artemis' default). How a unit (or part of it) is given back depends on the
broker: on ActiveMQ NACK is a poison ack that sends the message to the DLQ, so NACK is never sent
there; the subscription is replaced instead, which makes the broker redeliver every unacknowledged
message of it. RabbitMQ keeps a removed subscription's unacknowledged messages until the connection
closes, so there messages are given back with NACK, which requeues them at once.

Two acknowledgement modes (`ack_mode`):

* ``cumulative`` (default on ActiveMQ and Artemis, STOMP ``ack: client``): one ACK of the unit's last
  message acknowledges the whole unit, since a unit is always the oldest unacknowledged messages of
  its subscription. One ACK instead of one per message is what makes the broker fast. To give back
  only *some* messages of a unit, the commit sends each of them to the source queue again as a copy
  that carries its identity (`mqbridge-requeue-*` headers: original message id, deliveries so far,
  put time, last failure), and acknowledges the whole unit. `receive` turns such a copy back into
  the original message; a returned message thus goes to the back of the queue. On RabbitMQ, where a
  SEND to the source queue could be refused (a full queue, a producer's `user-id`), no copy is sent:
  ACK and NACK are cumulative there too, and the unit is settled in runs (`commit`).
* ``individual`` (default on RabbitMQ, ``ack: client-individual``): one ACK per removed message;
  messages to give back are NACKed (RabbitMQ) or not acknowledged and the subscription replaced.

RabbitMQ gives a message a new `message-id` on every delivery, so with `identity = "msg_id"` (the
default) the landing ledger cannot recognise a redelivery of a message that landed: a crash, a cut
connection or a commit in doubt between landing and the source commit lands it again (at-least-once
there, nowhere else). Each such landing of a message RabbitMQ flagged `redelivered` is counted in
`mqbridge_possible_duplicates_total` (the bridge's own give-backs excepted, below: an upper bound,
since a message the broker had dispatched to a connection that was cut before the bridge read it is
flagged too). A producer's id (`identity = "header:NAME"`) makes it exactly-once.

What this process gave back unlanded (NACKed, or moved by a commit that failed) it knows again on
its redelivery by the message's content (`mapping.content_key`, `DeliveryTracker.gave_back_unlanded`):
the redelivery takes over the earlier delivery's msg_id, so its delivery count goes on (the backout
threshold counts only the bridge's own count: RabbitMQ's `x-delivery-count` counts every disconnect
too) and it is no possible duplicate. A delivery that may have landed is never recognised so: two
messages with one content would otherwise be taken for one. After a restart the count starts again.

Messages refused at the edge (a numeric header that does not parse, a `timestamp` past year 9999,
a body over `max_message_size`) are not handed to the listener loop: they go to the listener's
backout queue with the reason, with the unit they arrived in.

Waits are bounded: the whole connect (TCP, TLS, CONNECTED, the subscription's receipt) by
`connect_timeout`, each receipt by `receipt_timeout`; a lost connection ends a wait at once. A
broker that answers CONNECT or SUBSCRIBE with ERROR (bad credentials, unknown virtual host, no
permission) raises SourceRefusedError, which halts the listener instead of reconnecting forever.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mqbridge.config import StompSourceConfig, ids_per_delivery
from mqbridge.counters import Counters
from mqbridge.errors import BackoutFailedError, SourceConnectionError, SourceError
from mqbridge.listeners.stomp.commit import CommitPlan, Transaction
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.frames import install_fast_header_parsing
from mqbridge.listeners.stomp.mapping import REQUEUE_ID, content_key, to_message
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.outbound.stations import Stations
from mqbridge.put_time import timestamp_unit
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.source import BackoutMove, Confirmations, Landed, SourceContext
from mqbridge.tracing.backout_log import BackoutLog

install_fast_header_parsing()  # every frame this process reads: same result, less CPU

log = logging.getLogger("mqbridge.listeners.stomp")  # the adapter's logger: one name for its lines

#: The counter of landed redeliveries that may be duplicates (per-delivery ids: module docstring).
POSSIBLE_DUPLICATES = "possible_duplicates"


class StompSource:
    """One STOMP connection and subscription to one queue (see the module docstring)."""

    supports_partial_commit = True
    applies_backout_threshold = False  # the broker counts nothing the bridge means to count: the listener loop does
    backout_threshold = 0  # it moves nothing by a count of its own
    landed: Callable[[Message], bool] | None = None  # never asked (applies_backout_threshold is False)

    @classmethod
    def from_context(cls, context: SourceContext) -> StompSource:
        """The constructor of the kind's driver (`mqbridge.drivers.Driver.source`)."""
        source, listener = context.source, context.listener
        assert isinstance(source, StompSourceConfig)
        return cls(context.source_name, source, listener.source_destination,
                   prefetch=listener.prefetch or listener.batch, subscription=listener.subscription,
                   tracker=context.shared.tracker, client_name=context.client_name,
                   backout_queue=listener.backout_queue,
                   confirm=listener.confirm == "reply-to", unconfirmable=context.shared.unconfirmable,
                   reply_allow=context.reply_allow(), backout_log=context.shared.backout_log,
                   stations=context.shared.stations, selector=listener.selector,
                   counters=context.shared.counters if ids_per_delivery(source, listener.identity) else None,
                   labels={"listener": f"{context.source_name}:{listener.queue}", "queue": listener.queue})

    def __init__(self, name: str, config: StompSourceConfig, destination: str, *, prefetch: int,
                 tracker: DeliveryTracker, client_name: str = "mqbridge", backout_queue: str | None = None,
                 confirm: bool = False, unconfirmable: InDoubtLog | None = None,
                 reply_allow: ReplyAllowList | None = None, backout_log: BackoutLog | None = None,
                 stations: Stations | None = None, selector: str | None = None,
                 subscription: str | None = None, counters: Counters | None = None,
                 labels: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.destination = destination
        # A topic listener's durable subscription (docs/topics.md); its copies go to `requeue_to`.
        self.subscription = subscription
        self.config = config
        self.prefetch = max(1, prefetch)
        self.tracker = tracker
        self.client_name = client_name
        self.backout_queue = backout_queue  # where messages refused at the edge go (bad header, too big)
        self.backout_log = backout_log  # where those moves are recorded once committed
        # `confirm = "reply-to"`: a result for each message with a reply-to, with the commit.
        self.confirm = confirm
        self.unconfirmable = unconfirmable if unconfirmable is not None else InDoubtLog()
        # Where those results may go (`reply_to_allow`; default: any destination of this broker).
        self.reply_allow = reply_allow if reply_allow is not None else ReplyAllowList(None, listener=name)
        # `[types.X] results_to`: each final result is also sent there (mqbridge.outbound.stations)
        self.stations = stations
        # Where landed redeliveries that may be duplicates are counted (identity msg_id on RabbitMQ), or None.
        self.counters = counters
        self.labels = dict(labels or {"listener": f"{name}:{destination}", "queue": destination})
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError,)
        self._connection = Connection(name, config, destination, prefetch=self.prefetch,
                                      client_name=client_name, selector=selector, durable=subscription)
        self._unit = Unit()
        self.cumulative = config.ack_mode == "cumulative"
        self.receipted = config.commit_mode == "receipted"
        # RabbitMQ: message ids per delivery; its own give-backs recognised by content (module docstring).
        self.ids_per_delivery = config.broker == "rabbitmq"

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect and subscribe, all within `connect_timeout`. A broker that answers CONNECT or
        SUBSCRIBE with ERROR (bad credentials, unknown virtual host, no permission) raises
        SourceRefusedError (the listener halts); anything else raises SourceConnectionError."""
        self._connection.open()

    def close(self) -> None:
        self._end_unit()  # unacked messages return to the queue when the connection closes
        self._connection.close()

    def _end_unit(self) -> Unit:
        unit, self._unit = self._unit, Unit()
        return unit

    # -- unit of work ------------------------------------------------------------------------
    def receive(self, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        frames = self._connection.frames
        while True:
            if self._connection.lost:
                raise SourceConnectionError(f"STOMP connection for {self.destination} is lost")
            try:
                frame = frames.frames.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if frame is None:
                continue
            if frame.headers.get("subscription") != self._connection.subscription:
                continue  # prefetched by a replaced subscription: the broker redelivers it
            if not self._unit.messages:
                self._unit.errors_at_start = len(frames.errors)
            message, problem = self._to_message(frame)
            self._unit.messages.append(message)
            if problem is not None:
                self._refuse(message, problem)
            else:
                self._unit.handed += 1
                return message

    def _refuse(self, message: Message, problem: str) -> None:
        """A message refused at the edge (a header that does not parse, a body over
        max_message_size) never reaches the listener loop: it is moved to the backout queue with
        the reason, by the commit of the unit it arrived in, or at once if the listener holds
        nothing of the unit yet (then the unit is this message alone)."""
        log.warning("%s: message %s refused: %s; moving it to %s", self.destination, message.msg_id, problem,
                    self.backout_queue or "(no backout queue)")
        self._unit.refused.append(BackoutMove(message, problem, self.backout_queue))
        if self._unit.handed == 0:
            self.commit()

    def _to_message(self, frame: Any) -> tuple[Message, str | None]:
        """The message of a MESSAGE frame, and why it must be refused (None: it is fine). On
        RabbitMQ a redelivery of what this process gave back unlanded takes over its msg_id; any other
        redelivery may have landed before (`Unit.doubtful`)."""
        headers, earlier, doubtful = frame.headers, None, False
        if self.ids_per_delivery and headers.get("redelivered") == "true" and REQUEUE_ID not in headers:
            if self.tracker.holds_given_back:
                earlier = self.tracker.earlier_delivery(content_key(headers, _body(frame)))
            doubtful = earlier is None
        message, problem = to_message(frame, source=self.name, destination=self.destination, tracker=self.tracker,
                                      max_message_size=self.config.max_message_size, earlier_id=earlier,
                                      timestamp_unit=timestamp_unit(self.config.broker))
        if self.ids_per_delivery:
            self._unit.received[message.msg_id] = headers
            if doubtful:
                self._unit.doubtful.add(message.msg_id)
        if self.subscription is not None:
            # A copy (given back) came through the subscription's own queue: the topic is where it was read.
            message.destination = self.destination
            message.subscription = self.subscription
        return message, problem

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations | None:
        """Remove the unit's messages, moving `moves` (and those refused at the edge) to their
        backout queues and giving `returns` back, as `commit_mode` says (the `commit` module);
        with `confirm`, a result to the reply-to of each message landed or moved, with the commit.

        Raises SourceConnectionError (nothing removed, or on RabbitMQ the landed messages removed
        and the rest given back), BackoutFailedError (the broker refused a move: the listener
        halts), InDoubtError (COMMIT sent, no receipt)."""
        unit = self._end_unit()
        if not unit.messages:
            return None
        plan = CommitPlan.of(unit, moves, returns)
        if not plan.acked:  # everything goes back: nothing to remove
            self._gave_back_unlanded(unit, unit.messages)
            self._connection.give_back(unit.messages, cumulative=self.cumulative)
            return None
        self._check(plan)
        confirmed = Confirmations() if self.confirm or self.stations is not None else None
        self._gave_back_unlanded(unit, [m for m in unit.messages if m.msg_id in plan.returned])
        try:
            if self.ids_per_delivery and not self.cumulative:
                self._settle_in_two_steps(plan, landed, confirmed)
            else:
                self._settle_at_once(plan, landed, confirmed)
        except SourceError:
            # Moves that did not happen never landed: their redeliveries keep their ids and counts.
            self._gave_back_unlanded(unit, [m for m in unit.messages if m.msg_id in plan.moving])
            raise
        if unit.refused and self.backout_log is not None:  # the listener records the moves it asked for
            self.backout_log.record_moves(unit.refused, listener=f"{self.name}:{self.destination}",
                                          queue=self.destination, default_queue=self.backout_queue)
        if self.counters is not None and unit.doubtful:
            self._count_possible_duplicates(self.counters, unit, landed)
        return confirmed

    def _count_possible_duplicates(self, counters: Counters, unit: Unit, landed: Sequence[Landed]) -> None:
        """Count the landed messages that may have landed before, unrecognisable (`Unit.doubtful`)."""
        count = sum(1 for item in landed if item.message.msg_id in unit.doubtful)
        if count:
            counters.inc(POSSIBLE_DUPLICATES, count, **self.labels)

    def _settle_at_once(self, plan: CommitPlan, landed: Sequence[Landed], confirmed: Confirmations | None) -> None:
        """Every SEND, then the ACKs (and the COMMIT, transactional): see the `commit` module."""
        unit = plan.unit
        tx = self._begin(unit, transactional=not self.receipted)
        if self.cumulative and not self.ids_per_delivery:
            tx.send_copies(plan, self.tracker)  # the unit's last ACK removes all of it
        tx.send_moves(plan, unit.messages)
        self._send_results(tx, plan, landed, confirmed, unit.messages)
        tx.send_derived(landed)  # the preprocessors' outbox: only for landed messages (`mqbridge.outbound.outbox`)
        if self.cumulative and self.ids_per_delivery:
            tx.finish_in_runs(plan)  # RabbitMQ: ACK and NACK each run, no copy
            return
        # Cumulative: an ACK of the unit's last message acknowledges all of it.
        tx.finish(plan.acked if not self.cumulative else unit.messages[-1:], plan.acked)
        if plan.returned and not self.cumulative:
            self._connection.give_back([m for m in unit.messages if m.msg_id in plan.returned], cumulative=False)

    def _settle_in_two_steps(self, plan: CommitPlan, landed: Sequence[Landed],
                             confirmed: Confirmations | None) -> None:
        """RabbitMQ, individual acks: the landed messages, then the moves, then the give-backs (see
        the `commit` module): a refused move brings back no landed message."""
        staying, moved = plan.staying, plan.moved
        first = self._begin(plan.unit, transactional=False)
        self._send_results(first, plan, landed, confirmed, staying)
        first.send_derived(landed)
        first.finish(staying, staying)
        if moved:
            second = self._begin(plan.unit, transactional=False)
            second.send_moves(plan, moved)
            self._send_results(second, plan, landed, confirmed, moved)
            second.finish(moved, moved)
        if plan.returned:
            self._connection.give_back([m for m in plan.unit.messages if m.msg_id in plan.returned],
                                       cumulative=False)

    def _begin(self, unit: Unit, *, transactional: bool) -> Transaction:
        key = (lambda message: self._content_key(unit, message)) if self.ids_per_delivery else None
        return Transaction.begin(self._connection, transactional=transactional, unconfirmable=self.unconfirmable,
                                 tracker=self.tracker, content_key=key)

    def _send_results(self, tx: Transaction, plan: CommitPlan, landed: Sequence[Landed],
                      confirmed: Confirmations | None, messages: Sequence[Message]) -> None:
        """The results of `messages` to their reply-to (`confirm`) and to their types' `results_to`."""
        if confirmed is not None and self.confirm:
            tx.send_results(plan, landed, confirmed, self.reply_allow, messages)
        if confirmed is not None and self.stations is not None:
            tx.send_station_results(plan, landed, confirmed, self.stations, messages)

    @staticmethod
    def _content_key(unit: Unit, message: Message) -> str:
        """The content key of a message of `unit` (RabbitMQ), from its frame's headers as received."""
        return content_key(unit.received.get(message.msg_id, {}), message.body)

    def _gave_back_unlanded(self, unit: Unit, messages: Sequence[Message]) -> None:
        """RabbitMQ: `messages` go back to the queue and never landed: their redeliveries take over
        their ids (module docstring). Recorded before the NACK, which the broker answers at once."""
        if self.ids_per_delivery and messages:
            self.tracker.gave_back_unlanded((self._content_key(unit, m), m.msg_id) for m in messages)

    def _check(self, plan: CommitPlan) -> None:
        """Fail a unit the broker sent ERROR during (SourceConnectionError: it comes back); halt on
        a move that has no backout queue (BackoutFailedError)."""
        errors, since = self._connection.frames.errors, plan.unit.errors_at_start
        if len(errors) > since:
            self._connection.fail("the broker sent ERROR during the unit of work: "
                                  + "; ".join(e for _, e in errors[since:]))
        unmovable = plan.unmovable()
        if unmovable is not None:
            # The messages stay unacknowledged: given back when the listener closes the connection.
            self._unit = Unit(plan.unit.messages, errors_at_start=plan.unit.errors_at_start,
                              received=plan.unit.received, doubtful=plan.unit.doubtful)
            raise BackoutFailedError(f"no backout queue configured for {self.destination}; cannot move "
                                     f"message {unmovable.message.msg_id} ({unmovable.reason})")

    def rollback(self) -> None:
        """Give the whole unit back. Its messages may have landed (a unit in flight the listener could
        not finish): on RabbitMQ their redeliveries are not recognised as theirs."""
        unit = self._end_unit()
        if unit.messages:
            self._connection.give_back(unit.messages, cumulative=self.cumulative)


def _body(frame: Any) -> bytes:
    return frame.body if isinstance(frame.body, bytes) else str(frame.body or "").encode()
