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
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from mqbridge.config import StompSourceConfig
from mqbridge.errors import InDoubtError, SourceConnectionError, SourceError
from mqbridge.message import Message, utcnow
from mqbridge.source import BackoutMove, DeliveryTracker, SourceContext

log = logging.getLogger(__name__)

# Headers that become columns of the landed row (or are per-delivery plumbing).
_COLUMN_HEADERS = {"message-id", "destination", "timestamp", "ack", "subscription", "content-length",
                   "redelivered", "correlation-id"}
# Frame plumbing of the SEND that RabbitMQ passes on to the MESSAGE (measured on 3.10: a copy given
# back in a transaction arrives with `transaction`, a producer's `receipt` arrives too): not message
# headers, so they never reach the landed row.
_SEND_FRAME_HEADERS = {"transaction", "receipt"}
# Headers not copied to a backout message: the broker sets them anew on SEND.
_NOT_COPIED = _COLUMN_HEADERS | {"expires", "persistent", "transaction", "receipt", "x-delivery-count"}
# A copy given back to the source queue keeps persistence, expiry and priority.
_NOT_REQUEUED = _COLUMN_HEADERS | {"transaction", "receipt", "x-delivery-count"}
# Headers by which a copy put back by cumulative-ack commit carries the original's identity.
REQUEUE_ID = "mqbridge-requeue-id"
REQUEUE_COUNT = "mqbridge-requeue-delivery-count"
REQUEUE_TIMESTAMP = "mqbridge-requeue-timestamp"
REQUEUE_REASON = "mqbridge-requeue-reason"
_REQUEUE_HEADERS = {REQUEUE_ID, REQUEUE_COUNT, REQUEUE_TIMESTAMP, REQUEUE_REASON}
_ACK_HEADER = {"cumulative": "client", "individual": "client-individual"}
RECEIPT_TIMEOUT = 15.0


class _Frames:
    """stomp.py listener: frames go to a local queue that the listener thread reads."""

    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()
        self.receipts: dict[str, threading.Event] = {}
        self.errors: list[str] = []
        self.disconnected = threading.Event()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        event = self.receipts.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()

    def on_error(self, frame: Any) -> None:
        text = frame.headers.get("message", "")
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
        self.errors.append(f"{text} {body.strip()[:300]}".strip())
        log.error("STOMP ERROR frame: %s", self.errors[-1])

    def on_disconnected(self) -> None:
        self.disconnected.set()
        self.frames.put(None)  # wake a waiting receive

    def on_heartbeat_timeout(self) -> None:
        self.disconnected.set()
        self.frames.put(None)


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
                   tracker=context.shared.tracker, client_name=context.client_name)

    def __init__(self, name: str, config: StompSourceConfig, destination: str, *, prefetch: int,
                 tracker: DeliveryTracker, client_name: str = "mqbridge") -> None:
        import stomp.exception

        import stomp  # optional driver, imported where used

        self.name = name
        self.destination = destination
        self.config = config
        self.prefetch = max(1, prefetch)
        self.tracker = tracker
        self.client_name = client_name
        self.recoverable_errors: tuple[type[BaseException], ...] = (SourceConnectionError,)
        self._stomp = stomp
        self._driver_errors = (stomp.exception.StompException, OSError, socket.error)
        self._conn: Any = None
        self._frames = _Frames()
        self._subscription = ""
        self._unit: list[Message] = []
        self.cumulative = config.ack_mode == "cumulative"

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> None:
        cfg = self.config
        heartbeat_ms = int(cfg.heartbeat * 1000)
        conn = self._stomp.Connection12(
            [(cfg.host, cfg.port)],
            heartbeats=(heartbeat_ms, heartbeat_ms),
            auto_decode=False,  # bodies are bytes, byte-exact
            reconnect_attempts_max=1,  # the control thread owns reconnecting, with backoff
            timeout=cfg.connect_timeout,
            vhost=cfg.vhost or cfg.host,
            keepalive=True,
        )
        if cfg.ssl:
            conn.set_ssl(for_hosts=[(cfg.host, cfg.port)], key_file=_str(cfg.key_file),
                         cert_file=_str(cfg.cert_file), ca_certs=_str(cfg.ca_certs))
        self._frames = _Frames()
        conn.set_listener("mqbridge", self._frames)
        password = cfg.password.get_secret_value() if cfg.password is not None else None
        try:
            conn.connect(username=cfg.user, passcode=password, wait=True,
                         headers={"client-id": f"{self.client_name}-{uuid.uuid4().hex[:8]}"})
        except self._driver_errors as exc:
            raise SourceConnectionError(
                f"cannot connect to STOMP broker {cfg.host}:{cfg.port} for {self.destination}: "
                f"{type(exc).__name__}: {exc}") from exc
        if not conn.is_connected():
            detail = "; ".join(self._frames.errors) or "connection refused or closed by the broker"
            raise SourceConnectionError(f"cannot connect to STOMP broker {cfg.host}:{cfg.port}: {detail}")
        self._conn = conn
        self._subscribe()
        log.info("connected to %s:%s, consuming %s (prefetch %d)", cfg.host, cfg.port,
                 self.destination, self.prefetch)

    def _subscribe(self) -> None:
        self._subscription = f"sub-{uuid.uuid4().hex[:12]}"
        headers = {"activemq.prefetchSize": str(self.prefetch)}
        if self.config.broker == "rabbitmq":
            headers = {"prefetch-count": str(self.prefetch)}
        elif self.config.broker == "artemis":
            headers = {"consumer-window-size": "-1"}
        self._guard(lambda: self._conn.subscribe(self.destination, id=self._subscription,
                                                 ack=_ACK_HEADER[self.config.ack_mode],
                                                 headers=headers),
                    "subscribe")

    def _resubscribe(self) -> None:
        """Replace the subscription so the broker redelivers every unacked message of it
        (ABORT and NACK cannot do this on ActiveMQ). Frames of the old subscription still in
        the local queue are dropped by `receive`."""
        old = self._subscription
        self._guard(lambda: self._conn.unsubscribe(id=old), "unsubscribe")
        self._subscribe()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._unit = []  # unacked messages return to the queue when the connection closes
        if conn is None:
            return
        try:
            if conn.is_connected():
                conn.disconnect()
        except Exception:  # closing must never raise; the broker redelivers unacked messages
            log.debug("disconnect from %s failed", self.destination, exc_info=True)

    def _guard(self, call: Any, what: str) -> Any:
        if self._conn is None or self._frames.disconnected.is_set():
            raise SourceConnectionError(f"STOMP connection for {self.destination} is lost ({what})")
        try:
            return call()
        except self._driver_errors as exc:
            raise SourceConnectionError(f"STOMP {what} on {self.destination} failed: {exc}") from exc

    # -- unit of work ------------------------------------------------------------------------
    def receive(self, timeout: float) -> Message | None:
        while True:
            if self._frames.disconnected.is_set() or self._conn is None:
                raise SourceConnectionError(f"STOMP connection for {self.destination} is lost")
            try:
                frame = self._frames.frames.get(timeout=timeout)
            except queue.Empty:
                return None
            if frame is None:
                continue
            if frame.headers.get("subscription") != self._subscription:
                continue  # prefetched by a replaced subscription: the broker redelivers it
            message = self._to_message(frame)
            self._unit.append(message)
            return message

    def _to_message(self, frame: Any) -> Message:
        h = frame.headers
        requeued = REQUEUE_ID in h
        msg_id = h[REQUEUE_ID] if requeued else h["message-id"]
        count = self.tracker.delivered(msg_id)
        if "x-delivery-count" in h:  # RabbitMQ quorum queues count for us (0 on first delivery)
            count = max(count, int(h["x-delivery-count"]) + 1)
        if requeued:  # a copy given back by an earlier commit: the count survives restarts
            count = max(count, _int(h.get(REQUEUE_COUNT)) + 1)
            if h.get(REQUEUE_REASON) and self.tracker.last_reason(msg_id) is None:
                self.tracker.failed(msg_id, h[REQUEUE_REASON])
        stamp = h.get(REQUEUE_TIMESTAMP if requeued else "timestamp", "")
        put = None
        if stamp.isdigit() and int(stamp) > 0:
            put = datetime.fromtimestamp(int(stamp) / 1000, tz=timezone.utc)
        body = frame.body if isinstance(frame.body, bytes) else str(frame.body or "").encode()
        return Message(
            msg_id=msg_id,
            body=body,
            source=self.name,
            destination=h.get("destination", self.destination),
            correlation_id=h.get("correlation-id"),
            put_timestamp=put,
            received_timestamp=utcnow(),
            redelivered=requeued or h.get("redelivered") == "true",
            delivery_count=count,
            headers={k: v for k, v in h.items()
                     if k not in _COLUMN_HEADERS and k not in _REQUEUE_HEADERS and k not in _SEND_FRAME_HEADERS},
            token=h.get("ack", msg_id),
        )

    def commit(self, moves: Sequence[BackoutMove] = (), returns: Sequence[Message] = ()) -> None:
        unit, self._unit = self._unit, []
        if not unit:
            return
        returned = {m.msg_id for m in returns}
        moving = {m.message.msg_id: m for m in moves}
        acked = [m.msg_id for m in unit if m.msg_id not in returned]
        if not acked:  # everything goes back: nothing to remove
            self._unit = unit
            self.rollback()
            return
        tx = f"tx-{uuid.uuid4().hex}"
        receipt = f"rc-{tx}"
        done = self._frames.receipts[receipt] = threading.Event()
        try:
            self._guard(lambda: self._conn.begin(transaction=tx), "begin")
            # The original as received, not what the preprocessors made of it.
            for message in unit:
                if message.msg_id in returned:
                    if self.cumulative:
                        self._send_requeue(message, tx)
                    continue
                move = moving.get(message.msg_id)
                if move is not None:
                    self._send_backout(message, move, tx)
                if not self.cumulative:
                    self._guard(lambda m=message: self._conn.ack(m.token, transaction=tx), "ack")
            if self.cumulative:  # acknowledges every message of the unit, the last one included
                self._guard(lambda: self._conn.ack(unit[-1].token, transaction=tx), "ack")
            self._guard(lambda: self._conn.commit(transaction=tx, headers={"receipt": receipt}), "commit")
            if not done.wait(RECEIPT_TIMEOUT) or self._frames.disconnected.is_set() and not done.is_set():
                raise InDoubtError(f"no receipt for the commit of {len(acked)} messages on "
                                   f"{self.destination}; they may be delivered again", acked)
            if returned and not self.cumulative:
                self._give_back([m for m in unit if m.msg_id in returned])
        except SourceConnectionError:
            # The transaction dies with the connection: nothing was acked, all comes back.
            self._unit = []
            raise
        finally:
            self._frames.receipts.pop(receipt, None)

    def _send_requeue(self, message: Message, tx: str) -> None:
        """Put `message` back on the source queue as a copy that keeps its identity."""
        headers = {k: v for k, v in message.headers.items() if k not in _NOT_REQUEUED}
        headers.update({
            "transaction": tx,
            REQUEUE_ID: message.msg_id,
            REQUEUE_COUNT: str(message.delivery_count),
            REQUEUE_REASON: _one_line(self.tracker.last_reason(message.msg_id) or ""),
        })
        if message.correlation_id:
            headers["correlation-id"] = message.correlation_id
        if message.put_timestamp is not None:
            headers[REQUEUE_TIMESTAMP] = str(int(message.put_timestamp.timestamp() * 1000))
        self._guard(lambda: self._conn.send(self.destination, message.body, headers=headers),
                    "send back to the source queue")

    def _send_backout(self, message: Message, move: BackoutMove, tx: str) -> None:
        queue_name = move.queue
        if not queue_name:
            raise SourceError(f"no backout queue configured for {self.destination}; "
                              f"cannot move message {message.msg_id}")
        headers = {k: v for k, v in message.headers.items() if k not in _NOT_COPIED}
        headers.update({
            "persistent": "true",  # ActiveMQ SENDs are non-persistent unless asked
            "transaction": tx,
            "mqbridge-reason": _one_line(move.reason),
            "mqbridge-original-message-id": message.msg_id,
            "mqbridge-original-destination": message.destination,
            "mqbridge-delivery-count": str(message.delivery_count),
            "mqbridge-moved-at": utcnow().isoformat(),
        })
        if message.correlation_id:
            headers["correlation-id"] = message.correlation_id
        if message.put_timestamp is not None:
            headers["mqbridge-original-timestamp"] = str(int(message.put_timestamp.timestamp() * 1000))
        self._guard(lambda: self._conn.send(queue_name, message.body, headers=headers), "send to backout queue")

    def rollback(self) -> None:
        unit, self._unit = self._unit, []
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


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def _one_line(text: str, limit: int = 1000) -> str:
    """STOMP header values cannot hold newlines (stomp.py escapes them, other clients may not)."""
    return " ".join(text.split())[:limit]
