"""A small STOMP client for tests and the demo: put, browse (non-destructive) and drain queues
on the real broker. Not part of the product."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any

import stomp

HOST, PORT = "127.0.0.1", 61613


class _Collect(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()
        self.receipts: dict[str, threading.Event] = {}

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.setdefault(frame.headers["receipt-id"], threading.Event()).set()


class AmqClient:
    """Connects on construction; use as a context manager."""

    def __init__(self, host: str = HOST, port: int = PORT) -> None:
        self.conn = stomp.Connection12([(host, port)], auto_decode=False)
        self.listener = _Collect()
        self.conn.set_listener("test", self.listener)
        self.conn.connect(wait=True)

    def __enter__(self) -> AmqClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()

    def _sync(self) -> None:
        """Wait until the broker has processed every frame sent so far (a receipt)."""
        rid = uuid.uuid4().hex
        event = self.listener.receipts.setdefault(rid, threading.Event())
        self.conn.send("/queue/mqbridge.test.sync", b"", headers={"receipt": rid})
        if not event.wait(30):
            raise TimeoutError("no receipt from broker")

    def put(self, destination: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        h = {"persistent": "true"}
        h.update(headers or {})
        self.conn.send(destination, body, headers=h)

    def put_many(self, destination: str, bodies: list[bytes], headers: dict[str, str] | None = None) -> None:
        for body in bodies:
            self.put(destination, body, headers)
        self._sync()

    def browse(self, destination: str, timeout: float = 10.0) -> list[Any]:
        """Every message on the queue, left in place (ActiveMQ queue browser subscription)."""
        sub = f"browse-{uuid.uuid4().hex[:8]}"
        frames: list[Any] = []
        self.conn.subscribe(destination, id=sub, ack="auto", headers={"browser": "true"})
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    frame = self.listener.frames.get(timeout=0.5)
                except queue.Empty:
                    continue
                if frame.headers.get("subscription") != sub:
                    continue
                if frame.headers.get("browser") == "end":
                    return frames
                frames.append(frame)
            raise TimeoutError(f"browsing {destination} did not end")
        finally:
            self.conn.unsubscribe(id=sub)

    def depth(self, destination: str) -> int:
        return len(self.browse(destination))

    def drain(self, destination: str, quiet: float = 1.0, timeout: float = 60.0) -> list[Any]:
        """Consume every message until none arrives for `quiet` seconds."""
        sub = f"drain-{uuid.uuid4().hex[:8]}"
        frames: list[Any] = []
        self.conn.subscribe(destination, id=sub, ack="auto")
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        try:
            while time.monotonic() < deadline and time.monotonic() - last < quiet:
                try:
                    frame = self.listener.frames.get(timeout=0.1)
                except queue.Empty:
                    continue
                if frame.headers.get("subscription") == sub:
                    frames.append(frame)
                    last = time.monotonic()
        finally:
            self.conn.unsubscribe(id=sub)
        return frames


def unique_queue(prefix: str) -> str:
    return f"/queue/test.{prefix}.{uuid.uuid4().hex[:8]}"
