"""The commit of a STOMP unit of work: what it removes, moves and gives back (`CommitPlan`, decided
before any frame is sent), then the frames that do it (`Transaction`).

Two commit modes (`commit_mode`); in both, every SEND (a backout move, a copy given back, a result,
a derived message) asks for a receipt, and an ERROR frame during the unit fails it: the connection
is closed, so the broker gives back what was not acknowledged (a move the broker refuses raises
BackoutFailedError: the listener halts rather than loop or drop the message).

* ``transactional`` (default on ActiveMQ): BEGIN; the SENDs, confirmed by their receipts; the ACKs;
  COMMIT with a receipt: all or nothing. Refused on RabbitMQ, which does not apply a transaction
  atomically (`mqbridge.config.sources.RABBITMQ_NOT_TRANSACTIONAL`).
* ``receipted`` (default on RabbitMQ and Artemis): the SENDs outside any transaction, each confirmed
  by its receipt (RabbitMQ answers a SEND's receipt once the queue has the message, and none for a
  SEND the queue refuses), then the ACKs, the last one with a receipt. Nothing is acknowledged
  before every SEND about it is confirmed, so a refused SEND loses nothing; a crash between the two
  leaves a moved message on both queues and sends a result, a derived message or a copy given back
  twice: duplicated at worst, never lost. A copy given back carries its identity (the ledger
  recognises it); a moved message carries `mqbridge-original-message-id`, a result the message's id
  as its `correlation-id`: what a consumer de-duplicates by.

On RabbitMQ nothing is ever SENT to the source queue, and a unit is settled so that a SEND the broker
refuses brings back as little as it can:

* ``individual`` acks (its default): in two steps. The landed messages first (their results and
  derived messages confirmed, then their ACKs), then the moves (confirmed, then the moved messages'
  ACKs); the messages given back are NACKed (requeued at once). A move the backout queue refuses
  brings back the moved message alone, never a landed one to land again.
* ``cumulative`` acks (``ack: client``): there ACK and NACK act on every unacknowledged message up to
  the one named (measured on 3.10), so the unit is settled in runs, in the order received: an ACK of
  the last of each run of removed messages, a NACK of the last of each run given back.
* RabbitMQ refuses a SEND to a full queue (`max-length` with `overflow = reject-publish`) by closing
  the connection without an ERROR frame (measured on 3.10), which looks like an outage. A SEND about
  one message (its move, its result, what it derived) that ended so `DROPS_BEFORE_REFUSED` times is
  taken for refused, as if the broker had said so: the listener halts (a producer's result is given
  up instead, and counted). A message given back unlanded (NACK, or a failed commit's move) is
  recognised on its redelivery by its content (`DeliveryTracker.gave_back_unlanded`), so it keeps its
  msg_id and delivery count, and the SENDs about it are counted across its deliveries.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from mqbridge import failpoints
from mqbridge.errors import BackoutFailedError, InDoubtError, SourceConnectionError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.mapping import backout_headers, requeue_headers, result_of
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.outbound.reply_to import ReplyAllowList
from mqbridge.outbound.stations import Stations
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.source import BackoutMove, Confirmations, Landed

#: RabbitMQ: how many SENDs about one message may end with the connection closed without a reason
#: before the broker is taken to refuse it (a full queue with `overflow = reject-publish`).
DROPS_BEFORE_REFUSED = 3


@dataclass(frozen=True)
class StationSend:
    """A result SENT to a type's `results_to` (`mqbridge.outbound.stations`)."""

    message: Message
    destination: str


@dataclass(frozen=True)
class DerivedSend:
    """A message a preprocessor derived from `message` (`mqbridge.outbound.outbox`), SENT to `destination`."""

    message: Message
    destination: str


#: What a SEND was about, by its receipt id: a move, the message a result is about, a station's
#: result, a derived message, or None (a copy given back).
About = BackoutMove | Message | StationSend | DerivedSend | None
Sends = Mapping[str, About]


@dataclass(frozen=True)
class CommitPlan:
    """What the commit of `unit` does with each of its messages, as the listener decided."""

    unit: Unit
    returned: set[str]  # ids of the messages given back
    moving: dict[str, BackoutMove]  # id -> its move: the listener's, and those refused at the edge
    acked: list[Message]  # the messages the commit removes from the queue

    @classmethod
    def of(cls, unit: Unit, moves: Sequence[BackoutMove], returns: Sequence[Message]) -> CommitPlan:
        """The plan for `unit` when the listener moves `moves` and gives `returns` back; the
        messages refused at the edge are moved too."""
        returned = {m.msg_id for m in returns}
        return cls(unit, returned, {m.message.msg_id: m for m in (*moves, *unit.refused)},
                   [m for m in unit.messages if m.msg_id not in returned])

    def unmovable(self) -> BackoutMove | None:
        """A move that has no backout queue to go to."""
        return next((planned for planned in self.moving.values() if not planned.queue), None)

    @property
    def staying(self) -> list[Message]:
        """The removed messages that are not moved: landed, recognised as landed, or consumed."""
        return [m for m in self.acked if m.msg_id not in self.moving]

    @property
    def moved(self) -> list[Message]:
        """The removed messages that are moved to a backout queue."""
        return [m for m in self.acked if m.msg_id in self.moving]

    def runs(self) -> list[tuple[bool, Message]]:
        """The unit in runs, in the order received: (removed?, the run's last message) each."""
        runs: list[tuple[bool, Message]] = []
        for message in self.unit.messages:
            removed = message.msg_id not in self.returned
            if runs and runs[-1][0] == removed:
                runs[-1] = (removed, message)
            else:
                runs.append((removed, message))
        return runs


class Transaction:
    """The frames of one commit on `connection`: BEGIN, the SENDs, the ACKs and COMMIT in
    `transactional` mode, the SENDs and ACKs alone in `receipted` mode (module docstring).
    `content_key` gives a unit message's content key on RabbitMQ (None elsewhere): a SEND about it
    that ends with a dropped connection is counted in `tracker` (`DROPS_BEFORE_REFUSED`)."""

    def __init__(self, connection: Connection, tx: str | None, unconfirmable: InDoubtLog, tracker: DeliveryTracker,
                 content_key: Callable[[Message], str] | None = None) -> None:
        self.connection = connection
        self.tx = tx
        self.unconfirmable = unconfirmable
        self.tracker = tracker
        self.content_key = content_key
        self.errors_before = len(connection.frames.errors)  # an ERROR after these fails the commit
        self.sends: dict[str, About] = {}

    @classmethod
    def begin(cls, connection: Connection, *, transactional: bool, unconfirmable: InDoubtLog,
              tracker: DeliveryTracker, content_key: Callable[[Message], str] | None = None) -> Transaction:
        """A commit on `connection`; in `transactional` mode its STOMP transaction has begun.
        `unconfirmable` remembers results the broker refused."""
        tx = f"tx-{uuid.uuid4().hex}" if transactional else None
        transaction = cls(connection, tx, unconfirmable, tracker, content_key)
        if tx is not None:
            connection.guard(lambda: connection.conn.begin(transaction=tx), "begin")
        return transaction

    def send_copies(self, plan: CommitPlan, tracker: DeliveryTracker) -> None:
        """SEND a copy of each message given back, to the source queue (cumulative acks on ActiveMQ
        and Artemis: the ACK of the unit's last message removes the whole unit), made from the
        original as received, not from what the preprocessors made of it."""
        for message in plan.unit.messages:
            if message.msg_id in plan.returned:
                self._send(self.connection.requeue_to, message.body, requeue_headers(message, tracker),
                           "send back to the source queue", None)

    def send_moves(self, plan: CommitPlan, messages: Sequence[Message]) -> None:
        """SEND the moves of `messages` (those moved), each made from the original as received."""
        for message in messages:
            move = plan.moving.get(message.msg_id)
            if move is not None:
                self._send_move(message, move)

    def send_results(self, plan: CommitPlan, landed: Sequence[Landed], confirmed: Confirmations,
                     allow: ReplyAllowList, messages: Sequence[Message]) -> None:
        """SEND a result to the `reply-to` of each of `messages` that has one and is landed or moved
        (a message given back or consumed by a preprocessor gets none yet), if `allow` allows that
        destination (else it is counted, and the message committed as if it had asked for none).
        What a result holds: `mapping.result_of`."""
        frames = self.connection.frames
        where = {item.message.msg_id: item for item in landed}
        for message in messages:
            reply_to = message.headers.get("reply-to")
            move, done = plan.moving.get(message.msg_id), where.get(message.msg_id)
            if not reply_to or (move is None and done is None):
                continue
            if self._unconfirmable(message):
                confirmed.failed += 1
                continue
            if not allow.allows(reply_to):
                confirmed.not_allowed += 1
                allow.refused(reply_to, f"results of {self.connection.destination}")
                continue
            body, headers = result_of(message, move, done)
            errors_before = len(frames.errors)
            try:
                self._send(reply_to, body, headers, "send a result", message)
            except SourceConnectionError:
                self._await_drop()
                if len(frames.errors) > errors_before:
                    self._send_refused(message, frames.errors[errors_before][1])
                raise
            confirmed.sent += 1

    def send_station_results(self, plan: CommitPlan, landed: Sequence[Landed], confirmed: Confirmations,
                             stations: Stations, messages: Sequence[Message]) -> None:
        """SEND a result of each of `messages` that is landed or moved and whose type has a
        `results_to`, persistent (`mqbridge.outbound.stations`): in the commit's transaction, or on RabbitMQ
        confirmed before the ACK (sent twice if the bridge dies in between); with `receipted` on
        another broker (which could commit them atomically) it is counted as failed instead."""
        where = {item.message.msg_id: item for item in landed}
        for message in messages:
            move, done = plan.moving.get(message.msg_id), where.get(message.msg_id)
            if move is not None:
                route = stations.route(move.message)
            elif done is not None:
                route = stations.route(done.message, done.bulk_id)
            else:
                continue  # given back, or consumed by a preprocessor: no final result yet
            if route is None:
                continue
            message_type, destination = route
            rabbitmq = self.connection.config.broker == "rabbitmq"
            if (self.tx is None and not rabbitmq) or not destination.startswith("/"):
                stations.unreachable(message_type, destination, "a STOMP source sends results only to a /... "
                                     'destination, with commit_mode = "transactional" (RabbitMQ: "receipted")')
                confirmed.failed += 1
                continue
            body, headers = result_of(message, move, done, {"message_type": message_type,
                                                            "source": self.connection.name})
            headers["persistent"] = "true"  # an auditor's record: ActiveMQ keeps a STOMP SEND only if asked
            self._send_refusable(destination, body, headers, "send a result to results_to",
                                 StationSend(message, destination))
            confirmed.to_stations += 1

    def send_derived(self, landed: Sequence[Landed]) -> int:
        """SEND what the preprocessors emitted for each landed message (`mqbridge.outbound.outbox`), persistent
        unless its headers say otherwise; the number sent. A SEND the broker refuses halts the listener
        (BackoutFailedError; the unit comes back) rather than drop or loop."""
        sent = 0
        for item in landed:
            for derived in item.derived:
                headers = {"persistent": "true", **derived.headers}
                self._send_refusable(derived.destination, derived.body, headers, "send a derived message",
                                     DerivedSend(item.message, derived.destination))
                sent += 1
        return sent

    def finish(self, acks: Sequence[Message], acked: Sequence[Message]) -> None:
        """Await the SENDs' receipts, ACK `acks` (cumulative: the unit's last message
        acknowledges all of `acked`), COMMIT. Raises SourceConnectionError (nothing removed: the
        unit comes back), BackoutFailedError (a move refused), InDoubtError (no answer to COMMIT)."""
        self._confirm_sends()
        self._ack(acks)
        failpoints.hit("after_source_ack")
        if self.tx is not None:
            self._commit(self.tx, [m.msg_id for m in acked])
        self.sends = {}

    def finish_in_runs(self, plan: CommitPlan) -> None:
        """RabbitMQ with cumulative acks: await the SENDs' receipts, then ACK the last message of each
        run of removed messages and NACK the last of each run given back (module docstring), the last
        frame with a receipt."""
        self._confirm_sends()
        runs = plan.runs()
        receipt = f"settle-{uuid.uuid4().hex}"
        for index, (removed, last) in enumerate(runs):
            ask = receipt if index == len(runs) - 1 else None
            if removed:
                self.connection.ack([last.token], None, ask)
            else:
                self.connection.nack(last.token, ask)
        self._confirm({receipt: None})
        failpoints.hit("after_source_ack")
        self.sends = {}

    def _confirm_sends(self) -> None:
        if self.sends:
            self._confirm(self.sends)
            failpoints.hit("after_backout_send")

    def _unconfirmable(self, message: Message) -> bool:
        """Whether the result of `message` was refused before (by its id; on RabbitMQ, whose ids are
        per delivery, by its content too)."""
        return message.msg_id in self.unconfirmable or (
            self.content_key is not None and self.content_key(message) in self.unconfirmable)

    def _send(self, destination: str, body: bytes, headers: dict[str, str], what: str, about: About) -> None:
        self.sends[self.connection.send(destination, body, headers, self.tx, what)] = about

    def _send_refusable(self, destination: str, body: bytes, headers: dict[str, str], what: str,
                        about: StationSend | DerivedSend) -> None:
        """SEND what the listener halts on if the broker refuses it (a station's result, a derived message)."""
        errors_before = len(self.connection.frames.errors)
        try:
            self._send(destination, body, headers, what, about)
        except SourceConnectionError:
            self._await_drop()  # an ERROR frame that says why (no permission) halts the listener
            if len(self.connection.frames.errors) > errors_before:
                self._send_refused(about, self.connection.frames.errors[errors_before][1])
            raise

    def _send_move(self, message: Message, move: BackoutMove) -> None:
        queue_name = move.queue
        assert queue_name, "checked by commit"
        try:
            self._send(queue_name, message.body, backout_headers(message, move), "send to backout queue", move)
        except SourceConnectionError:
            self._refused_while_sending(move)
            raise

    def _ack(self, messages: Sequence[Message]) -> None:
        """ACK `messages`. Outside a transaction (receipted) the last ACK asks for a receipt: a
        broker answers one connection's frames in order, so it confirms every ACK before it."""
        receipt = None if self.tx is not None or not messages else f"ack-{uuid.uuid4().hex}"
        self.connection.ack([m.token for m in messages], self.tx, receipt)
        if receipt is not None:
            self._confirm({receipt: None})

    def _confirm(self, sends: Sends) -> None:
        """Wait for the receipts of `sends`. A refused move raises BackoutFailedError, anything
        else SourceConnectionError; the transaction (if any) is aborted first and the connection
        closed, so the broker gives back what was not acknowledged."""
        frames = self.connection.frames
        problem = frames.await_receipts(sends, self.errors_before, self.connection.receipt_timeout)
        if not problem:
            return
        culprit = frames.refused(list(sends), self.errors_before)
        self._abort()
        if culprit is None and frames.disconnected.is_set() and len(frames.errors) == self.errors_before:
            self._dropped_on(sends)
        self._send_refused(sends.get(culprit) if culprit else None, problem)
        self.connection.fail(f"{len(sends)} frames not confirmed: {problem}")

    def _dropped_on(self, sends: Sends) -> None:
        """The broker closed the connection without a reason while SENDs were unconfirmed. On
        RabbitMQ that is how a queue refuses a message (module docstring): count it against the
        first unconfirmed SEND's message, and take the SEND for refused after DROPS_BEFORE_REFUSED."""
        if self.content_key is None:
            return
        frames = self.connection.frames  # settled: each receipt that came is answered at once
        first = next((rid for rid in sends if frames.await_receipts([rid], self.errors_before, 0)), None)
        about = sends.get(first) if first is not None else None
        message = _message_of(about)
        if message is None:
            return
        drops = self.tracker.send_dropped(self.content_key(message))
        if drops >= DROPS_BEFORE_REFUSED:
            self._send_refused(about, f"the broker closed the connection on this SEND {drops} times without a "
                               "reason (RabbitMQ does so when the queue refuses the message: max-length with "
                               "overflow = reject-publish)")

    def _commit(self, tx: str, acked: list[str]) -> None:
        """COMMIT and wait for its receipt. No answer at all: the outcome is unknown (InDoubtError)."""
        connection, frames = self.connection, self.connection.frames
        receipt = f"rc-{tx}"
        connection.guard(lambda: connection.conn.commit(transaction=tx, headers={"receipt": receipt}),
                         "commit")
        problem = frames.await_receipts([receipt], self.errors_before, connection.receipt_timeout)
        if not problem:
            return
        connection.fail(f"the commit of {len(acked)} messages on {connection.destination} is in doubt "
                        f"({problem}); they may be delivered again", InDoubtError, acked)

    def _abort(self) -> None:
        tx, connection = self.tx, self.connection
        if tx is None:
            return
        with contextlib.suppress(SourceConnectionError):  # a transaction dies with its connection
            connection.guard(lambda: connection.conn.abort(transaction=tx), "abort")

    def _send_refused(self, what: About, problem: str) -> None:
        """The broker refused the SEND of `what`: a move, a station's result or a derived message halts
        the listener (BackoutFailedError: none is ever dropped); a producer's result is remembered as
        unconfirmable, so that the unit, given back now (SourceConnectionError), goes through without
        it next time."""
        if isinstance(what, BackoutMove):
            self._move_refused(what, problem)
        if isinstance(what, StationSend):
            self.connection.fail(f"the broker refused the result of message {what.message.msg_id} to results_to "
                                 f"{what.destination!r}: {problem}; the unit comes back, and the listener halts "
                                 "until that destination takes results", BackoutFailedError)
        if isinstance(what, DerivedSend):
            self.connection.fail(f"the broker refused the message derived from message {what.message.msg_id} to "
                                 f"{what.destination!r}: {problem}; the unit comes back, and the listener halts "
                                 "until that destination takes it", BackoutFailedError)
        if isinstance(what, Message):
            self.unconfirmable.record([what.msg_id] if self.content_key is None
                                      else [what.msg_id, self.content_key(what)])
            self.connection.fail(f"the broker refused the result of message {what.msg_id} to its reply-to "
                                 f"{what.headers.get('reply-to')!r}: {problem}; the unit comes back and is "
                                 "committed without that result")

    def _refused_while_sending(self, move: BackoutMove) -> None:
        """A SEND of a move broke the connection. If the broker said why first (ActiveMQ answers a
        frame over its size limits with ERROR "The maximum data length was exceeded" and closes,
        measured on 5.17), the move is refused: BackoutFailedError. Else it is an outage."""
        frames = self.connection.frames
        self._await_drop()
        if len(frames.errors) > self.errors_before:
            error = frames.errors[self.errors_before][1]
            self._move_refused(move, f"the broker answered with ERROR: {error}")

    def _await_drop(self) -> None:
        """A SEND failed: wait, briefly, for the connection to drop, so that an ERROR frame that
        says why has arrived."""
        frames = self.connection.frames
        frames.wait_for(lambda: frames.disconnected.is_set(),
                        time.monotonic() + min(self.connection.receipt_timeout, 5.0))

    def _move_refused(self, move: BackoutMove, problem: str) -> NoReturn:
        self.connection.fail(f"the broker refused to move message {move.message.msg_id} "
                             f"({len(move.message.body)} bytes) to {move.queue}: {problem}",
                             BackoutFailedError)


def _message_of(about: About) -> Message | None:
    """The unit's message a SEND was about (None: a copy given back)."""
    if isinstance(about, BackoutMove):
        return about.message
    if isinstance(about, StationSend | DerivedSend):
        return about.message
    return about
