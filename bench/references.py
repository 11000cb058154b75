"""The broker side of the steady benchmark (`bench/steady.py`): where the messages are, how they are
put, and the two reference consumers the bridge is compared with on the same broker in the same run:
a stomp.py consumer that ACKs each message (client-individual), and one with `ack=auto` that drops
what it gets (the broker's dispatch limit on this box, the ceiling for any bridge).
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass

import psutil
import stomp


@dataclass
class Broker:
    """Where the messages are: STOMP on 127.0.0.1:port, and how to log in."""

    kind: str  # activemq | rabbitmq
    port: int
    user: str | None = None
    password: str | None = None

    def connection(self) -> stomp.Connection12:
        host = "/" if self.kind == "rabbitmq" else None
        conn = stomp.Connection12([("127.0.0.1", self.port)], auto_decode=False, vhost=host)
        conn.connect(self.user, self.password, wait=True)
        return conn

    def prefetch_header(self, n: int) -> dict[str, str]:
        return {"prefetch-count": str(n)} if self.kind == "rabbitmq" else {"activemq.prefetchSize": str(n)}

    def source_toml(self) -> str:
        lines = ['kind = "stomp"', f"port = {self.port}", f'broker = "{self.kind}"']
        if self.user:
            lines += [f'user = "{self.user}"', f'password = "{self.password}"']  # to 127.0.0.1: no TLS needed
        return "\n".join(lines)

    def process(self) -> psutil.Process | None:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == self.port and conn.pid:
                return psutil.Process(conn.pid)
        return None


class _Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.events: dict[str, threading.Event] = {}
        self.frames: queue.Queue = queue.Queue()

    def on_receipt(self, frame):  # type: ignore[no-untyped-def]
        event = self.events.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()

    def on_message(self, frame):  # type: ignore[no-untyped-def]
        self.frames.put(frame)


def put(broker: Broker, destination: str, n: int, size: int) -> float:
    """Put `n` persistent messages of `size` bytes; waits for the broker's receipt of the last."""
    body = os.urandom(size // 2).hex().encode()[:size]
    conn = broker.connection()
    listener = _Receipts()
    conn.set_listener("r", listener)
    start = time.perf_counter()
    for _ in range(n):
        conn.send(destination, body, headers={"persistent": "true"})
    rid = uuid.uuid4().hex
    listener.events[rid] = threading.Event()
    conn.send(destination + ".sync", b"", headers={"receipt": rid})
    if not listener.events[rid].wait(120):
        raise TimeoutError("no receipt for the last message put")
    rate = n / (time.perf_counter() - start)
    conn.disconnect()
    return rate


def raw_consumer(broker: Broker, destination: str, warm: int, measure: int, prefetch: int) -> float:
    """Drain warm + measure messages with one ACK each; the rate of the last `measure`."""
    conn = broker.connection()
    listener = _Receipts()
    conn.set_listener("c", listener)
    conn.subscribe(destination, id="raw", ack="client-individual", headers=broker.prefetch_header(prefetch))
    start = 0.0
    for i in range(warm + measure):
        if i == warm:
            start = time.perf_counter()
        frame = listener.frames.get(timeout=60)
        conn.ack(frame.headers["ack"])
    rate = measure / (time.perf_counter() - start)
    conn.disconnect()
    return rate


class _Counting(stomp.ConnectionListener):
    """Counts the frames it receives and drops them; notes when the `mark`-th and the last came."""

    def __init__(self, mark: int, last: int) -> None:
        self.count = 0
        self.mark, self.last = mark, last
        self.marked = 0.0
        self.done = threading.Event()

    def on_message(self, frame):  # type: ignore[no-untyped-def]
        self.count += 1
        if self.count == self.mark:
            self.marked = time.perf_counter()
        if self.count >= self.last:
            self.done.set()


def auto_ack_consumer(broker: Broker, destination: str, warm: int, measure: int, prefetch: int) -> float:
    """Drain warm + measure messages with `ack=auto`, dropping each: what the broker dispatches to
    one consumer on this machine, the ceiling for any bridge. The rate of the last `measure`."""
    conn = broker.connection()
    listener = _Counting(warm, warm + measure)
    conn.set_listener("c", listener)
    conn.subscribe(destination, id="auto", ack="auto", headers=broker.prefetch_header(prefetch))
    if not listener.done.wait(600):
        raise TimeoutError(f"the auto-ack consumer received {listener.count:,} of {warm + measure:,} messages")
    rate = measure / (time.perf_counter() - listener.marked)
    conn.disconnect()
    return rate


def acking_reference(broker: Broker, args: argparse.Namespace, when: str) -> float:
    """(a): W + N messages put on a fresh queue, drained by the per-message-acking consumer."""
    destination = f"/queue/bench-raw-{uuid.uuid4().hex[:8]}"
    put_rate = put(broker, destination, args.warm + args.measure, args.size)
    print(f"put rate:                       {put_rate:>9,.0f} msg/s")
    rate = raw_consumer(broker, destination, args.warm, args.measure, prefetch=min(args.batch, 1000))
    print(f"(a) raw stomp.py consumer, {when + ':':<7}{rate:>9,.0f} msg/s  "
          "(last N of W + N, client-individual acks; load average after it "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return rate
