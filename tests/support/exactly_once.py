"""Helpers of the exactly-once tests under load: bodies, the accounting of every message, waits
with deadlines, a private ActiveMQ, RabbitMQ queues with producer headers."""

from __future__ import annotations

import collections
import os
import queue as queues
import shutil
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stomp

from tests.support.processes import ROOT
from tests.support.waiting import wait_until


def bodies(n: int, tag: str) -> list[bytes]:
    """`n` distinct bodies carrying every byte value, so a body that is not byte-identical shows."""
    return [f"{tag}-{i:05d}:".encode() + bytes(range(256)) for i in range(n)]


@dataclass(frozen=True)
class Accounting:
    """Every sent message accounted for, like a total-queue checker."""

    sent: int
    lost: list[bytes]
    duplicated: dict[bytes, int]  # body -> times it is in the table (> 1)
    unexpected: list[bytes]

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def __str__(self) -> str:
        return (f"{self.sent} sent: {len(self.lost)} lost, {len(self.duplicated)} duplicated "
                f"({sum(self.duplicated.values()) - len(self.duplicated)} extra rows), "
                f"{len(self.unexpected)} unexpected; e.g. lost {self.lost[:2]!r:.120} "
                f"duplicated {list(self.duplicated)[:2]!r:.120}")


def account(sent: list[bytes], rows: collections.Counter[bytes]) -> Accounting:
    expected = set(sent)
    return Accounting(len(sent), [b for b in sent if b not in rows],
                      {b: n for b, n in rows.items() if n > 1 and b in expected},
                      [b for b in rows if b not in expected])


def published_files(table: Path) -> int:
    """Parquet files a reader of `table` sees (staging and `_temporary` excluded). Lists only the
    partition directories: a recursive walk would race with staging directories being removed."""
    try:
        return sum(1 for _ in table.glob("put_date=*/part-*.parquet"))
    except OSError:  # the table directory is being created
        return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: What a STOMP listener thread logs once it has subscribed.
SUBSCRIBED = "mqbridge.listeners.stomp: connected to"


class OutputReader:
    """Collects a process's output in a thread, so that the pipe never fills while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_subscribed(self, threads: int, timeout: float = 180) -> None:
        """Until each of its `threads` STOMP listener threads has subscribed: from then on the broker
        dispatches it messages, so a bridge started later cannot take the whole queue first."""
        def subscribed() -> bool:  # it may already have ended (a failpoint): its lines count first
            ended = self.proc.poll() is not None
            if ended:
                self._thread.join(10)
            if sum(SUBSCRIBED in line for line in list(self.lines)) >= threads:
                return True
            if ended:
                raise AssertionError(f"it ended ({self.proc.returncode}) before subscribing:\n"
                                     f"{self.text()[-5000:]}")
            return False
        wait_until(subscribed, timeout, f"{threads} listener threads to subscribe")

    def wait(self, timeout: float) -> int | None:
        """The return code once it ended within `timeout`, else None (still running)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._thread.join(10)
        return code

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, then SIGKILL if it has not ended within `timeout` seconds; its return code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.wait(timeout)
        if code is None:
            self.proc.kill()
            code = self.proc.wait()
        return code


# -- a private ActiveMQ -----------------------------------------------------------------------
class PrivateActiveMQ:
    """An ActiveMQ of this test only (scripts/activemq.sh with its own base and port)."""

    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port
        self.env = {**os.environ, "MQBRIDGE_AMQ_BASE": str(base), "MQBRIDGE_STOMP_PORT": str(port)}

    def _script(self, action: str) -> None:
        subprocess.run([str(ROOT / "scripts" / "activemq.sh"), action], cwd=ROOT, env=self.env, check=True,
                       stdout=subprocess.DEVNULL, timeout=180)

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")


@contextmanager
def private_activemq(base: Path) -> Iterator[PrivateActiveMQ]:
    """Started on a free port; always stopped, its data removed."""
    broker = PrivateActiveMQ(base, free_port())
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)


# -- RabbitMQ ---------------------------------------------------------------------------------
RABBIT = ("127.0.0.1", 61623)
RABBIT_SOURCE = 'user = "guest"\npassword = "guest"\nallow_plaintext_password = true\nvhost = "/"'


class _Frames(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.frames: queues.Queue[Any] = queues.Queue()
        self.receipts: dict[str, threading.Event] = {}
        self.errors: list[str] = []

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.setdefault(frame.headers["receipt-id"], threading.Event()).set()

    def on_error(self, frame: Any) -> None:
        self.errors.append(f"{frame.headers.get('message')}: {frame.body!r}")


class Rabbit:
    """Short STOMP connections to the shared RabbitMQ: declare, put with headers, count."""

    def __init__(self, address: tuple[str, int] = RABBIT) -> None:
        self.address = address

    @contextmanager
    def _connection(self) -> Iterator[tuple[Any, _Frames]]:
        conn = stomp.Connection12([self.address], auto_decode=False, vhost="/")
        frames = _Frames()
        conn.set_listener("test", frames)
        conn.connect("guest", "guest", wait=True)
        try:
            yield conn, frames
        finally:
            if conn.is_connected():
                conn.disconnect()

    def declare_quorum(self, name: str) -> str:
        """Declare quorum queue `name` (a SUBSCRIBE to /queue/NAME with `x-queue-type: quorum`)
        and return the destination that uses it without declaring it again: /amq/queue/NAME (a
        plain /queue/NAME would redeclare it without the type: PRECONDITION_FAILED)."""
        with self._connection() as (conn, frames):
            receipt = uuid.uuid4().hex
            done = frames.receipts.setdefault(receipt, threading.Event())
            conn.subscribe(f"/queue/{name}", id="declare", ack="client-individual",
                           headers={"x-queue-type": "quorum", "durable": "true", "auto-delete": "false",
                                    "receipt": receipt})
            assert done.wait(30), f"no receipt declaring {name}: {frames.errors}"
            conn.unsubscribe(id="declare")
        return f"/amq/queue/{name}"

    def put(self, destination: str, messages: list[tuple[bytes, dict[str, str]]]) -> None:
        """Put (body, headers) pairs, persistent; return once the broker has them all."""
        with self._connection() as (conn, frames):
            receipt = uuid.uuid4().hex
            done = frames.receipts.setdefault(receipt, threading.Event())
            for index, (body, headers) in enumerate(messages, 1):
                h = {"persistent": "true", **headers}
                if index == len(messages):
                    h["receipt"] = receipt
                conn.send(destination, body, headers=h)
            assert not messages or done.wait(60), f"no receipt from RabbitMQ: {frames.errors}"

    def deliveries(self, destination: str, quiet: float = 1.0, ack: bool = False) -> list[Any]:
        """The frames RabbitMQ delivers from `destination` until none came for `quiet` seconds;
        given back (client acks never sent, then disconnect) unless `ack`."""
        with self._connection() as (conn, frames):
            conn.subscribe(destination, id="count", ack="auto" if ack else "client",
                           headers={"prefetch-count": "1000"})
            got = []
            while True:
                try:
                    got.append(frames.frames.get(timeout=quiet))
                except queues.Empty:
                    assert not frames.errors, frames.errors
                    return got

    def depth(self, destination: str) -> int:
        return len(self.deliveries(destination))


def interleaved(good: list[bytes], poison: list[bytes], every: int) -> list[bytes]:
    """`good` with one of `poison` after every `every`-th good message, in order."""
    out: list[bytes] = []
    for i, body in enumerate(good, 1):
        out.append(body)
        if i % every == 0:
            out.append(poison[i // every - 1])
    return out
