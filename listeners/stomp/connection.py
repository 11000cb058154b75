"""One STOMP connection and its subscription, on stomp.py: connecting and subscribing within
`connect_timeout`, SENDing with a receipt, giving unacknowledged messages back, closing.

stomp.py's exceptions become SourceConnectionError here, at the adapter's edge. A broker that
answers CONNECT or SUBSCRIBE with ERROR (bad credentials, unknown virtual host, no permission)
raises SourceRefusedError, which halts the listener instead of reconnecting forever.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn

from mqbridge.config import StompSourceConfig
from mqbridge.config.topics import requeue_destination
from mqbridge.errors import (
    InDoubtError,
    SourceConnectionError,
    SourceError,
    SourceRefusedError,
    SourceTLSError,
    SubscriptionInUseError,
)
from mqbridge.listeners.stomp.frames import MQBRIDGE_LISTENER, Frames, ack_frames, deliver_messages_directly, drop
from mqbridge.listeners.stomp.tls import diagnose as tls_diagnose
from mqbridge.message import Message

log = logging.getLogger("mqbridge.listeners.stomp")  # the adapter's logger: one name for its lines

#: How many of the broker's heart-beat periods may pass without a frame before the connection counts
#: as dead. ActiveMQ sends a heart-beat only when a check finds nothing sent since the check before, so
#: after a frame just past one check the next heart-beat comes almost two periods later (measured: a
#: MESSAGE at 3 s, the first heart-beat at 30 s with 10 s periods and another MESSAGE at 16.5 s);
#: stomp.py's default, 1.5, then drops a healthy connection that has just gone quiet.
HEARTBEAT_RECEIVE_SCALE = 2.5

#: What ActiveMQ's ERROR to CONNECT says when another connection holds the client-id
#: (javax.jms.InvalidClientIDException "Broker: B - Client: C already connected from ...").
CLIENT_ID_IN_USE = "already connected"


class Connection:
    """The stomp.py connection of one source to one queue (`conn`, None when closed) and what its
    listener has seen (`frames`); each `open` makes a new one."""

    def __init__(self, name: str, config: StompSourceConfig, destination: str, *, prefetch: int,
                 client_name: str, selector: str | None = None, durable: str | None = None) -> None:
        import stomp  # optional driver, imported where used
        import stomp.exception

        self.name = name
        self.config = config
        self.destination = destination
        self.prefetch = prefetch
        self.client_name = client_name
        self.selector = selector  # the listener's `selector` (ActiveMQ, Artemis; the config refuses RabbitMQ)
        # A topic listener's `subscription` (`durable_headers`): None for a queue.
        self.durable = durable
        self.receipt_timeout = config.receipt_timeout
        self._stomp = stomp
        self._driver_errors = (stomp.exception.StompException, OSError, socket.error)
        self.conn: Any = None
        self.frames = Frames()
        self.subscription = ""

    @property
    def requeue_to(self) -> str:
        """Where copies of this subscription's messages go (given back with cumulative acks): its
        destination, or a RabbitMQ durable subscription's own queue (`mqbridge.config.topics`)."""
        return requeue_destination(self.config.broker, self.durable, self.destination)

    @property
    def lost(self) -> bool:
        """Closed, failed, or dropped by the broker or the network."""
        return self.conn is None or self.frames.disconnected.is_set()

    def open(self) -> None:
        """Connect and subscribe, all within `connect_timeout`. A broker that answers CONNECT or
        SUBSCRIBE with ERROR raises SourceRefusedError (the listener halts); anything else raises
        SourceConnectionError."""
        cfg = self.config
        deadline = time.monotonic() + cfg.connect_timeout
        conn = self._new_connection()
        frames = self.frames
        password = cfg.password.get_secret_value() if cfg.password is not None else None
        where = f"STOMP broker {cfg.host}:{cfg.port} (source {self.name!r})"
        try:
            # stomp.py's own wait for CONNECTED has no end (it waits in slices of timeout/10, forever):
            # send CONNECT without waiting and wait here, up to the deadline.
            conn.connect(username=cfg.user, passcode=password, wait=False,
                         headers={"client-id": self.durable or f"{self.client_name}-{uuid.uuid4().hex[:8]}"})
        except self._driver_errors as exc:
            drop(conn)
            # stomp.py's ConnectFailedException says nothing; its log line has the socket's error.
            self._raise_if_tls(where, exc)
            why = (f"{type(exc).__name__}: {exc}" if str(exc) else
                   f"no TCP connection within {cfg.connect_timeout:g}s (refused or unreachable)")
            raise SourceConnectionError(f"cannot connect to {where}: {why}") from exc
        answered = frames.wait_for(lambda: frames.connected or bool(frames.errors) or frames.disconnected.is_set(),
                                   deadline)
        if frames.errors:
            drop(conn)
            if self.durable is not None and CLIENT_ID_IN_USE in frames.errors[0][1]:
                # Another bridge holds the subscription, or the broker has not yet seen our last
                # connection die (kill -9): retried with backoff, unlike a refusal.
                raise SubscriptionInUseError(f"{where}: the durable subscription {self.durable!r} is in use by "
                                             f"another connection (client-id {self.durable!r})")
            raise SourceRefusedError(f"{where} refused CONNECT: {frames.errors[0][1]}")
        if not answered or not frames.connected:
            drop(conn)
            self._raise_if_tls(where, None)  # with TLS 1.3 a refused client certificate shows only now
            why = (f"no answer to CONNECT within {cfg.connect_timeout:g}s (connect_timeout)" if not answered
                   else "the broker closed the connection during CONNECT")
            raise SourceConnectionError(f"cannot connect to {where}: {why}")
        self.conn = conn
        self.subscribe(deadline)
        log.info("connected to %s:%s, consuming %s (prefetch %d, %s commits)", cfg.host, cfg.port,
                 self.destination, self.prefetch, cfg.commit_mode)

    def _raise_if_tls(self, where: str, cause: BaseException | None) -> None:
        """After a failed connect over TLS: SourceTLSError when a certificate is why (see `tls.py`)."""
        cfg = self.config
        if not cfg.ssl:
            return
        problem = tls_diagnose(cfg.host, cfg.port, ca_certs=cfg.ca_certs, cert_file=cfg.cert_file,
                               key_file=cfg.key_file, timeout=cfg.connect_timeout)
        if problem is not None:
            raise SourceTLSError(f"cannot connect to {where}: {problem}") from cause

    def _new_connection(self) -> Any:
        """A stomp.py connection, not yet connected, reporting to fresh `frames`."""
        cfg = self.config
        heartbeat_ms = int(cfg.heartbeat * 1000)
        conn = self._stomp.Connection12(
            [(cfg.host, cfg.port)],
            heartbeats=(heartbeat_ms, heartbeat_ms),
            auto_decode=False,  # bodies are bytes, byte-exact
            reconnect_attempts_max=1,  # the control thread owns reconnecting, with backoff
            timeout=cfg.connect_timeout,  # bounds the TCP connect and the TLS handshake
            vhost=cfg.vhost or cfg.host,
            keepalive=True,
            heart_beat_receive_scale=HEARTBEAT_RECEIVE_SCALE,
        )
        if cfg.ssl:
            conn.set_ssl(for_hosts=[(cfg.host, cfg.port)], key_file=_str(cfg.key_file),
                         cert_file=_str(cfg.cert_file), ca_certs=_str(cfg.ca_certs))
        self.frames = Frames()
        conn.set_listener(MQBRIDGE_LISTENER, self.frames)
        deliver_messages_directly(conn, self.frames)
        return conn

    def subscribe(self, deadline: float | None = None) -> None:
        """Subscribe, confirmed by a receipt (an ERROR instead is a refusal: no permission)."""
        self.subscription = f"sub-{uuid.uuid4().hex[:12]}"
        headers = {"activemq.prefetchSize": str(self.prefetch)}
        if self.config.broker == "rabbitmq":
            headers = {"prefetch-count": str(self.prefetch)}
        elif self.config.broker == "artemis":
            headers = {"consumer-window-size": "-1"}
        if self.selector is not None:
            headers["selector"] = self.selector
        if self.durable is not None:
            headers.update(durable_headers(self.config.broker, self.durable))
        receipt = f"sub-{self.subscription}"
        headers["receipt"] = receipt
        errors_before = len(self.frames.errors)
        self.guard(lambda: self.conn.subscribe(self.destination, id=self.subscription,
                                               ack="client-individual" if self.config.ack_mode == "individual"
                                               else "client",
                                               headers=headers),
                   "subscribe")
        timeout = self.receipt_timeout if deadline is None else max(0.1, deadline - time.monotonic())
        problem = self.frames.await_receipts([receipt], errors_before, timeout)
        if len(self.frames.errors) > errors_before:
            raise SourceRefusedError(f"STOMP broker {self.config.host}:{self.config.port} (source {self.name!r}) "
                                     f"refused the subscription to {self.destination}: "
                                     f"{self.frames.errors[errors_before][1]}")
        if problem:
            raise SourceConnectionError(f"subscribing to {self.destination} failed: {problem}")

    def give_back(self, messages: Sequence[Message], *, cumulative: bool) -> None:
        """Return unacknowledged messages to the queue. RabbitMQ (3.10 measured) keeps a removed
        subscription's unacked messages until the connection closes, but requeues at once on NACK
        (cumulative in `ack: client` mode, so one NACK of the last message returns a whole unit).
        ActiveMQ dead-letters on NACK and redelivers when the subscription is replaced."""
        if self.config.broker != "rabbitmq":
            self._resubscribe()
            return
        for message in messages[-1:] if cumulative else messages:
            self.nack(message.token)

    def nack(self, token: str, receipt: str | None = None) -> None:
        """NACK `token`, asking for `receipt` if given: RabbitMQ requeues at once, and with `ack:
        client` every unacknowledged message of the subscription up to it (measured on 3.10)."""
        self.guard(lambda: self.conn.nack(token, receipt=receipt, requeue="true"), "nack")

    def _resubscribe(self) -> None:
        """Replace the subscription so the broker redelivers every unacked message of it
        (ABORT and NACK cannot do this on ActiveMQ). Frames of the old subscription still in
        the local queue are dropped by `receive`."""
        old = self.subscription
        self.guard(lambda: self.conn.unsubscribe(id=old), "unsubscribe")
        self.subscribe()

    def guard(self, call: Any, what: str) -> Any:
        """`call()`, on a connection that is not lost; stomp.py's errors raise SourceConnectionError."""
        if self.lost:
            raise SourceConnectionError(f"STOMP connection for {self.destination} is lost ({what})")
        try:
            return call()
        except self._driver_errors as exc:
            raise SourceConnectionError(f"STOMP {what} on {self.destination} failed: {exc}") from exc

    def ack(self, tokens: Sequence[str], tx: str | None, receipt: str | None) -> None:
        """ACK `tokens` (in transaction `tx`, if any; the last asking for `receipt`) in one socket
        write (`frames.ack_frames`), through stomp.py's own `transmit`: its lock, its heartbeat clock,
        and on TLS its I/O thread, which alone may write to the (non-blocking) socket. A frame without
        a command goes out as an EOL, which STOMP reads as a heartbeat, followed by its body: here the
        ACK frames."""
        if tokens:
            batch = self._stomp.utils.Frame("", {}, ack_frames(tokens, tx, receipt))
            self.guard(lambda: self.conn.transport.transmit(batch), "ack")

    def send(self, destination: str, body: bytes, headers: dict[str, str], tx: str | None, what: str) -> str:
        """SEND, in transaction `tx` if any, asking for a receipt; the receipt id."""
        receipt = f"send-{uuid.uuid4().hex}"
        headers["receipt"] = receipt
        if tx is not None:
            headers["transaction"] = tx
        self.guard(lambda: self.conn.send(destination, body, headers=headers), what)
        return receipt

    def close(self) -> None:
        """Close the connection, if open: the broker gives back every unacknowledged message."""
        conn, self.conn = self.conn, None
        if conn is not None:
            drop(conn, self.frames)

    def fail(self, reason: str, error: type[SourceError] = SourceConnectionError,
             msg_ids: list[str] | None = None) -> NoReturn:
        """Close the connection (the broker gives back every unacknowledged message) and raise."""
        self.close()
        if error is InDoubtError:
            raise InDoubtError(reason, msg_ids or [])
        raise error(f"{self.destination}: {reason}")


def durable_headers(broker: str, subscription: str) -> dict[str, str]:
    """SUBSCRIBE headers of a durable topic subscription: ActiveMQ names it (with the CONNECT
    `client-id`, also the subscription's name); RabbitMQ binds a durable queue of that name to
    the topic exchange, which keeps the topic's messages while nobody is subscribed."""
    if broker == "rabbitmq":
        return {"durable": "true", "auto-delete": "false", "x-queue-name": subscription}
    return {"activemq.subscriptionName": subscription}


def _str(value: object) -> str | None:
    return None if value is None else str(value)
