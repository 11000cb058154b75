"""The commit of a STOMP unit of work: what it removes, moves and gives back (`CommitPlan`, decided
before any frame is sent), then the frames that do it (`Transaction`).

Two commit modes (`commit_mode`); in both, every SEND (a backout move, a copy given back or
stamped, a result) asks for a receipt, and an ERROR frame during the unit fails it: the connection
is closed, so the broker gives the whole unit back (a move the broker refuses raises
BackoutFailedError: the listener halts rather than loop or drop the message).

* ``transactional`` (default on ActiveMQ and RabbitMQ): BEGIN; the SENDs, confirmed by their
  receipts; the ACKs; COMMIT with a receipt. RabbitMQ answers a transaction's frames only at COMMIT
  (measured, 3.10), so there the SENDs' receipts are awaited together with the COMMIT's.
* ``receipted`` (default for Artemis, whose ACK frames are never part of a transaction): the SENDs
  outside any transaction, each confirmed by its receipt, then the ACKs, the last one with a
  receipt. A crash between the two leaves a moved or given-back message on both queues: it is
  duplicated at worst, never lost (with the landing ledger on, a copy given back carries its
  original identity and is recognised as landed).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from mqbridge import failpoints
from mqbridge.errors import BackoutFailedError, InDoubtError, SourceConnectionError
from mqbridge.listeners.stomp.connection import Connection
from mqbridge.listeners.stomp.mapping import backout_headers, requeue_headers, result_of
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.reply_to import ReplyAllowList
from mqbridge.source import BackoutMove, Confirmations, Landed
from mqbridge.stations import Stations


@dataclass(frozen=True)
class StationSend:
    """A result SENT to a type's `results_to` (`mqbridge.stations`)."""

    message: Message
    destination: str


#: What a SEND was about, by its receipt id: a move, the message a result is about, a station's
#: result, or None (a copy given back or stamped).
About = BackoutMove | Message | StationSend | None
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


class Transaction:
    """The frames of one commit on `connection`: BEGIN, the SENDs, the ACKs and COMMIT in
    `transactional` mode, the SENDs and ACKs alone in `receipted` mode (module docstring)."""

    def __init__(self, connection: Connection, tx: str | None, unconfirmable: InDoubtLog) -> None:
        self.connection = connection
        self.tx = tx
        self.unconfirmable = unconfirmable
        self.errors_before = len(connection.frames.errors)  # an ERROR after these fails the commit
        # RabbitMQ holds a transaction's frames until COMMIT and only then answers them (measured
        # on 3.10): there the SENDs' receipts are awaited with the COMMIT's, and a SEND it refuses
        # ends the connection before the ACKs that follow it are applied.
        self.deferred = tx is not None and connection.config.broker == "rabbitmq"
        self.sends: dict[str, About] = {}

    @classmethod
    def begin(cls, connection: Connection, *, transactional: bool, unconfirmable: InDoubtLog) -> Transaction:
        """A commit on `connection`; in `transactional` mode its STOMP transaction has begun.
        `unconfirmable` remembers results the broker refused."""
        tx = f"tx-{uuid.uuid4().hex}" if transactional else None
        transaction = cls(connection, tx, unconfirmable)
        if tx is not None:
            connection.guard(lambda: connection.conn.begin(transaction=tx), "begin")
        return transaction

    def send_copies(self, plan: CommitPlan, tracker: DeliveryTracker, *, cumulative: bool) -> None:
        """SEND the stamped copies, the copies given back (cumulative: the unit is acknowledged
        whole) and the moves, each made from the original as received, not from what the
        preprocessors made of it."""
        stamped = {id(m) for m in plan.unit.stamping}
        for message in plan.unit.messages:
            if id(message) in stamped:
                self._send_back(message, requeue_headers(message, tracker, stamp=uuid.uuid4().hex))
            elif message.msg_id in plan.returned:
                if cumulative:
                    self._send_back(message, requeue_headers(message, tracker))
                continue
            move = plan.moving.get(message.msg_id)
            if move is not None:
                self._send_move(message, move)

    def send_results(self, plan: CommitPlan, landed: Sequence[Landed], confirmed: Confirmations,
                     allow: ReplyAllowList) -> None:
        """SEND a result to the `reply-to` of each message of the unit that has one and is landed
        or moved (a message given back or consumed by a preprocessor gets none yet), if `allow`
        allows that destination (else it is counted, and the message committed as if it had asked
        for none). What a result holds: `mapping.result_of`."""
        frames = self.connection.frames
        where = {item.message.msg_id: item for item in landed}
        for message in plan.unit.messages:
            reply_to = message.headers.get("reply-to")
            move, done = plan.moving.get(message.msg_id), where.get(message.msg_id)
            if not reply_to or (move is None and done is None):
                continue
            if message.msg_id in self.unconfirmable:
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

    def send_derived(self, landed: Sequence[Landed]) -> int:
        """SEND what the preprocessors emitted for each landed message (`mqbridge.outbox`), persistent
        unless its headers say otherwise; the number sent. A SEND the broker refuses fails the commit
        like a move's (the unit comes back: the derived messages are neither lost nor sent twice)."""
        sent = 0
        for item in landed:
            for derived in item.derived:
                headers = {"persistent": "true", **derived.headers}
                self._send(derived.destination, derived.body, headers, "send a derived message", None)
                sent += 1
        return sent

    def finish(self, acks: Sequence[Message], acked: Sequence[Message]) -> None:
        """Await the SENDs' receipts, ACK `acks` (cumulative: the unit's last message
        acknowledges all of `acked`), COMMIT. Raises SourceConnectionError (nothing removed: the
        unit comes back), BackoutFailedError (a move refused), InDoubtError (no answer to COMMIT)."""
        sends = self.sends
        if sends and not self.deferred:
            self._confirm(sends)
        if sends:
            failpoints.hit("after_backout_send")
        self._ack(acks)
        failpoints.hit("after_source_ack")
        if self.tx is not None:
            self._commit(self.tx, sends if self.deferred else {}, [m.msg_id for m in acked])

    def send_station_results(self, plan: CommitPlan, landed: Sequence[Landed], confirmed: Confirmations,
                             stations: Stations) -> None:
        """SEND a result of each message of the unit that is landed or moved and whose type has a
        `results_to`, persistent, in the commit's transaction (`mqbridge.stations`); in `receipted`
        mode (no transaction: a crash could send it twice) it is counted as failed instead."""
        where = {item.message.msg_id: item for item in landed}
        for message in plan.unit.messages:
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
            if self.tx is None or not destination.startswith("/"):
                stations.unreachable(message_type, destination, "a STOMP source sends results only to a /... "
                                     'destination, with commit_mode = "transactional"')
                confirmed.failed += 1
                continue
            body, headers = result_of(message, move, done, {"message_type": message_type,
                                                            "source": self.connection.name})
            headers["persistent"] = "true"  # an auditor's record: ActiveMQ keeps a STOMP SEND only if asked
            self._send_station(destination, body, headers, StationSend(message, destination))
            confirmed.to_stations += 1

    def _send_station(self, destination: str, body: bytes, headers: dict[str, str], about: StationSend) -> None:
        errors_before = len(self.connection.frames.errors)
        try:
            self._send(destination, body, headers, "send a result to results_to", about)
        except SourceConnectionError:
            self._await_drop()  # an ERROR frame that says why (no permission) halts the listener
            if len(self.connection.frames.errors) > errors_before:
                self._send_refused(about, self.connection.frames.errors[errors_before][1])
            raise

    def _send(self, destination: str, body: bytes, headers: dict[str, str], what: str, about: About) -> None:
        self.sends[self.connection.send(destination, body, headers, self.tx, what)] = about

    def _send_back(self, message: Message, headers: dict[str, str]) -> None:
        self._send(self.connection.requeue_to, message.body, headers, "send back to the source queue", None)

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
        closed, so the broker gives the whole unit back."""
        frames = self.connection.frames
        problem = frames.await_receipts(sends, self.errors_before, self.connection.receipt_timeout)
        if not problem:
            return
        culprit = frames.refused(list(sends), self.errors_before)
        self._abort()
        self._send_refused(sends.get(culprit) if culprit else None, problem)
        self.connection.fail(f"{len(sends)} frames not confirmed: {problem}")

    def _commit(self, tx: str, sends: Sends, acked: list[str]) -> None:
        """COMMIT and wait for its receipt (and, on RabbitMQ, for the SENDs' receipts, which it
        gives only now). A move refused now failed before the ACKs after it (RabbitMQ applies a
        transaction's frames in order and stops at the first it refuses): BackoutFailedError.
        No answer at all: the outcome is unknown (InDoubtError)."""
        connection, frames = self.connection, self.connection.frames
        receipt = f"rc-{tx}"
        connection.guard(lambda: connection.conn.commit(transaction=tx, headers={"receipt": receipt}),
                         "commit")
        problem = frames.await_receipts([receipt, *sends], self.errors_before, connection.receipt_timeout)
        if not problem:
            return
        culprit = frames.refused(list(sends), self.errors_before)
        self._send_refused(sends.get(culprit) if culprit else None, problem)
        connection.fail(f"the commit of {len(acked)} messages on {connection.destination} is in doubt "
                        f"({problem}); they may be delivered again", InDoubtError, acked)

    def _abort(self) -> None:
        tx, connection = self.tx, self.connection
        if tx is None:
            return
        with contextlib.suppress(SourceConnectionError):  # a transaction dies with its connection
            connection.guard(lambda: connection.conn.abort(transaction=tx), "abort")

    def _send_refused(self, what: About, problem: str) -> None:
        """The broker refused the SEND of `what`: a move or a station's result halts the listener
        (BackoutFailedError: a result is never dropped); a producer's result is remembered as
        unconfirmable, so that the unit, given back now (SourceConnectionError), goes through without
        it next time."""
        if isinstance(what, BackoutMove):
            self._move_refused(what, problem)
        if isinstance(what, StationSend):
            self.connection.fail(f"the broker refused the result of message {what.message.msg_id} to results_to "
                                 f"{what.destination!r}: {problem}; the unit comes back, and the listener halts "
                                 "until that destination takes results", BackoutFailedError)
        if isinstance(what, Message):
            self.unconfirmable.record([what.msg_id])
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
