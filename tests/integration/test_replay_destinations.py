"""A replay to a destination that does not exist fails with the reason and records nothing (the
shared RabbitMQ and ActiveMQ, `mqbridge replay` processes).

First what the brokers do, with a bare stomp.py client: RabbitMQ confirms (RECEIPT) a SEND to
`/amq/queue/NAME` of a queue that does not exist and drops the message, and a SEND to an exchange
that no binding routes; it answers a SUBSCRIBE to that queue with ERROR `not_found`, a SEND to an
exchange that does not exist too; it declares the queue of a SEND to `/queue/NAME`; a subscription
with prefetch 1 closed at once leaves every message on the queue (the one it was handed comes again,
flagged redelivered). A SEND's `message-id` is never the delivered one: ActiveMQ gives its own,
RabbitMQ refuses the header (why `identity = "msg_id"` never recognises a row replayed over STOMP).

Then the replay: `/amq/queue/<missing>` and `/exchange/<missing>/...` are refused before Spark
starts (exit 2, the reason, nothing in the replay ledger, the marker queue never declared); the
check of an existing queue consumes nothing; an existing exchange is accepted with a note that
RabbitMQ drops what no binding routes.
"""

from __future__ import annotations

import queue as queues
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import stomp

from mqbridge.config import StompSourceConfig, load_config
from mqbridge.landing.arrow_writer import write_bulk
from mqbridge.landing.rows import arrow_table
from mqbridge.listeners.stomp.replay import StompReplayTarget
from mqbridge.message import Bulk, Message
from mqbridge.resend.replay import REPLAY_LEDGER_FILE
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit
from tests.support.processes import mqbridge, stomp_config

pytestmark = pytest.mark.integration


@dataclass
class _Seen(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    """Every frame a bare connection got, in order."""

    frames: queues.Queue[tuple[str, Any]] = field(default_factory=queues.Queue)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def on_receipt(self, frame: Any) -> None:
        self.frames.put(("RECEIPT", frame))

    def on_error(self, frame: Any) -> None:
        self.frames.put(("ERROR", frame))

    def on_message(self, frame: Any) -> None:
        self.frames.put(("MESSAGE", frame))

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def next(self, what: str, timeout: float = 10.0, *, skip: tuple[str, ...] = ()) -> Any:
        """The next frame that is not one of `skip`; it must be a `what`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                kind, frame = self.frames.get(timeout=max(0.0, deadline - time.monotonic()))
            except queues.Empty:
                raise AssertionError(f"no {what} frame from the broker within {timeout:.0f}s") from None
            if kind not in skip:
                assert kind == what, (kind, frame.headers, frame.body)
                return frame


@contextmanager
def _bare(address: tuple[str, int], vhost: str, login: tuple[str, str] | None = None) -> Iterator[tuple[Any, _Seen]]:
    conn = stomp.Connection12([address], auto_decode=False, vhost=vhost)
    seen = _Seen()
    conn.set_listener("fact", seen)
    conn.connect(*(login or (None, None)), wait=True)
    try:
        yield conn, seen
    finally:
        if conn.is_connected() and not seen.disconnected.is_set():  # after an ERROR the broker has closed it
            conn.disconnect()


def _rabbit(rabbitmq: tuple[str, int]) -> Any:
    return _bare(rabbitmq, "/", ("guest", "guest"))


def _name(prefix: str) -> str:
    return f"test.{prefix}.{uuid.uuid4().hex[:8]}"


def test_what_rabbitmq_and_activemq_do_with_sends_that_reach_no_queue(rabbitmq: tuple[str, int],
                                                                       activemq: tuple[str, int]) -> None:
    missing, exchange, declared, held = _name("missing"), _name("no-exchange"), _name("declared"), _name("held")
    # A SEND to /amq/queue/<missing> is confirmed; the queue is not made; a SUBSCRIBE says not_found
    with _rabbit(rabbitmq) as (conn, seen):
        conn.send(f"/amq/queue/{missing}", b"lost", headers={"receipt": "r1", "persistent": "true"})
        seen.next("RECEIPT")
        conn.send(f"/exchange/amq.direct/{missing}", b"unroutable", headers={"receipt": "r2"})
        seen.next("RECEIPT")  # an exchange no binding routes: confirmed, dropped
    with _rabbit(rabbitmq) as (conn, seen):
        conn.subscribe(f"/amq/queue/{missing}", id="s", ack="client-individual",
                       headers={"receipt": "r3", "prefetch-count": "1"})
        assert b"no queue" in seen.next("ERROR").body
        assert seen.disconnected.wait(10), "RabbitMQ to close the connection after its ERROR"
    # A SEND to an exchange that does not exist: ERROR not_found, the connection closed
    with _rabbit(rabbitmq) as (conn, seen):
        conn.send(f"/exchange/{exchange}/k", b"x", headers={"receipt": "r4"})
        assert seen.next("ERROR").headers["message"] == "not_found"
        assert seen.disconnected.wait(10), "RabbitMQ to close the connection after its ERROR"
    # A SEND to /queue/<name> declares the queue
    rabbit = Rabbit(rabbitmq)
    rabbit.put(f"/queue/{declared}", [(b"kept", {})])
    assert [bytes(f.body) for f in rabbit.deliveries(f"/amq/queue/{declared}", ack=True)] == [b"kept"]
    # A subscription with prefetch 1 closed at once leaves every message; the one it was handed (the
    # first) comes again, flagged redelivered
    rabbit.put(f"/queue/{held}", [(b"m%d" % i, {}) for i in range(3)])
    with _rabbit(rabbitmq) as (conn, seen):
        conn.subscribe(f"/amq/queue/{held}", id="s", ack="client-individual",
                       headers={"receipt": "r5", "prefetch-count": "1"})
        seen.next("RECEIPT", skip=("MESSAGE",))  # the broker may hand the message over before its receipt
    after = rabbit.deliveries(f"/amq/queue/{held}", ack=True)
    assert sorted((bytes(f.body), f.headers["redelivered"]) for f in after) == [(b"m0", "true"), (b"m1", "false"),
                                                                                (b"m2", "false")]
    # A SEND's message-id: RabbitMQ refuses it; ActiveMQ delivers the message with an id of its own
    with _rabbit(rabbitmq) as (conn, seen):
        conn.send(f"/queue/{declared}", b"x", headers={"message-id": "mine-1", "receipt": "r6"})
        assert b"message-id" in seen.next("ERROR").body
    own = f"/queue/{_name('own-id')}"
    with _bare(activemq, "127.0.0.1") as (conn, seen):
        conn.send(own, b"x", headers={"message-id": "ID:mine-1", "receipt": "r7"})
        seen.next("RECEIPT")
        conn.subscribe(own, id="s", ack="auto")
        delivered = seen.next("MESSAGE")
        assert delivered.headers["message-id"] not in ("", "ID:mine-1")


@pytest.fixture
def rabbit_table(tmp_path: Path, rabbitmq: tuple[str, int]) -> Path:
    """A configuration on the shared RabbitMQ whose warehouse holds a table `orders` of three rows."""
    bulk = Bulk("orders", bulk_id="bulk-1")
    for i in range(3):
        bulk.add(Message(msg_id=f"m{i}", body=b"row-%d" % i, source="amq", destination="/queue/o",
                         put_timestamp=datetime(2026, 11, 26, 9, i, tzinfo=timezone.utc)))
    write_bulk(arrow_table(bulk, [0, 1, 2]), tmp_path / "landing" / "orders", codec="snappy", file_bytes=1 << 20)
    return stomp_config(tmp_path, f"/queue/{_name('unused')}", port=rabbitmq[1], broker="rabbitmq",
                        extra_source=RABBIT_SOURCE)


@pytest.mark.parametrize(("to", "what"), [("/amq/queue/{name}", "queue"), ("/exchange/{name}/orders", "exchange")])
def test_a_replay_to_a_missing_rabbitmq_queue_or_exchange_is_refused_recording_nothing(
        rabbit_table: Path, rabbitmq: tuple[str, int], to: str, what: str) -> None:
    # When rows are replayed to a queue (or exchange) that does not exist
    name = _name("replay-missing")
    started = time.monotonic()
    proc = mqbridge("replay", "--config", str(rabbit_table), "--table", "orders", "--to", to.format(name=name))
    out, _ = proc.communicate(timeout=240)

    # Then the replay fails with the reason, before Spark starts, and records nothing
    assert proc.returncode == 2, out
    assert f"the {what} {name} does not exist on RabbitMQ" in out and "Nothing was sent" in out, out
    assert "starting Spark" not in out and time.monotonic() - started < 60, out
    assert not (rabbit_table.parent / "state" / REPLAY_LEDGER_FILE).exists()  # no replay ledger, no batch
    # ... and neither the destination nor a marker queue was made
    with _rabbit(rabbitmq) as (conn, seen):
        conn.subscribe(f"/amq/queue/{name}", id="s", ack="client-individual", headers={"prefetch-count": "1"})
        assert b"no queue" in seen.next("ERROR").body
        assert seen.disconnected.wait(10), "RabbitMQ to close the connection after its ERROR"


def test_the_check_of_an_existing_queue_consumes_nothing_and_an_exchange_gets_a_note(
        rabbit_table: Path, rabbitmq: tuple[str, int]) -> None:
    # Given a queue holding three messages
    rabbit = Rabbit(rabbitmq)
    name = _name("replay-existing")
    rabbit.put(f"/queue/{name}", [(b"m%d" % i, {}) for i in range(3)])
    source = load_config(str(rabbit_table)).sources["amq"]
    assert isinstance(source, StompSourceConfig)

    # When replay targets are built for it (the check runs) and for an existing exchange
    for destination in (f"/amq/queue/{name}", f"/queue/{name}"):
        target = StompReplayTarget("amq", source, destination, "r-exists", 5.0)
        target.close()
        assert target.notes == []
    target = StompReplayTarget("amq", source, f"/exchange/amq.direct/{name}", "r-exists", 5.0)
    target.close()

    # Then every message is still on the queue; the exchange is accepted with a note
    assert sorted(bytes(f.body) for f in rabbit.deliveries(f"/amq/queue/{name}", ack=True)) == [b"m0", b"m1", b"m2"]
    assert len(target.notes) == 1
    assert "drops a message that no binding of exchange amq.direct routes" in target.notes[0]


def test_a_header_rabbitmq_takes_makes_activemq_drop_the_connection(rabbitmq: tuple[str, int],
                                                                    activemq: tuple[str, int]) -> None:
    # The fact `mqbridge follow`'s backout rests on: a row landed from RabbitMQ can carry a header
    # value that ActiveMQ refuses (JMSXGroupSeq is a number there). RabbitMQ confirms the SEND;
    # ActiveMQ closes the connection, with no ERROR and no receipt: a refusal of this row, which a
    # follow tells from an outage by opening the connection again (the broker is there).
    destination = f"/queue/{_name('group-seq')}"
    with _rabbit(rabbitmq) as (conn, seen):
        conn.send(destination, b"x", headers={"JMSXGroupSeq": "abc", "receipt": "r1"})
        seen.next("RECEIPT")
    with _bare(activemq, "/", ("admin", "admin")) as (conn, seen):
        conn.send(destination, b"x", headers={"JMSXGroupSeq": "abc", "receipt": "r2"})
        assert seen.disconnected.wait(10), "ActiveMQ to close the connection"
        assert seen.frames.empty(), "no ERROR, no RECEIPT"
    with _bare(activemq, "/", ("admin", "admin")) as (conn, seen):  # the broker is there
        conn.send(destination, b"y", headers={"JMSXGroupSeq": "7", "receipt": "r3"})
        seen.next("RECEIPT")
