"""A STOMP test client for any broker (ActiveMQ, RabbitMQ): put, browse, drain. Not part of the
product; `tests.support.amq.AmqClient` is the ActiveMQ-only client of the older tests."""

from __future__ import annotations

import queue as queues
import threading
import uuid
from typing import Any

import stomp


class _Frames(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.frames: queues.Queue[Any] = queues.Queue()
        self.receipts: dict[str, threading.Event] = {}

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.setdefault(frame.headers["receipt-id"], threading.Event()).set()


class StompClient:
    """Puts, browses and drains queues on any STOMP broker, one short connection each time.

    Without a queue browser (RabbitMQ), browsing subscribes with client acks, never acknowledges
    and disconnects: the broker gives unacknowledged messages back when a connection closes, so
    the messages stay on the queue.
    """

    def __init__(self, address: tuple[str, int], credentials: dict[str, Any], *, browser: bool) -> None:
        self.address = address
        self.browser = browser  # the broker has a STOMP queue browser (ActiveMQ)
        password = credentials.get("password")
        self.login = (credentials.get("user"), password.get_secret_value() if password else None)
        self.vhost = credentials.get("vhost")

    def _connect(self) -> tuple[Any, _Frames]:
        conn = stomp.Connection12([self.address], auto_decode=False, vhost=self.vhost or self.address[0])
        frames = _Frames()
        conn.set_listener("test", frames)
        conn.connect(*self.login, wait=True)
        return conn, frames

    def put_many(self, queue: str, bodies: list[bytes]) -> None:
        conn, frames = self._connect()
        try:
            receipt = uuid.uuid4().hex
            done = frames.receipts.setdefault(receipt, threading.Event())
            for index, body in enumerate(bodies, 1):
                headers = {"persistent": "true", "x-k": "v"}
                if index == len(bodies):  # the broker has every message once it receipts the last one
                    headers["receipt"] = receipt
                conn.send(queue, body, headers=headers)
            assert not bodies or done.wait(30), "no receipt from the broker"
        finally:
            conn.disconnect()

    def browse(self, queue: str, quiet: float = 0.5) -> list[Any]:
        """The messages available on `queue`, left in place. ActiveMQ's queue browser says when it
        is done; elsewhere, whatever arrives until none came for `quiet` seconds."""
        if not self.browser:
            return self._consume(queue, quiet, ack="client")
        conn, frames = self._connect()
        got: list[Any] = []
        try:
            conn.subscribe(queue, id="b", ack="auto", headers={"browser": "true"})
            while (frame := frames.frames.get(timeout=10)).headers.get("browser") != "end":
                got.append(frame)
            return got
        finally:
            conn.disconnect()

    def drain(self, queue: str, quiet: float = 0.2) -> list[Any]:
        return self._consume(queue, quiet, ack="auto")

    def _consume(self, queue: str, quiet: float, ack: str) -> list[Any]:
        conn, frames = self._connect()
        got: list[Any] = []
        try:
            conn.subscribe(queue, id="s", ack=ack)
            while True:
                try:
                    got.append(frames.frames.get(timeout=quiet))
                except queues.Empty:
                    return got
        finally:
            conn.disconnect()
