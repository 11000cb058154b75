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

Two commit modes (`commit_mode`); in both, every SEND (a backout move, a copy given back) asks for
a receipt, and an ERROR frame during the unit fails it: the connection is closed, so the broker
gives the whole unit back (a move the broker refuses raises BackoutFailedError: the listener halts
rather than loop or drop the message).

* ``transactional`` (default on ActiveMQ and RabbitMQ): BEGIN; the SENDs, confirmed by their
  receipts; the ACKs; COMMIT with a receipt. RabbitMQ answers a transaction's frames only at COMMIT
  (measured, 3.10), so there the SENDs' receipts are awaited together with the COMMIT's.
* ``receipted`` (default for Artemis, whose ACK frames are never part of a transaction): the SENDs
  outside any transaction, each confirmed by its receipt, then the ACKs, the last one with a
  receipt. A crash between the two leaves a moved or given-back message on both queues: it is
  duplicated at worst, never lost (with the landing ledger on, a copy given back carries its
  original identity and is recognised as landed).

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
more pass through the broker for every message (README: "Exactly-once on RabbitMQ").

Messages refused at the edge (a numeric header that does not parse, a `timestamp` past year 9999,
a body over `max_message_size`) are not handed to the listener loop: they go to the listener's
backout queue with the reason, with the unit they arrived in.

Waits are bounded: the whole connect (TCP, TLS, CONNECTED, the subscription's receipt) by
`connect_timeout`, each receipt by `receipt_timeout`; a lost connection ends a wait at once. A
broker that answers CONNECT or SUBSCRIBE with ERROR (bad credentials, unknown virtual host, no
permission) raises SourceRefusedError, which halts the listener instead of reconnecting forever.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from mqbridge import failpoints
from mqbridge.config import StompSourceConfig
from mqbridge.errors import (
    BackoutFailedError,
    InDoubtError,
    SourceConnectionError,
    SourceError,
    SourceRefusedError,
)
from mqbridge.listeners.stomp.frames import Frames, drop, install_fast_header_parsing
from mqbridge.listeners.stomp.mapping import (
    REQUEUE_ID,
    backout_headers,
    requeue_headers,
    result_of,
    to_message,
)
from mqbridge.message import Message
from mqbridge.source import BackoutMove, Confirmations, DeliveryTracker, InDoubtLog, Landed, SourceContext

install_fast_header_parsing()  # every frame this process reads: same result, less CPU

log = logging.getLogger("mqbridge.listeners.stomp")  # the adapter's logger: one name for its lines

#: With stamping, how long a unit of unstamped messages waits for more before they are stamped.
STAMP_GRACE = 0.05
_ACK_HEADER = {"cumulative": "client", "individual": "client-individual"}


class StompSource:
    """One STOMP connection and subscription to one queue (see the module docstring)."""

    supports_partial_commit = True
    applies_backout_threshold = False  # the broker counts nothing over STOMP: the listener loop does

    @classmethod
    def from_context(cls, context: SourceContext) -> StompSource:
        """The adapter registry's constructor (`mqbridge.source.SOURCE_KINDS`)."""
        source, listener = context.source, context.listener
        assert isinstance(source, StompSourceConfig)
        return cls(context.source_name, source, listener.queue, prefetch=listener.prefetch or listener.batch,
                   tracker=context.shared.tracker, client_name=context.client_name,
                   backout_queue=listener.backout_queue, stamp=listener.identity == "stamp",
                   confirm=listener.confirm == "reply-to", unconfirmable=context.shared.unconfirmable)

    def __init__(self, name: str, config: StompSourceConfig, destination: str, *, prefetch: int,
                 tracker: DeliveryTracker, client_name: str = "mqbridge", backout_queue: str | None = None,
                 confirm: bool = False, unconfirmable: InDoubtLog | None = None, stamp: bool = False) -> None:
        import stomp.exception

        import stomp  # optional driver, imported where used

        self.name = name
        self.destination = destination
        self.config = config
        self.prefetch = max(1, prefetch)
        self.tracker = tracker
        self.client_name = client_name
        self.backout_queue = backout_queue  # where messages refused at the edge go (bad header, too big)
        # `confirm = "reply-to"`: a result for each message with a reply-to, in the commit's transaction.
        self.confirm = confirm
        self.unconfirmable = unconfirmable if unconfirmable is not None else InDoubtLog()
        # `identity = "stamp"` (see "Stamping" in the module docstring): only stamped copies are handed on.
        self.stamp = stamp
        self._stamping: list[Message] = []  # unstamped messages of the unit: their stamped copies are sent
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError,)
        self._stomp = stomp
        self._driver_errors = (stomp.exception.StompException, OSError, socket.error)
        self._conn: Any = None
        self._frames = Frames()
        self._subscription = ""
        self._unit: list[Message] = []
        self._handed = 0  # messages of the unit that `receive` returned (the others are refused)
        self._refused: list[BackoutMove] = []  # refused at the edge, moved by the unit's commit
        self._unit_errors = 0  # ERROR frames seen when the unit began: a later one fails the unit
        self.cumulative = config.ack_mode == "cumulative"
        self.receipted = config.commit_mode == "receipted"
        self.receipt_timeout = config.receipt_timeout

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect and subscribe, all within `connect_timeout`. A broker that answers CONNECT or
        SUBSCRIBE with ERROR (bad credentials, unknown virtual host, no permission) raises
        SourceRefusedError (the listener halts); anything else raises SourceConnectionError."""
        cfg = self.config
        deadline = time.monotonic() + cfg.connect_timeout
        heartbeat_ms = int(cfg.heartbeat * 1000)
        conn = self._stomp.Connection12(
            [(cfg.host, cfg.port)],
            heartbeats=(heartbeat_ms, heartbeat_ms),
            auto_decode=False,  # bodies are bytes, byte-exact
            reconnect_attempts_max=1,  # the control thread owns reconnecting, with backoff
            timeout=cfg.connect_timeout,  # bounds the TCP connect and the TLS handshake
            vhost=cfg.vhost or cfg.host,
            keepalive=True,
        )
        if cfg.ssl:
            conn.set_ssl(for_hosts=[(cfg.host, cfg.port)], key_file=_str(cfg.key_file),
                         cert_file=_str(cfg.cert_file), ca_certs=_str(cfg.ca_certs))
        frames = self._frames = Frames()
        conn.set_listener("mqbridge", frames)
        password = cfg.password.get_secret_value() if cfg.password is not None else None
        where = f"STOMP broker {cfg.host}:{cfg.port} (source {self.name!r})"
        try:
            # stomp.py's own wait for CONNECTED has no end (it waits in slices of timeout/10, forever):
            # send CONNECT without waiting and wait here, up to the deadline.
            conn.connect(username=cfg.user, passcode=password, wait=False,
                         headers={"client-id": f"{self.client_name}-{uuid.uuid4().hex[:8]}"})
        except self._driver_errors as exc:
            drop(conn)
            # stomp.py's ConnectFailedException says nothing; its log line has the socket's error.
            why = (f"{type(exc).__name__}: {exc}" if str(exc) else
                   f"no TCP connection within {cfg.connect_timeout:g}s (refused or unreachable)")
            raise SourceConnectionError(f"cannot connect to {where}: {why}") from exc
        answered = frames.wait_for(lambda: frames.connected or bool(frames.errors) or frames.disconnected.is_set(),
                                   deadline)
        if frames.errors:
            drop(conn)
            raise SourceRefusedError(f"{where} refused CONNECT: {frames.errors[0][1]}")
        if not answered or not frames.connected:
            drop(conn)
            why = (f"no answer to CONNECT within {cfg.connect_timeout:g}s (connect_timeout)" if not answered
                   else "the broker closed the connection during CONNECT")
            raise SourceConnectionError(f"cannot connect to {where}: {why}")
        self._conn = conn
        self._subscribe(deadline)
        log.info("connected to %s:%s, consuming %s (prefetch %d, %s commits)", cfg.host, cfg.port,
                 self.destination, self.prefetch, cfg.commit_mode)

    def _subscribe(self, deadline: float | None = None) -> None:
        """Subscribe, confirmed by a receipt (an ERROR instead is a refusal: no permission)."""
        self._subscription = f"sub-{uuid.uuid4().hex[:12]}"
        headers = {"activemq.prefetchSize": str(self.prefetch)}
        if self.config.broker == "rabbitmq":
            headers = {"prefetch-count": str(self.prefetch)}
        elif self.config.broker == "artemis":
            headers = {"consumer-window-size": "-1"}
        receipt = f"sub-{self._subscription}"
        headers["receipt"] = receipt
        errors_before = len(self._frames.errors)
        self._guard(lambda: self._conn.subscribe(self.destination, id=self._subscription,
                                                 ack=_ACK_HEADER[self.config.ack_mode],
                                                 headers=headers),
                    "subscribe")
        timeout = self.receipt_timeout if deadline is None else max(0.1, deadline - time.monotonic())
        problem = self._frames.await_receipts([receipt], errors_before, timeout)
        if len(self._frames.errors) > errors_before:
            raise SourceRefusedError(f"STOMP broker {self.config.host}:{self.config.port} (source {self.name!r}) "
                                     f"refused the subscription to {self.destination}: "
                                     f"{self._frames.errors[errors_before][1]}")
        if problem:
            raise SourceConnectionError(f"subscribing to {self.destination} failed: {problem}")

    def _resubscribe(self) -> None:
        """Replace the subscription so the broker redelivers every unacked message of it
        (ABORT and NACK cannot do this on ActiveMQ). Frames of the old subscription still in
        the local queue are dropped by `receive`."""
        old = self._subscription
        self._guard(lambda: self._conn.unsubscribe(id=old), "unsubscribe")
        self._subscribe()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._end_unit()  # unacked messages return to the queue when the connection closes
        if conn is not None:
            drop(conn, self._frames)

    def _guard(self, call: Any, what: str) -> Any:
        if self._conn is None or self._frames.disconnected.is_set():
            raise SourceConnectionError(f"STOMP connection for {self.destination} is lost ({what})")
        try:
            return call()
        except self._driver_errors as exc:
            raise SourceConnectionError(f"STOMP {what} on {self.destination} failed: {exc}") from exc

    def _end_unit(self) -> tuple[list[Message], list[BackoutMove], list[Message]]:
        unit, refused, stamping = self._unit, self._refused, self._stamping
        self._unit, self._refused, self._stamping, self._handed = [], [], [], 0
        return unit, refused, stamping

    @property
    def unit_full(self) -> bool:
        """The broker sends no more messages until this unit ends: as many are unacknowledged as
        the prefetch allows (with stamping, some of them are never handed to the listener)."""
        return len(self._unit) >= self.prefetch

    # -- unit of work ------------------------------------------------------------------------
    def receive(self, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        while True:
            if self._frames.disconnected.is_set() or self._conn is None:
                raise SourceConnectionError(f"STOMP connection for {self.destination} is lost")
            if self._handed and self.unit_full:
                return None  # nothing more comes before this unit ends
            wait = max(0.0, deadline - time.monotonic())
            stamping_only = bool(self._stamping) and self._handed == 0
            try:
                frame = self._frames.frames.get(timeout=min(wait, STAMP_GRACE) if stamping_only else wait)
            except queue.Empty:
                if stamping_only:
                    self.commit()  # a unit of unstamped messages only: stamp what came; the copies follow
                    if time.monotonic() < deadline:
                        continue
                return None
            if frame is None:
                continue
            if frame.headers.get("subscription") != self._subscription:
                continue  # prefetched by a replaced subscription: the broker redelivers it
            if not self._unit:
                self._unit_errors = len(self._frames.errors)
            message, problem = self._to_message(frame)
            self._unit.append(message)
            if problem is not None:
                self._refuse(message, problem)
            elif self.stamp and REQUEUE_ID not in frame.headers:
                self._stamping.append(message)
                if self._handed == 0 and self.unit_full:
                    self.commit()  # else when no frame came for STAMP_GRACE, or with the unit's commit
            else:
                self._handed += 1
                return message

    def _refuse(self, message: Message, problem: str) -> None:
        """A message refused at the edge (a header that does not parse, a body over
        max_message_size) never reaches the listener loop: it is moved to the backout queue with
        the reason, by the commit of the unit it arrived in, or at once if the listener holds
        nothing of the unit yet (then the unit is this message alone)."""
        log.warning("%s: message %s refused: %s; moving it to %s", self.destination, message.msg_id, problem,
                    self.backout_queue or "(no backout queue)")
        self._refused.append(BackoutMove(message, problem, self.backout_queue))
        if self._handed == 0:
            self.commit()

    def _to_message(self, frame: Any) -> tuple[Message, str | None]:
        """The message of a MESSAGE frame, and why it must be refused (None: it is fine)."""
        return to_message(frame, source=self.name, destination=self.destination, tracker=self.tracker,
                          max_message_size=self.config.max_message_size)

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations | None:
        """Remove the unit's messages, moving `moves` (and those refused at the edge) to their
        backout queues and giving `returns` back, as `commit_mode` says (module docstring); with
        `confirm`, a result to the reply-to of each message landed or moved, in the same transaction.

        Raises SourceConnectionError (nothing removed: the unit comes back), BackoutFailedError
        (the broker refused a move: the listener halts), InDoubtError (COMMIT sent, no receipt)."""
        unit, refused, stamping = self._end_unit()
        if not unit:
            return None
        returned = {m.msg_id for m in returns}
        moving = {m.message.msg_id: m for m in (*moves, *refused)}
        acked = [m for m in unit if m.msg_id not in returned]
        # Everything goes back: nothing to remove. With stamping the ids are stable but the broker
        # keeps no count (RabbitMQ classic queues): the copies carry the count, across restarts.
        if not acked and not (self.stamp and self.cumulative):
            self._unit = unit
            self.rollback()
            return None
        if len(self._frames.errors) > self._unit_errors:
            self._fail_unit("the broker sent ERROR during the unit of work: "
                            + "; ".join(e for _, e in self._frames.errors[self._unit_errors:]))
        for planned in moving.values():
            if not planned.queue:
                self._unit = unit  # given back when the listener closes the connection
                raise BackoutFailedError(f"no backout queue configured for {self.destination}; cannot move "
                                         f"message {planned.message.msg_id} ({planned.reason})")
        tx = None if self.receipted else f"tx-{uuid.uuid4().hex}"
        errors_before = len(self._frames.errors)
        if tx is not None:
            self._guard(lambda: self._conn.begin(transaction=tx), "begin")
        # The original as received, not what the preprocessors made of it.
        # receipt -> the move, the message a result is about, or None (a copy given back)
        sends: dict[str, BackoutMove | Message | None] = {}
        stamped = {id(m) for m in stamping}
        for message in unit:
            if id(message) in stamped:
                sends[self._send_requeue(message, tx, stamp=uuid.uuid4().hex)] = None
            elif message.msg_id in returned:
                if self.cumulative:
                    sends[self._send_requeue(message, tx)] = None
                continue
            move = moving.get(message.msg_id)
            if move is not None:
                try:
                    sends[self._send_backout(message, move, tx)] = move
                except SourceConnectionError:
                    self._refused_while_sending(move, errors_before)
                    raise
        confirmed = Confirmations() if self.confirm else None
        if confirmed is not None:
            sends.update(self._send_results(unit, moving, landed, tx, confirmed))
        # RabbitMQ holds a transaction's frames until COMMIT and only then answers them (measured
        # on 3.10): there the SENDs' receipts are awaited with the COMMIT's, and a SEND it refuses
        # ends the connection before the ACKs that follow it are applied.
        deferred = tx is not None and self.config.broker == "rabbitmq"
        if sends and not deferred:
            self._confirm(sends, errors_before, tx)
        if sends:
            failpoints.hit("after_backout_send")
        self._ack(acked if not self.cumulative else unit[-1:], tx, errors_before)
        failpoints.hit("after_source_ack")
        if tx is not None:
            self._commit_transaction(tx, sends if deferred else {}, errors_before,
                                     [m.msg_id for m in acked])
        if returned and not self.cumulative:
            self._give_back([m for m in unit if m.msg_id in returned])
        if stamping:
            self.tracker.forget([m.msg_id for m in stamping])  # per-delivery ids: never seen again
            log.debug("%s: stamped %d messages", self.destination, len(stamping))
        return confirmed

    def _ack(self, messages: Sequence[Message], tx: str | None, errors_before: int) -> None:
        """ACK `messages` (cumulative: the unit's last message acknowledges all of it). Outside a
        transaction (receipted) the last ACK asks for a receipt: a broker answers one connection's
        frames in order, so it confirms every ACK before it."""
        receipt = None if tx is not None else f"ack-{uuid.uuid4().hex}"
        for i, message in enumerate(messages, 1):
            rid = receipt if i == len(messages) else None
            self._guard(lambda m=message, r=rid: self._conn.ack(m.token, transaction=tx, receipt=r), "ack")
        if receipt is not None:
            self._confirm({receipt: None}, errors_before, tx)

    def _confirm(self, sends: Mapping[str, BackoutMove | Message | None], errors_before: int,
                 tx: str | None) -> None:
        """Wait for the receipts of `sends`. A refused move raises BackoutFailedError, anything
        else SourceConnectionError; the transaction (if any) is aborted first and the connection
        closed, so the broker gives the whole unit back."""
        problem = self._frames.await_receipts(sends, errors_before, self.receipt_timeout)
        if not problem:
            return
        culprit = self._frames.refused(list(sends), errors_before)
        self._abort(tx)
        self._send_refused(sends.get(culprit) if culprit else None, problem)
        self._fail_unit(f"{len(sends)} frames not confirmed: {problem}")

    def _send_refused(self, what: BackoutMove | Message | None, problem: str) -> None:
        """The broker refused the SEND of `what`: a move halts the listener (BackoutFailedError); a
        result is remembered as unconfirmable, so that the unit, given back now (SourceConnectionError),
        goes through without it next time."""
        if isinstance(what, BackoutMove):
            self._move_refused(what, problem)
        if isinstance(what, Message):
            self.unconfirmable.record([what.msg_id])
            self._fail_unit(f"the broker refused the result of message {what.msg_id} to its reply-to "
                            f"{what.headers.get('reply-to')!r}: {problem}; the unit comes back and is committed "
                            "without that result")

    def _send_results(self, unit: Sequence[Message], moving: Mapping[str, BackoutMove], landed: Sequence[Landed],
                      tx: str | None, confirmed: Confirmations) -> dict[str, Message]:
        """SEND, in `tx`, a result to the `reply-to` of each message of `unit` that has one and is
        landed or moved (a message given back or consumed by a preprocessor gets none yet); the
        receipts. What a result holds: `mapping.result_of`."""
        where = {item.message.msg_id: item for item in landed}
        receipts: dict[str, Message] = {}
        for message in unit:
            reply_to = message.headers.get("reply-to")
            move, done = moving.get(message.msg_id), where.get(message.msg_id)
            if not reply_to or (move is None and done is None):
                continue
            if message.msg_id in self.unconfirmable:
                confirmed.failed += 1
                continue
            body, headers = result_of(message, move, done)
            errors_before = len(self._frames.errors)
            try:
                receipts[self._send(reply_to, body, headers, tx, "send a result")] = message
            except SourceConnectionError:
                self._frames.wait_for(lambda: self._frames.disconnected.is_set(),
                                      time.monotonic() + min(self.receipt_timeout, 5.0))
                if len(self._frames.errors) > errors_before:
                    self._send_refused(message, self._frames.errors[errors_before][1])
                raise
            confirmed.sent += 1
        return receipts

    def _refused_while_sending(self, move: BackoutMove, errors_before: int) -> None:
        """A SEND of a move broke the connection. If the broker said why first (ActiveMQ answers a
        frame over its size limits with ERROR "The maximum data length was exceeded" and closes,
        measured on 5.17), the move is refused: BackoutFailedError. Else it is an outage."""
        frames = self._frames
        frames.wait_for(lambda: frames.disconnected.is_set(), time.monotonic() + min(self.receipt_timeout, 5.0))
        if len(frames.errors) > errors_before:
            self._move_refused(move, f"the broker answered with ERROR: {frames.errors[errors_before][1]}")

    def _move_refused(self, move: BackoutMove, problem: str) -> NoReturn:
        self._fail_unit(f"the broker refused to move message {move.message.msg_id} ({len(move.message.body)} bytes) "
                        f"to {move.queue}: {problem}", BackoutFailedError)

    def _commit_transaction(self, tx: str, sends: Mapping[str, BackoutMove | Message | None], errors_before: int,
                            acked: list[str]) -> None:
        """COMMIT and wait for its receipt (and, on RabbitMQ, for the SENDs' receipts, which it
        gives only now). A move refused now failed before the ACKs after it (RabbitMQ applies a
        transaction's frames in order and stops at the first it refuses): BackoutFailedError.
        No answer at all: the outcome is unknown (InDoubtError)."""
        receipt = f"rc-{tx}"
        self._guard(lambda: self._conn.commit(transaction=tx, headers={"receipt": receipt}), "commit")
        problem = self._frames.await_receipts([receipt, *sends], errors_before, self.receipt_timeout)
        if not problem:
            return
        culprit = self._frames.refused(list(sends), errors_before)
        self._send_refused(sends.get(culprit) if culprit else None, problem)
        self._fail_unit(f"the commit of {len(acked)} messages on {self.destination} is in doubt ({problem}); "
                        "they may be delivered again", InDoubtError, acked)

    def _abort(self, tx: str | None) -> None:
        if tx is None:
            return
        with contextlib.suppress(SourceConnectionError):  # a transaction dies with its connection
            self._guard(lambda: self._conn.abort(transaction=tx), "abort")

    def _fail_unit(self, reason: str, error: type[SourceError] = SourceConnectionError,
                   msg_ids: list[str] | None = None) -> NoReturn:
        """Close the connection (the broker gives back every unacknowledged message) and raise."""
        conn, self._conn = self._conn, None
        if conn is not None:
            drop(conn, self._frames)
        if error is InDoubtError:
            raise InDoubtError(reason, msg_ids or [])
        raise error(f"{self.destination}: {reason}")

    def _send_requeue(self, message: Message, tx: str | None, *, stamp: str | None = None) -> str:
        """Put `message` back on the source queue as a copy that keeps its identity, or, given a
        `stamp`, as its stamped copy with that id; the receipt id."""
        headers = requeue_headers(message, self.tracker, stamp=stamp)
        return self._send(self.destination, message.body, headers, tx, "send back to the source queue")

    def _send_backout(self, message: Message, move: BackoutMove, tx: str | None) -> str:
        queue_name = move.queue
        assert queue_name, "checked by commit"
        return self._send(queue_name, message.body, backout_headers(message, move), tx, "send to backout queue")

    def _send(self, destination: str, body: bytes, headers: dict[str, str], tx: str | None, what: str) -> str:
        receipt = f"send-{uuid.uuid4().hex}"
        headers["receipt"] = receipt
        if tx is not None:
            headers["transaction"] = tx
        self._guard(lambda: self._conn.send(destination, body, headers=headers), what)
        return receipt

    def rollback(self) -> None:
        unit, _refused, _stamping = self._end_unit()
        if unit:
            self._give_back(unit)

    def _give_back(self, messages: list[Message]) -> None:
        """Return unacknowledged messages to the queue. RabbitMQ (3.10 measured) keeps a removed
        subscription's unacked messages until the connection closes, but requeues at once on NACK
        (cumulative in `ack: client` mode, so one NACK of the last message returns a whole unit).
        ActiveMQ dead-letters on NACK and redelivers when the subscription is replaced."""
        if self.config.broker != "rabbitmq":
            self._resubscribe()
            return
        for message in messages[-1:] if self.cumulative else messages:
            self._guard(lambda m=message: self._conn.nack(m.token, headers={"requeue": "true"}), "nack")


def _str(value: object) -> str | None:
    return None if value is None else str(value)
