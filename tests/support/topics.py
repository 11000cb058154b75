"""Durable topic subscriptions on the real brokers, for the topic listener tests
(docs/topics.md): create one as the bridge does (same CONNECT client-id and SUBSCRIBE headers,
`mqbridge.listeners.stomp.connection.durable_headers`), publish to the topic, remove it again so
the shared brokers keep no subscription a test made."""

from __future__ import annotations

import hashlib
import queue as queues
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import stomp

from mqbridge.listeners.stomp.connection import durable_headers

#: The producer's id each published message carries (RabbitMQ's message-id is per delivery).
EO_ID = "x-eo-id"


class _Receipts(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.receipts: dict[str, threading.Event] = {}
        self.errors: list[str] = []
        self.messages: queues.Queue[bytes] = queues.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(bytes(frame.body))

    def on_receipt(self, frame: Any) -> None:
        self.receipts.setdefault(frame.headers["receipt-id"], threading.Event()).set()

    def on_error(self, frame: Any) -> None:
        self.errors.append(f"{frame.headers.get('message')}: {bytes(frame.body or b'')[:200]!r}")


class Broker:
    """Short STOMP connections to one shared broker (`broker` is activemq or rabbitmq)."""

    def __init__(self, broker: str, address: tuple[str, int]) -> None:
        self.broker, self.address = broker, address

    @contextmanager
    def _connection(self, client_id: str | None = None) -> Iterator[tuple[Any, _Receipts]]:
        rabbit = self.broker == "rabbitmq"
        conn = stomp.Connection12([self.address], auto_decode=False, vhost="/" if rabbit else self.address[0])
        frames = _Receipts()
        conn.set_listener("test", frames)
        conn.connect(*(("guest", "guest") if rabbit else ("admin", "admin")), wait=True,
                     headers={"client-id": client_id} if client_id else {})
        try:
            yield conn, frames
        finally:
            if conn.is_connected():
                conn.disconnect()

    @staticmethod
    def _await(conn: Any, frames: _Receipts, send: Any, what: str) -> None:
        receipt = uuid.uuid4().hex
        done = frames.receipts.setdefault(receipt, threading.Event())
        send(receipt)
        assert done.wait(30), f"no receipt from the broker for {what}: {frames.errors}"
        assert not frames.errors, f"{what}: {frames.errors}"

    def subscribe(self, topic: str, subscription: str) -> None:
        """Create the durable subscription `subscription` to `topic` (then leave it, offline)."""
        with self._connection(subscription) as (conn, frames):
            headers = durable_headers(self.broker, subscription)
            self._await(conn, frames, lambda r: conn.subscribe(topic, id="t", ack="client-individual",
                                                               headers={**headers, "receipt": r}),
                        f"subscribing {subscription} to {topic}")

    def drop(self, topic: str, subscription: str) -> None:
        """Remove the durable subscription (ActiveMQ: UNSUBSCRIBE naming it; RabbitMQ: UNSUBSCRIBE
        of a durable subscription deletes its queue)."""
        with self._connection(subscription) as (conn, frames):
            headers = durable_headers(self.broker, subscription)
            if self.broker == "rabbitmq":
                self._await(conn, frames, lambda r: conn.subscribe(topic, id="t", ack="client-individual",
                                                                   headers={**headers, "receipt": r}), "resubscribe")
            self._await(conn, frames, lambda r: conn.unsubscribe(id="t", headers={**headers, "receipt": r}),
                        f"removing {subscription}")

    def drain(self, queue: str, quiet: float = 1.0) -> list[bytes]:
        """The bodies taken (acknowledged) from `queue` until none came for `quiet` seconds."""
        with self._connection() as (conn, frames):
            conn.subscribe(queue, id="drain", ack="auto")
            out = []
            while True:
                try:
                    out.append(frames.messages.get(timeout=quiet))
                except queues.Empty:
                    assert not frames.errors, frames.errors
                    return out

    def publish(self, topic: str, bodies: list[bytes]) -> None:
        """Publish persistent messages, each with a producer's id (`x-eo-id`: its body's SHA-1); return
        once the broker has them all."""
        with self._connection() as (conn, frames):
            for body in bodies[:-1]:
                conn.send(topic, body, headers={"persistent": "true", EO_ID: hashlib.sha1(body).hexdigest()})
            if bodies:
                last = {"persistent": "true", EO_ID: hashlib.sha1(bodies[-1]).hexdigest()}
                self._await(conn, frames, lambda r: conn.send(topic, bodies[-1], headers={**last, "receipt": r}),
                            f"publishing to {topic}")
