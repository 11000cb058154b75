"""STOMP source adapter (ActiveMQ, RabbitMQ, Artemis) on stomp.py.

Unit of work: messages are received and left unacknowledged. Commit opens a STOMP transaction,
puts the backout moves (SEND, persistent) in it, acknowledges the removed messages and commits
with a receipt. How a unit (or part of it) is given back depends on the broker: on ActiveMQ NACK is
a poison ack that sends the message to the DLQ, so NACK is never sent there; the subscription is
replaced instead, which makes the broker redeliver every unacknowledged message of it. RabbitMQ keeps
a removed subscription's unacknowledged messages until the connection closes, so there messages are
given back with NACK, which requeues them at once (`broker = "rabbitmq"`).

Two acknowledgement modes (`ack_mode`):

* ``cumulative`` (default, STOMP ``ack: client``): one ACK of the unit's last message
  acknowledges the whole unit, since a unit is always the oldest unacknowledged messages of its
  subscription. One ACK instead of one per message is what makes the broker fast. To give back
  only *some* messages of a unit, the transaction sends each of them to the source queue again as
  a copy that carries its identity (`mqbridge-requeue-*` headers: original message id, deliveries
  so far, put time, last failure), and acknowledges the whole unit: atomically, so nothing is lost
  and nothing that landed comes back. `receive` turns such a copy back into the original message.
  A returned message thus goes to the back of the queue.
* ``individual`` (``ack: client-individual``): one ACK per removed message; messages to give back
  are simply not acknowledged and the subscription is replaced.

Two commit modes (`commit_mode`): ``transactional`` (default on ActiveMQ and RabbitMQ) and
``receipted`` (default for Artemis), described in `mqbridge.listeners.stomp.commit`.

Stamping (`identity = "stamp"`, the default on RabbitMQ, whose `message-id` is new on every
delivery): a message without the bridge's stamp is never handed to the listener loop. The commit of
its unit sends, in the unit's transaction, a copy of it to the same queue carrying a fresh stamp (a
random id in `mqbridge-requeue-id`, its put time, its count), and acknowledges it. Only stamped
copies are landed, with the stamp as their identity. Why this neither loses nor duplicates: the
transaction applies the SEND and the ACK together or not at all (RabbitMQ holds a transaction's
frames until COMMIT and drops them with the connection), so after any crash either the unstamped
original is on the queue (and is stamped again, no copy having been made) or exactly one stamped
copy is; a stamped copy keeps its stamp on every redelivery, so the ledger recognises it after a
crash between publication and commit, as it recognises any stable message id. The cost is one
more pass through the broker for every message (docs/guarantees.md: "Exactly-once on RabbitMQ").

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
from collections.abc import Sequence
from typing import Any

from mqbridge.backout_log import BackoutLog
from mqbridge.config import StompSourceConfig
from mqbridge.errors import BackoutFailedError, SourceConnectionError
from mqbridge.listeners.stomp.commit import CommitPlan, Transaction
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.frames import install_fast_header_parsing
from mqbridge.listeners.stomp.mapping import REQUEUE_ID, to_message
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.reply_to import ReplyAllowList
from mqbridge.source import BackoutMove, Confirmations, Landed, SourceContext
from mqbridge.stations import Stations

install_fast_header_parsing()  # every frame this process reads: same result, less CPU

log = logging.getLogger("mqbridge.listeners.stomp")  # the adapter's logger: one name for its lines

#: With stamping, how long a unit of unstamped messages waits for more before they are stamped.
STAMP_GRACE = 0.05


class StompSource:
    """One STOMP connection and subscription to one queue (see the module docstring)."""

    supports_partial_commit = True
    applies_backout_threshold = False  # the broker counts nothing over STOMP: the listener loop does

    @classmethod
    def from_context(cls, context: SourceContext) -> StompSource:
        """The adapter registry's constructor (`mqbridge.source.SOURCE_KINDS`)."""
        source, listener = context.source, context.listener
        assert isinstance(source, StompSourceConfig)
        return cls(context.source_name, source, listener.source_destination,
                   prefetch=listener.prefetch or listener.batch, subscription=listener.subscription,
                   tracker=context.shared.tracker, client_name=context.client_name,
                   backout_queue=listener.backout_queue, stamp=listener.identity == "stamp",
                   confirm=listener.confirm == "reply-to", unconfirmable=context.shared.unconfirmable,
                   reply_allow=context.reply_allow(), backout_log=context.shared.backout_log,
                   stations=context.shared.stations, selector=listener.selector)

    def __init__(self, name: str, config: StompSourceConfig, destination: str, *, prefetch: int,
                 tracker: DeliveryTracker, client_name: str = "mqbridge", backout_queue: str | None = None,
                 confirm: bool = False, unconfirmable: InDoubtLog | None = None, stamp: bool = False,
                 reply_allow: ReplyAllowList | None = None, backout_log: BackoutLog | None = None,
                 stations: Stations | None = None, selector: str | None = None,
                 subscription: str | None = None) -> None:
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
        # `confirm = "reply-to"`: a result for each message with a reply-to, in the commit's transaction.
        self.confirm = confirm
        self.unconfirmable = unconfirmable if unconfirmable is not None else InDoubtLog()
        # Where those results may go (`reply_to_allow`; default: any destination of this broker).
        self.reply_allow = reply_allow if reply_allow is not None else ReplyAllowList(None, listener=name)
        self.stations = stations  # `[types.X] results_to`: each final result is also sent there (mqbridge.stations)
        # `identity = "stamp"` (see "Stamping" in the module docstring): only stamped copies are handed on.
        self.stamp = stamp
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError,)
        self._connection = Connection(name, config, destination, prefetch=self.prefetch,
                                      client_name=client_name, selector=selector, durable=subscription)
        self._unit = Unit()
        self.cumulative = config.ack_mode == "cumulative"
        self.receipted = config.commit_mode == "receipted"

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

    @property
    def unit_full(self) -> bool:
        """The broker sends no more messages until this unit ends: as many are unacknowledged as
        the prefetch allows (with stamping, some of them are never handed to the listener)."""
        return len(self._unit.messages) >= self.prefetch

    # -- unit of work ------------------------------------------------------------------------
    def receive(self, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        frames = self._connection.frames
        while True:
            if self._connection.lost:
                raise SourceConnectionError(f"STOMP connection for {self.destination} is lost")
            if self._unit.handed and self.unit_full:
                return None  # nothing more comes before this unit ends
            wait = max(0.0, deadline - time.monotonic())
            stamping_only = bool(self._unit.stamping) and self._unit.handed == 0
            try:
                frame = frames.frames.get(timeout=min(wait, STAMP_GRACE) if stamping_only else wait)
            except queue.Empty:
                if stamping_only:
                    self.commit()  # a unit of unstamped messages only: stamp what came; the copies follow
                    if time.monotonic() < deadline:
                        continue
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
            elif self.stamp and REQUEUE_ID not in frame.headers:
                self._unit.stamping.append(message)
                if self._unit.handed == 0 and self.unit_full:
                    self.commit()  # else when no frame came for STAMP_GRACE, or with the unit's commit
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
        """The message of a MESSAGE frame, and why it must be refused (None: it is fine)."""
        message, problem = to_message(frame, source=self.name, destination=self.destination, tracker=self.tracker,
                                      max_message_size=self.config.max_message_size)
        if self.subscription is not None:
            # A copy (stamped, given back) came through the subscription's own queue: the topic is where it was read.
            message.destination = self.destination
            message.subscription = self.subscription
        return message, problem

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations | None:
        """Remove the unit's messages, moving `moves` (and those refused at the edge) to their
        backout queues and giving `returns` back, as `commit_mode` says (the `commit` module);
        with `confirm`, a result to the reply-to of each message landed or moved, in the same
        transaction.

        Raises SourceConnectionError (nothing removed: the unit comes back), BackoutFailedError
        (the broker refused a move: the listener halts), InDoubtError (COMMIT sent, no receipt)."""
        unit = self._end_unit()
        if not unit.messages:
            return None
        plan = CommitPlan.of(unit, moves, returns)
        # Everything goes back: nothing to remove. With stamping the ids are stable but the broker
        # keeps no count (RabbitMQ classic queues): the copies carry the count, across restarts.
        if not plan.acked and not (self.stamp and self.cumulative):
            self._connection.give_back(unit.messages, cumulative=self.cumulative)
            return None
        self._check(plan)
        tx = Transaction.begin(self._connection, transactional=not self.receipted,
                               unconfirmable=self.unconfirmable)
        tx.send_copies(plan, self.tracker, cumulative=self.cumulative)
        confirmed = Confirmations() if self.confirm or self.stations is not None else None
        if confirmed is not None and self.confirm:
            tx.send_results(plan, landed, confirmed, self.reply_allow)
        if confirmed is not None and self.stations is not None:
            tx.send_station_results(plan, landed, confirmed, self.stations)
        tx.send_derived(landed)  # the preprocessors' outbox: only for landed messages (`mqbridge.outbox`)
        # Cumulative: an ACK of the unit's last message acknowledges all of it.
        tx.finish(plan.acked if not self.cumulative else unit.messages[-1:], plan.acked)
        if unit.refused and self.backout_log is not None:  # the listener records the moves it asked for
            self.backout_log.record_moves(unit.refused, listener=f"{self.name}:{self.destination}",
                                          queue=self.destination, default_queue=self.backout_queue)
        if plan.returned and not self.cumulative:
            returned = [m for m in unit.messages if m.msg_id in plan.returned]
            self._connection.give_back(returned, cumulative=False)
        if unit.stamping:
            self.tracker.forget([m.msg_id for m in unit.stamping])  # per-delivery ids: never seen again
            log.debug("%s: stamped %d messages", self.destination, len(unit.stamping))
        return confirmed

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
            self._unit = Unit(plan.unit.messages, errors_at_start=plan.unit.errors_at_start)
            raise BackoutFailedError(f"no backout queue configured for {self.destination}; cannot move "
                                     f"message {unmovable.message.msg_id} ({unmovable.reason})")

    def rollback(self) -> None:
        unit = self._end_unit()
        if unit.messages:
            self._connection.give_back(unit.messages, cumulative=self.cumulative)
