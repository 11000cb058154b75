"""Plain clients of the shared RabbitMQ for the tests of what it does and of the bridge on it
(tests/integration/test_rabbitmq_facts.py, test_rabbitmq_lossless.py): a bare STOMP connection that
keeps every frame and sees the broker close it; queue policies set with `rabbitmqctl` (the STOMP
plugin of RabbitMQ 3.10 declares `x-max-length`, `x-queue-type`, `x-dead-letter-*` from headers but
not `x-overflow`); a producer that loses nothing; a control consumer; and a tap that records the
frames a client sends to the broker.

Every message of these tests carries its own test id (`TEST_ID` header, and the start of its body),
so that the tests account for each one like a total-queue checker.
"""

from __future__ import annotations

import contextlib
import json
import queue as queues
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import stomp
from stomp.exception import StompException

from tests.support.tcpproxy import TcpProxy

#: The shared node of scripts/rabbitmq.sh, for rabbitmqctl.
RABBITMQCTL = ("rabbitmqctl", "-q", "-n", "mqbridge-test@localhost")
#: The header (and body prefix) carrying a test message's own id.
TEST_ID = "test-id"


def rabbitmqctl(*args: str) -> str:
    """Run `rabbitmqctl ARGS` on the shared node; its output (AssertionError with its message if it fails)."""
    done = subprocess.run([*RABBITMQCTL, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


def unique_name(what: str) -> str:
    """A queue name of its own on the shared broker (no `/queue/` prefix)."""
    return f"test.{what}.{uuid.uuid4().hex[:10]}"


@contextmanager
def queue_policy(name: str, definition: Mapping[str, Any]) -> Iterator[None]:
    """A policy giving queue `name` alone (and no other queue of the shared broker) `definition`,
    e.g. {"max-length": 200, "overflow": "reject-publish"}; cleared at the end, and the queue
    deleted. Set it before the queue is declared."""
    policy = f"{name}.policy"
    rabbitmqctl("set_policy", "--apply-to", "queues", "--priority", "100", policy,
                f"^{re.escape(name)}$", json.dumps(dict(definition)))
    try:
        yield
    finally:
        rabbitmqctl("clear_policy", policy)
        delete_queues(name)


def delete_queues(*names: str) -> None:
    """Delete these queues of the shared broker (those that exist)."""
    for name in names:
        subprocess.run([*RABBITMQCTL, "delete_queue", name], capture_output=True, timeout=120, check=False)


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.messages: queues.Queue[Any] = queues.Queue()
        self.changed = threading.Condition()
        self.receipts: set[str] = set()
        self.errors: list[str] = []
        self.closed = False

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        with self.changed:
            self.receipts.add(frame.headers["receipt-id"])
            self.changed.notify_all()

    def on_error(self, frame: Any) -> None:
        body = frame.body.decode(errors="replace") if isinstance(frame.body, bytes) else str(frame.body)
        with self.changed:
            self.errors.append(f"{frame.headers.get('message')}: {body}")
            self.changed.notify_all()

    def on_disconnected(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()


class BareStomp:
    """One STOMP 1.2 connection to RabbitMQ as any client has it: every MESSAGE kept in order, every
    RECEIPT and ERROR noted, and whether the broker closed the connection."""

    def __init__(self, address: tuple[str, int], login: tuple[str, str] = ("guest", "guest")) -> None:
        self.conn = stomp.Connection12([address], auto_decode=False, vhost="/")
        self._frames = _Listener()
        self.conn.set_listener("bare", self._frames)
        self.conn.connect(*login, wait=True)

    @property
    def errors(self) -> list[str]:
        return list(self._frames.errors)

    @property
    def closed(self) -> bool:
        return self._frames.closed

    def send(self, destination: str, body: bytes, headers: Mapping[str, str] | None = None,
             *, timeout: float = 10.0) -> bool:
        """SEND persistent with a receipt; True once the broker receipted it, False when it closed
        the connection (or answered ERROR) first. TimeoutError when neither came in `timeout` s."""
        receipt = uuid.uuid4().hex
        try:
            self.conn.send(destination, body, headers={"persistent": "true", **(headers or {}), "receipt": receipt})
        except StompException:
            return False  # it was already closed
        return self.wait_receipt(receipt, timeout)

    def wait_receipt(self, receipt: str, timeout: float = 10.0) -> bool:
        """True once RECEIPT `receipt` came; False when the connection closed without it."""
        with self._frames.changed:
            answered = self._frames.changed.wait_for(
                lambda: receipt in self._frames.receipts or self._frames.closed, timeout)
            if not answered:
                raise TimeoutError(f"neither RECEIPT {receipt} nor the connection's end came within {timeout:g} s "
                                   f"(errors: {self._frames.errors})")
            return receipt in self._frames.receipts

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """Whether the broker closed the connection within `timeout` seconds."""
        with self._frames.changed:
            return bool(self._frames.changed.wait_for(lambda: self._frames.closed, timeout))

    def subscribe(self, destination: str, ack: str, headers: Mapping[str, str] | None = None,
                  sub_id: str = "s") -> None:
        """SUBSCRIBE with a receipt; returns once the broker has the subscription."""
        receipt = uuid.uuid4().hex
        self.conn.subscribe(destination, id=sub_id, ack=ack, headers={**(headers or {}), "receipt": receipt})
        assert self.wait_receipt(receipt), f"SUBSCRIBE {destination} refused: {self._frames.errors}"

    def take(self, count: int, timeout: float = 10.0) -> list[Any]:
        """The next `count` MESSAGE frames; TimeoutError if they did not all come within `timeout` s."""
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                got.append(self._frames.messages.get(timeout=max(0.0, deadline - time.monotonic())))
            except queues.Empty:
                raise TimeoutError(f"{len(got)} of {count} messages came within {timeout:g} s: "
                                   f"{[bytes(f.body) for f in got]}") from None
        return got

    def until_quiet(self, quiet: float = 1.0) -> list[Any]:
        """The MESSAGE frames that come until none came for `quiet` seconds."""
        got = []
        while True:
            try:
                got.append(self._frames.messages.get(timeout=quiet))
            except queues.Empty:
                return got

    def close(self) -> None:
        with contextlib.suppress(StompException, OSError):
            if self.conn.is_connected():
                self.conn.disconnect()


def bodies_of(frames: list[Any]) -> list[bytes]:
    return [bytes(f.body) for f in frames]


def drain(address: tuple[str, int], destination: str, quiet: float = 1.0) -> list[Any]:
    """Every message on `destination`, consumed (ack auto), until none came for `quiet` seconds."""
    client = BareStomp(address)
    try:
        client.subscribe(destination, "auto", {"prefetch-count": "500"})
        return client.until_quiet(quiet)
    finally:
        client.close()


def declare(address: tuple[str, int], name: str, headers: Mapping[str, str] | None = None) -> None:
    """Declare durable queue `name` (a SUBSCRIBE to /queue/NAME with `headers`, e.g.
    {"x-queue-type": "quorum"}), consuming nothing."""
    client = BareStomp(address)
    try:
        client.subscribe(f"/queue/{name}", "client-individual",
                         {"durable": "true", "auto-delete": "false", "prefetch-count": "1", **(headers or {})})
        client.conn.unsubscribe(id="s")
    finally:
        client.close()


# -- messages with test ids ---------------------------------------------------------------------
def numbered_ids(count: int, tag: str) -> list[str]:
    return [f"{tag}-{i:05d}" for i in range(count)]


def body_of(test_id: str, size: int = 200) -> bytes:
    """A body that starts with its test id and carries every byte value (a changed byte shows)."""
    head = f"{test_id}:".encode()
    return (head + bytes(range(256)) * (size // 256 + 1))[:max(size, len(head))]


def id_of_body(body: bytes) -> str:
    return bytes(body).split(b":", 1)[0].decode(errors="replace")


@dataclass
class Accounting:
    """Every message sent, accounted for in what arrived (a table, a queue...): lost, duplicated,
    unexpected, like a total-queue checker."""

    sent: list[str]
    arrived: list[str]
    lost: list[str] = field(init=False)
    duplicated: dict[str, int] = field(init=False)  # id -> times it arrived (> 1)
    unexpected: list[str] = field(init=False)

    def __post_init__(self) -> None:
        counts: dict[str, int] = {}
        for test_id in self.arrived:
            counts[test_id] = counts.get(test_id, 0) + 1
        expected = set(self.sent)
        self.lost = [i for i in self.sent if i not in counts]
        self.duplicated = {i: n for i, n in counts.items() if n > 1 and i in expected}
        self.unexpected = sorted(i for i in counts if i not in expected)

    @property
    def extra_rows(self) -> int:
        """Rows beyond the first of each duplicated message."""
        return sum(n - 1 for n in self.duplicated.values())

    def __str__(self) -> str:
        return (f"{len(self.sent)} sent, {len(self.arrived)} arrived: {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated ({self.extra_rows} extra), {len(self.unexpected)} unexpected; "
                f"e.g. lost {self.lost[:3]} duplicated {list(self.duplicated.items())[:3]} "
                f"unexpected {self.unexpected[:3]}")


# -- a producer that loses nothing --------------------------------------------------------------
class LosslessProducer:
    """Sends each message (its test id in `TEST_ID` and its body), persistent, one at a time, each
    confirmed by its receipt; a SEND not receipted (RabbitMQ closes the connection of a SEND that
    `reject-publish` refuses) is sent again on a new connection after `pause` seconds. One at a
    time, a SEND without a receipt is one the queue did not take: the producer itself never sends
    a message twice into the queue."""

    def __init__(self, address: tuple[str, int], destination: str, ids: list[str], *,
                 headers: Mapping[str, str] | None = None, pause: float = 0.02, timeout: float = 240) -> None:
        self.address, self.destination, self.ids = address, destination, ids
        self.headers = dict(headers or {})
        self.pause, self.timeout = pause, timeout
        self.refused = 0  # SENDs not receipted (sent again)
        self.connections = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lossless-producer", daemon=True)

    def start(self) -> LosslessProducer:
        self._thread.start()
        return self

    def run(self) -> None:
        """Send everything in this thread."""
        self._run()
        self._raise()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(self.timeout if timeout is None else timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the producer did not send its {len(self.ids)} messages within {self.timeout:g} s "
                               f"({self.refused} SENDs refused so far)")
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        client: BareStomp | None = None
        try:
            for test_id in self.ids:
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{test_id} not taken by {self.destination} within {self.timeout:g} s")
                    if client is None or client.closed:
                        if client is not None:
                            client.close()
                        client = BareStomp(self.address)
                        self.connections += 1
                    if client.send(self.destination, body_of(test_id), {**self.headers, TEST_ID: test_id}):
                        break
                    self.refused += 1
                    time.sleep(self.pause)  # the queue is full: let the consumer make room
        except BaseException as exc:  # reported by join()/run()
            self.error = exc
        finally:
            if client is not None:
                client.close()


# -- a control consumer -------------------------------------------------------------------------
class ControlConsumer:
    """A plain stomp.py consumer acknowledging each message as it comes (ack client-individual):
    what any application would do, to compare the bridge with. Keeps the test ids it got."""

    def __init__(self, address: tuple[str, int], destination: str, prefetch: int = 500) -> None:
        self.client = BareStomp(address)
        self.client.subscribe(destination, "client-individual", {"prefetch-count": str(prefetch)})
        self.ids: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        frames = self.client._frames.messages  # noqa: SLF001 -- the consumer is the client's own
        while not self._stop.is_set():
            try:
                frame = frames.get(timeout=0.1)
            except queues.Empty:
                continue
            self.client.conn.ack(frame.headers["ack"])
            self.ids.append(frame.headers[TEST_ID])

    def stop_when_quiet(self, quiet: float = 2.0, timeout: float = 120) -> list[str]:
        """Stop once nothing came for `quiet` seconds; the ids it consumed."""
        deadline = time.monotonic() + timeout
        seen = -1
        while seen != len(self.ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the control consumer was still receiving after {timeout:g} s")
            seen = len(self.ids)
            time.sleep(quiet)
        self._stop.set()
        self._thread.join(10)
        self.client.close()
        return self.ids


# -- a tap on what a client sends ---------------------------------------------------------------
class StompTap(TcpProxy):
    """A loopback TCP proxy in front of the broker that records the command and destination of
    every frame its clients send (the broker's answers pass untouched): a test asks it whether a
    bridge ever sent a message to a given queue."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.sent: list[tuple[str, str]] = []  # (command, destination or "")
        super().__init__(target)

    def sends_to(self, destination: str) -> int:
        """How many SEND frames went to `destination`."""
        with self._lock:
            return sum(1 for command, dest in self.sent if command == "SEND" and dest == destination)

    def destinations_sent_to(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for command, dest in self.sent:
                if command == "SEND":
                    counts[dest] = counts.get(dest, 0) + 1
            return counts

    def _watcher(self) -> Callable[[bytes], None]:
        parser = _FrameParser()  # one per connection: a frame may span reads

        def record(data: bytes) -> None:
            if frames := parser.feed(data):
                with self._lock:
                    self.sent.extend(frames)
        return record


class _FrameParser:
    """STOMP frames out of a byte stream: (command, destination) of each complete frame."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        self.buffer += data
        frames: list[tuple[str, str]] = []
        while True:
            self.buffer = self.buffer.lstrip(b"\r\n")  # heart-beats between frames
            end_of_headers = self.buffer.find(b"\n\n")
            if end_of_headers < 0:
                return frames
            lines = self.buffer[:end_of_headers].decode(errors="replace").replace("\r", "").split("\n")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers.setdefault(key, value)  # STOMP 1.2: the first of a repeated header counts
            start = end_of_headers + 2
            if "content-length" in headers:
                end = start + int(headers["content-length"])
                if len(self.buffer) < end + 1:
                    return frames
            else:
                end = self.buffer.find(b"\0", start)
                if end < 0:
                    return frames
            frames.append((lines[0], headers.get("destination", "")))
            self.buffer = self.buffer[end + 1:]
